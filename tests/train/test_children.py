"""A job ends and reaps every child it started, on every way out; a run leaves nothing holding its stdout."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mrgrpo.train.children import reaped_children

ROOT = Path(__file__).resolve().parents[2]


def _sleeper() -> None:
    time.sleep(120)


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _default_signals() -> None:
    """In the child before exec: SIGINT and SIGTERM as a terminal gives them, whatever this test
    process inherited (a background job of a non-interactive shell starts with SIGINT ignored,
    and an ignored or blocked signal stays so across exec)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _start_child() -> multiprocessing.Process:
    child = multiprocessing.get_context("fork").Process(target=_sleeper, daemon=False)
    child.start()
    return child


@pytest.fixture
def sigterm_default():
    """Forked children inherit the parent's SIGTERM handler (Ray's driver installs one): start
    them with the default disposition, as a job process has, and restore the handler after."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_children_started_in_the_job_are_reaped_on_normal_end_and_on_error(sigterm_default):
    before = _start_child()  # a child from before the job: left alone
    try:
        with reaped_children(grace=1.0):
            inside = _start_child()
        assert _gone(inside.pid)
        with pytest.raises(RuntimeError), reaped_children(grace=1.0):
            failing = _start_child()
            raise RuntimeError("job failed")
        failing.join(5)
        assert not failing.is_alive() and failing.exitcode == -signal.SIGTERM  # its owner collects the status
        assert before.is_alive()
    finally:
        before.kill()
        before.join()


def test_agent_scoring_workers_die_with_their_parent_even_on_sigkill():
    script = (
        "from mrgrpo.rewards.agent import _pool\n"
        "import os, sys, time\n"
        "pool = _pool(2); list(pool.map(abs, [1, 2]))\n"
        "print(' '.join(str(p) for p in pool._processes), flush=True); time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    workers = [int(p) for p in parent.stdout.readline().split()]
    assert len(workers) == 2 and all(psutil.pid_exists(p) for p in workers)
    parent.kill()  # no Python cleanup runs: the kernel's parent-death signal ends the workers
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                                              for p in workers):
        time.sleep(0.1)
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in workers)


@pytest.mark.slow  # starts a real AgentDojo run per signal
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signalled_run_leaves_no_process_holding_its_output(sig, tmp_path):
    """The issue's hang: `mrgrpo train ... | tail` waited on orphaned children. Start an AgentDojo run
    (its scoring pool starts in the pre-model-load check), signal it once children exist, then read its
    pipes to the end: that returns only when no process of the run holds them."""
    run = subprocess.Popen(
        [sys.executable, "-m", "mrgrpo.cli", "train", "--config", "configs/agentdojo.yaml", "--out", str(tmp_path / "r"),
         "--set", "max_steps=50"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, preexec_fn=_default_signals,
    )
    me = psutil.Process(run.pid)
    seen: set[int] = set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(seen) < 2 and run.poll() is None:
        seen |= {c.pid for c in me.children(recursive=True)}
        time.sleep(0.2)
    assert len(seen) >= 2, "the run started no children"
    os.kill(run.pid, sig)
    try:
        run.communicate(timeout=120)  # EOF on both pipes: nothing of the run holds them any more
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        raise AssertionError("a process of the run still holds its stdout/stderr")
    # a killed process closes its files before it becomes a zombie: give the kernel a moment
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _still_running(seen):
        time.sleep(0.1)
    assert not _still_running(seen)


def _still_running(pids: set[int]) -> list[int]:
    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_period(sigterm_default):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the fork
    with reaped_children(grace=0.5):
        stubborn = _start_child()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert _gone(stubborn.pid)
    stubborn.join(5)
    assert stubborn.exitcode == -signal.SIGKILL


def test_the_one_tree_walk_finds_every_descendant_as_psutil_does():
    # descendants() is the walk reaped_children and the profiler's memory sampler share: the job's
    # tree through /proc/<pid>/task/*/children, grandchildren included, with a start time each.
    from mrgrpo.train.children import descendants

    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(psutil.Process(child.pid).children()) < 1:
            time.sleep(0.05)
        expected = {p.pid for p in psutil.Process().children(recursive=True)}  # earlier tests' pools too
        below = {p.pid for p in psutil.Process(child.pid).children(recursive=True)}  # the grandchild
        found = descendants()
        assert len(below) == 1 and {child.pid} | below <= set(found) and set(found) == expected
        assert set(descendants(child.pid)) == below
        assert descendants()[child.pid] == found[child.pid] > 0  # a start time, stable between walks
        assert descendants(2**22 + 7) == {}  # no such process
    finally:
        for process in psutil.Process(child.pid).children(recursive=True):
            process.kill()
        child.kill()
        child.wait()
