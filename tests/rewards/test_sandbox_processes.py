"""How the caller starts each run's processes (``mrgrpo.rewards.sandbox.processes``, the
candidate launcher in ``child/boot.py``): a spare candidate, confined before its run, serves only
a run whose limits are the ones it was confined for; a run's judge and candidate share one CPU."""

from __future__ import annotations

import os
import random
import time

import pytest

from mrgrpo.rewards import sandbox
from mrgrpo.rewards.sandbox import Job, Limits, run, run_many

# Each run reports the limits it is under: rlimits and, with a private root, its tmpfs.
LIMITS_SEEN = """
import os
import resource

def seen():
    rlimits = [resource.getrlimit(r)[0] for r in (resource.RLIMIT_AS, resource.RLIMIT_NOFILE,
                                                   resource.RLIMIT_CPU, resource.RLIMIT_FSIZE)]
    tmpfs = None
    if os.getcwd() == "/tmp/work":
        fs = os.statvfs(".")
        tmpfs = [fs.f_blocks * fs.f_frsize, fs.f_files]
    return [rlimits, tmpfs]
"""

A = Limits(wall_s=10, cpu_s=3, memory_mb=512, open_files=64, file_size_mb=16, tmpfs_mb=64, tmpfs_inodes=16384)
B = Limits(wall_s=10, cpu_s=4, memory_mb=640, open_files=48, file_size_mb=8, tmpfs_mb=32, tmpfs_inodes=4096)


def limits_job(limits: Limits) -> Job:
    rlimits = [limits.memory_mb << 20, limits.open_files, limits.cpu_s, limits.file_size_mb << 20]
    tmpfs = [limits.tmpfs_mb << 20, limits.tmpfs_inodes]
    tests = f"def check(candidate):\n    got = candidate()\n    assert got[0] == {rlimits!r}, got\n" \
            f"    assert got[1] in (None, {tmpfs!r}), got\n"
    return Job(LIMITS_SEEN, tests, "humaneval", "seen", limits)


def test_every_run_is_under_its_own_limits_whatever_ran_before():
    """The candidate launcher confines its next spare for the limits of the last run; a run with
    other limits gets a candidate confined for its own (never the spare)."""
    order = [A, A, B, B, A, B, A, A, B]
    for limits in order:
        result = run(limits_job(limits))
        assert result.passed, result
    results = run_many([limits_job(limits) for limits in order * 3], workers=2)
    assert all(r.passed for r in results), [r for r in results if not r.passed][:2]


def _name_and_state(pid: str) -> str:
    try:
        status = open(f"/proc/{pid}/status").read().splitlines()
    except OSError:
        return "gone"
    return " ".join(line for line in status if line.startswith(("State:", "Seccomp:", "NSpid:")))


def _filters(status: str) -> int:
    """How many seccomp filters a process has (``Seccomp_filters``, Linux >= 5.9; else 2 once
    its capabilities are gone)."""
    for line in status.splitlines():
        if line.startswith("Seccomp_filters:"):
            return int(line.split()[1])
    caps = [line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")]
    return 2 if caps == ["0000000000000000"] else 0


def test_a_spare_candidate_waits_confined_for_the_next_run():
    result = run(limits_job(A))
    assert result.passed, result
    zygote = sandbox.processes._zygote_instance
    if zygote is None or zygote.candidate_launcher_pid is None or "chroot" not in result.isolation:
        pytest.skip("no candidate launcher here")
    sandbox.processes.settle()
    launcher = zygote.candidate_launcher_pid
    # It confines itself right after it is forked. A busy machine can take a while: mounts wait on
    # the kernel's mount lock, which another process's unmount of a large tmpfs holds for seconds;
    # and a spare made for other limits may still be ending.
    deadline = time.monotonic() + 60
    while True:
        children = open(f"/proc/{launcher}/task/{launcher}/children").read().split()
        try:
            status = open(f"/proc/{children[0]}/status").read() if children else ""
        except FileNotFoundError:  # reaped meanwhile
            status = ""
        # Confined: the candidates' own filter installed, the last step (the launcher's filter,
        # which every fork inherits, is the first of two; Seccomp: 2 alone shows only that one)
        if (len(children) == 1 and _filters(status) >= 2) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert len(children) == 1, [(pid, _name_and_state(pid)) for pid in children]  # the spare
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    caps = [line.split()[1] for line in status.splitlines() if line.startswith(("CapEff:", "CapPrm:", "CapBnd:"))]
    # confined before any run reaches it: no capability (as root: a uid of its own, and the
    # bounding set empty too; not root, it has none in its user namespace)
    assert caps[:2] == ["0000000000000000"] * 2
    if os.geteuid() == 0:
        assert "0" not in uids and caps[2] == "0000000000000000"
    assert "NoNewPrivs:\t1" in status and "Seccomp:\t2" in status


AFFINITY_TESTS = """
import os

def check(candidate):
    cpus = candidate()
    assert len(cpus) == 1, cpus
    assert os.sched_getaffinity(0) == set(cpus), (os.sched_getaffinity(0), cpus)
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: nothing to place")
@pytest.mark.parametrize("launcher", [True, False], ids=["launcher", "fresh-interpreter"])
def test_a_runs_judge_and_candidate_share_one_cpu(launcher):
    """The tests run in the judge: the CPU it may use is the candidate's, and only that one."""
    program = "import os\n\ndef cpus():\n    return sorted(os.sched_getaffinity(0))\n"
    jobs = [Job(program, AFFINITY_TESTS, "humaneval", "cpus", A) for _ in range(6)]
    before = os.sched_getaffinity(0)
    results = run_many(jobs, workers=2, launcher=launcher)
    assert all(r.passed for r in results), [r for r in results if not r.passed][:2]
    assert run(jobs[0], launcher=launcher).passed
    assert os.sched_getaffinity(0) == before  # the caller's own thread is never moved


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: nothing to place")
def test_the_placement_can_be_left_to_the_kernel(monkeypatch):
    monkeypatch.setenv(sandbox.processes.PLACEMENT_ENV, "0")
    program = "import os\n\ndef cpus():\n    return sorted(os.sched_getaffinity(0))\n"
    everywhere = sorted(os.sched_getaffinity(0))
    tests = f"def check(candidate):\n    assert candidate() == {everywhere!r}\n"
    results = run_many([Job(program, tests, "humaneval", "cpus", A) for _ in range(4)], workers=2)
    assert all(r.passed for r in results), [r for r in results if not r.passed][:2]


def test_ties_go_round_from_a_place_drawn_per_process():
    """Several processes using the sandbox do not all put their first run on the first CPU."""
    from mrgrpo.rewards.sandbox.processes import _Placement

    firsts = set()
    for _ in range(40):
        cpu = _Placement().pin((-1, -1))  # no such processes: only the choice is made
        if cpu is None:
            pytest.skip("one CPU here")
        firsts.add(cpu)
    assert len(firsts) > 1 and firsts <= os.sched_getaffinity(0)


# A program's garbage is collected as in any interpreter: collection is on at its top level and
# in each call, and a cycle it drops is found by the automatic collection, not kept until exit.
COLLECTED = """
import gc
import weakref

on_at_load = gc.isenabled()

class Node:
    pass

def collected():
    node = Node()
    node.self = node
    alive = weakref.ref(node)
    del node
    keep = [[] for _ in range(10_000)]  # allocations enough for the automatic collections to run
    return [on_at_load, gc.isenabled(), alive() is None]
"""


@pytest.mark.parametrize("launcher", [True, False], ids=["launcher", "fresh-interpreter"])
def test_the_program_runs_with_the_usual_garbage_collection(launcher):
    tests = "def check(candidate):\n    got = candidate()\n    assert got == [True, True, True], got\n"
    result = run(Job(COLLECTED, tests, "humaneval", "collected", Limits(wall_s=20, cpu_s=10)), launcher)
    assert result.passed, result


def test_a_job_that_raises_ends_the_batch_with_its_error_and_nothing_left_running(monkeypatch):
    payloads = sandbox._payloads

    def failing(job, *args, **kwargs):
        if "raise here" in job.program:
            raise RuntimeError("this job failed")
        return payloads(job, *args, **kwargs)

    monkeypatch.setattr(sandbox, "_payloads", failing)
    good = Job("def f():\n    return 1\n", "def check(candidate):\n    assert candidate() == 1\n", "humaneval", "f",
               Limits(wall_s=10, cpu_s=3))
    bad = Job("# raise here\n" + good.program, good.tests, "humaneval", "f", good.limits)
    with pytest.raises(RuntimeError, match="this job failed"):
        run_many([good] * 5 + [bad] + [good] * 5, workers=2)
    assert not sandbox.processes._live
    assert [r.passed for r in run_many([good] * 3, workers=2)] == [True] * 3  # the sandbox still serves


def test_timing_runs_draw_the_same_inputs_and_no_later_run_inherits_their_seed():
    from mrgrpo.rewards.sandbox import run_alone

    drawn = Job("def f(x):\n    print(repr(x))\n    return True\n",
                "import random\ndef check(candidate):\n    assert candidate(random.random())\n", "humaneval", "f",
                Limits(wall_s=10, cpu_s=3))
    timed = [r.stdout for r in run_alone([drawn], repeats=2)[0]]
    seeded = random.Random(sandbox.TIMING_SEED)
    continued = {repr(seeded.random()) + "\n" for _ in range(20)}  # what a judge left seeded would draw
    assert timed[0] == timed[1] == repr(random.Random(sandbox.TIMING_SEED).random()) + "\n"
    ordinary = [run(drawn).stdout for _ in range(3)]
    assert not continued & set(ordinary) and len(set(ordinary)) == 3
