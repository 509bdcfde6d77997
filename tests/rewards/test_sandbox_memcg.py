"""Given a delegated cgroup (``Limits.cgroup`` or ``MRGRPO_SANDBOX_CGROUP``), each candidate runs in
a memory cgroup of its own made there: the layer ``memcg`` is reported, its limit is
``memory_mb + tmpfs_mb`` + 32 MiB + 1 KiB per inode, the kernel's memory for the candidate counts
against it (a flood of directories, which no rlimit counts, is stopped at it with the verdict
``memory``), no cgroup outlives its run, and a directory that cannot serve is refused before
anything runs. Run here on cgroup v1's memory hierarchy (this machine's); the v2 checks that need
no memory controller run on the v2 hierarchy where one is mounted."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from mrgrpo.errors import ConfigError  # noqa: E402
from mrgrpo.rewards.sandbox import Job, Limits, Verdict, memcg, run, run_many  # noqa: E402
from test_sandbox_modes import MODES  # noqa: E402

TESTS = "def check(candidate):\n    assert candidate(1) == 2\n"
PLUS_ONE = "def f(x):\n    return x + 1\n"


def _mountinfo() -> list[tuple[str, str, str, str]]:
    """(root in its hierarchy, mount point, filesystem type, super options) of each mount."""
    mounts = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            before, after = line.split(" - ", 1)
            fields, tail = before.split(), after.split()
            mounts.append((fields[3], fields[4], tail[0], tail[2] if len(tail) > 2 else ""))
    return mounts


def _own_cgroup(version: int) -> str | None:
    """This process's cgroup directory in the memory hierarchy of cgroup ``version`` (1) or in
    the v2 hierarchy (2), or None."""
    with open("/proc/self/cgroup") as handle:
        lines = [line.rstrip("\n").split(":", 2) for line in handle]
    wanted = [path for _, controllers, path in lines
              if (version == 1 and "memory" in controllers.split(",")) or (version == 2 and controllers == "")]
    if not wanted:
        return None
    for root, point, fstype, options in _mountinfo():
        if (version == 1 and fstype == "cgroup" and "memory" in options.split(",")) or (version == 2 and fstype == "cgroup2"):
            if wanted[0] == root or wanted[0].startswith(root.rstrip("/") + "/"):
                return os.path.join(point, wanted[0][len(root.rstrip("/")):].lstrip("/"))
    return None


@pytest.fixture
def delegated():
    """A cgroup v1 memory directory of our own under this process's cgroup (root only)."""
    own = _own_cgroup(1)
    if own is None or not os.path.isdir(own) or not os.access(own, os.W_OK):
        pytest.skip("no writable directory of cgroup v1's memory hierarchy (the test's delegated cgroup)")
    path = os.path.join(own, f"mrgrpo-test-{os.getpid()}")
    os.mkdir(path)
    try:
        yield path
    finally:
        for name in os.listdir(path):
            if os.path.isdir(os.path.join(path, name)):
                os.rmdir(os.path.join(path, name))
        os.rmdir(path)


def children(path: str) -> list[str]:
    return sorted(name for name in os.listdir(path) if os.path.isdir(os.path.join(path, name)))


def test_limit_is_what_the_rlimits_allow_plus_headroom():
    assert memcg.limit_bytes(1024, 64, 16384) == ((1024 + 64 + 32) << 20) + (16384 << 10)
    assert memcg.limit_bytes(256, 8, 0) == (256 + 8 + 32) << 20


def test_the_environment_names_the_default_cgroup(monkeypatch):
    monkeypatch.setenv(memcg.CGROUP_ENV, "/sys/fs/cgroup/some/delegated")
    assert Limits().cgroup == "/sys/fs/cgroup/some/delegated"
    assert Limits(cgroup=None).cgroup is None
    monkeypatch.delenv(memcg.CGROUP_ENV)
    assert Limits().cgroup is None


def test_each_candidate_runs_in_a_cgroup_of_its_own_with_its_limit(delegated):
    """While the program runs its cgroup exists, holds one process and has the run's limit; the
    result names the layer; afterwards nothing is left."""
    limits = Limits(cgroup=delegated, memory_mb=512, tmpfs_mb=16, tmpfs_inodes=4096)
    seen: list[tuple[str, int, int]] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for name in children(delegated):
                try:
                    with open(os.path.join(delegated, name, "cgroup.procs")) as handle:
                        procs = handle.read().split()
                    with open(os.path.join(delegated, name, "memory.limit_in_bytes")) as handle:
                        limit = int(handle.read())
                except OSError:
                    continue
                if procs:
                    seen.append((name, len(procs), limit))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = run(Job("import time\ntime.sleep(0.5)\n" + PLUS_ONE, TESTS, "humaneval", "f", limits))
    finally:
        stop.set()
        watcher.join()
    assert result.passed, result
    assert result.isolation.split(",")[-1] == "memcg", result.isolation
    assert seen, "no cgroup with a process in it was seen during the run"
    assert {(count, limit) for _, count, limit in seen} == {(1, memcg.limit_bytes(512, 16, 4096))}
    assert len({name for name, _, _ in seen}) == 1
    assert children(delegated) == []


def test_without_a_cgroup_none_is_made_or_reported(delegated):
    result = run(Job(PLUS_ONE, TESTS, "humaneval", "f", Limits(cgroup=None)))
    assert result.passed and "memcg" not in result.isolation
    assert children(delegated) == []


FLOOD = """
import os
made = 0
try:
    for i in range(300000):
        os.mkdir("d%d" % i)
        made += 1
except OSError as error:
    print("refused", error)
print("made", made)
def f(x):
    return x + 1
"""


def test_the_kernel_memory_no_rlimit_counts_is_bounded(delegated, monkeypatch):
    """300,000 directories in the run's tmpfs (inodes allowed: 400,000) cost the kernel about 300
    MiB that neither ``memory_mb`` nor ``tmpfs_mb`` counts. Without a cgroup they are all made;
    in a cgroup limited to 160 MiB the candidate is stopped at the limit: verdict ``memory``."""
    limits = dict(memory_mb=256, tmpfs_inodes=400_000, cpu_s=30, wall_s=60)
    control = run(Job(FLOOD, TESTS, "humaneval", "f", Limits(cgroup=None, **limits)))
    assert control.passed and "made 300000" in control.stdout, control
    monkeypatch.setattr(memcg, "limit_bytes", lambda *_: 160 << 20)
    bounded = run(Job(FLOOD, TESTS, "humaneval", "f", Limits(cgroup=delegated, **limits)))
    assert bounded.verdict is Verdict.MEMORY and bounded.error_type == "MemoryLimitExceeded", bounded
    assert "made 300000" not in bounded.stdout
    assert children(delegated) == []


def test_memory_within_the_limit_is_not_touched(delegated):
    program = "x = bytearray(400 << 20)\nfor i in range(0, len(x), 4096):\n    x[i] = 1\n" + PLUS_ONE
    result = run(Job(program, TESTS, "humaneval", "f", Limits(cgroup=delegated, memory_mb=768)))
    assert result.passed, result


def test_a_batch_leaves_no_cgroup_behind(delegated):
    """A batch kills candidates with a private root without waiting for them (the launcher reaps
    them): their cgroups are removed once they are gone, by the end of the batch."""
    jobs = [Job(PLUS_ONE, TESTS, "humaneval", "f", Limits(cgroup=delegated))] * 12
    jobs += [Job("import time\ntime.sleep(20)\n" + PLUS_ONE, TESTS, "humaneval", "f",
                 Limits(cgroup=delegated, wall_s=0.5))] * 2
    results = run_many(jobs, workers=2)
    assert [r.verdict for r in results] == [Verdict.PASSED] * 12 + [Verdict.TIMEOUT] * 2
    assert all(r.isolation.endswith(",memcg") for r in results)
    assert children(delegated) == [] and memcg.remove_leftovers() == []


@pytest.mark.parametrize("problem", ["relative", "not a directory", "not a cgroup", "no memory controller"])
def test_a_cgroup_that_cannot_serve_is_refused_before_anything_runs(problem, tmp_path, monkeypatch):
    started = []
    if problem == "relative":
        path = "some/cgroup"
    elif problem == "not a directory":
        path = str(tmp_path / "missing")
    elif problem == "not a cgroup":
        path = str(tmp_path)
    else:
        own = _own_cgroup(2)
        if own is None or not os.path.isdir(own):
            pytest.skip("no cgroup v2 hierarchy mounted")
        with open(os.path.join(own, "cgroup.subtree_control")) as handle:
            if "memory" in handle.read().split():
                pytest.skip("this cgroup v2 directory passes the memory controller down")
        path = own
    import mrgrpo.rewards.sandbox.processes as processes

    real_execute = processes.execute
    monkeypatch.setattr(processes, "execute", lambda *args, **kwargs: started.append(1) or real_execute(*args, **kwargs))
    with pytest.raises(ConfigError) as raised:
        run(Job(PLUS_ONE, TESTS, "humaneval", "f", Limits(cgroup=path)))
    message = str(raised.value)
    assert "\n" not in message and repr(path) in message
    assert started == []  # refused before any process of the run was asked for
    if problem == "no memory controller":
        assert "memory controller" in message


@pytest.mark.parametrize("mode", MODES)
def test_in_every_privilege_mode(mode, delegated):
    """Each mode's caller given the cgroup (by the environment): its candidates report the layer,
    pass, and leave nothing (uid 65534 gets the directory delegated by ownership)."""
    from test_sandbox_modes import run_mode

    if mode == "nobody":  # delegated to that user: its directory and the files that move processes
        for name in ("cgroup.procs", "tasks"):
            os.chown(os.path.join(delegated, name), 65534, 65534)
        os.chown(delegated, 65534, 65534)
    top = Path(tempfile.mkdtemp(prefix="mrgrpo-memcg-"))
    try:
        top.chmod(0o755)
        jobs = top / "jobs.json"
        jobs.write_text(json.dumps([{"program": PLUS_ONE, "tests": TESTS, "entry_point": "f"}] * 3))
        jobs.chmod(0o644)
        results = run_mode(mode, str(jobs), env={memcg.CGROUP_ENV: delegated})["results"]
    finally:
        shutil.rmtree(top, ignore_errors=True)
    assert [r["verdict"] for r in results] == ["passed"] * 3, results
    assert all(r["isolation"].endswith(",memcg") for r in results), results
    assert children(delegated) == []


def test_a_cgroup_gone_after_its_check_stops_the_run(delegated):
    """The directory removed after its first run: the next run raises a one-line
    ``IsolationError`` (no run goes on without the cgroup it was given); no descriptor is left
    open."""
    from mrgrpo.errors import IsolationError

    path = os.path.join(delegated, "gone")
    os.mkdir(path)
    assert run(Job(PLUS_ONE, TESTS, "humaneval", "f", Limits(cgroup=path))).passed
    os.rmdir(path)
    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(IsolationError) as raised:
        run(Job(PLUS_ONE, TESTS, "humaneval", "f", Limits(cgroup=path)))
    assert "\n" not in str(raised.value) and "cgroup" in str(raised.value)
    assert len(os.listdir("/proc/self/fd")) == fds


def test_a_candidate_killed_at_its_cgroup_limit_is_judged_memory():
    """The report of a candidate that ended early, killed by SIGKILL: ``memory`` where its cgroup
    counted an OOM kill, else what SIGKILL means without one (the CPU limit's hard end)."""
    from mrgrpo.rewards.sandbox.results import parse_report

    lines = ["iso netns,chroot,seccomp", "error CandidateGone"]
    oom = parse_report(lines, 1, -9, "memory", 0.1, "", "")
    assert (oom.verdict, oom.error_type) == (Verdict.MEMORY, "MemoryLimitExceeded")
    plain = parse_report(lines, 1, -9, None, 0.1, "", "")
    assert (plain.verdict, plain.error_type) == (Verdict.TIMEOUT, "CPUTimeExceeded")
    finished = parse_report(["iso netns", "case 0 ok", "done 1 1000 -1"], 1, 0, "memory", 0.1, "", "")
    assert finished.verdict is Verdict.PASSED  # an OOM kill after the last answer changes nothing


def test_cgroups_of_a_caller_no_longer_alive_are_removed_by_the_next(delegated, monkeypatch):
    """A caller killed by SIGKILL removes none of its run cgroups; the next caller to check the
    directory removes those of callers no longer alive, and leaves those of live ones."""
    import subprocess

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = os.path.join(delegated, f"mrgrpo-{dead.pid}-7")
    live = os.path.join(delegated, f"mrgrpo-{os.getppid()}-3")
    other = os.path.join(delegated, "someone-elses")
    for path in (stale, live, other):
        os.mkdir(path)
    monkeypatch.setattr(memcg, "_checked", {})
    assert run(Job(PLUS_ONE, TESTS, "humaneval", "f", Limits(cgroup=delegated))).passed
    assert children(delegated) == sorted(os.path.basename(p) for p in (live, other))


def test_runs_without_the_launcher_get_one_too(delegated):
    result = run(Job(PLUS_ONE, TESTS, "humaneval", "f", Limits(cgroup=delegated)), launcher=False)
    assert result.passed and result.isolation.endswith(",memcg"), result
    assert children(delegated) == []
