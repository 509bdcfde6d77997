"""Sandbox processes end with their caller, on every exit path: a normal end, an exception
(``KeyboardInterrupt`` in the middle of ``run_many``), SIGINT, SIGTERM (default action: the
caller dies at once) and SIGTERM turned into ``SystemExit`` by a training script's handler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys, threading, time
    import mrgrpo.rewards.sandbox as sandbox
    from mrgrpo.rewards.sandbox import Job, Limits, run_many

    mode = sys.argv[1]
    # what a user's script starts with, whatever this test process passed down (in the full suite an
    # earlier test's libraries may leave SIGINT ignored or blocked, and forks inherit both)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if mode == "submit-exception":  # the interruption arrives while run_many is still submitting jobs
        import concurrent.futures
        submit = concurrent.futures.ThreadPoolExecutor.submit
        def slow_submit(self, *args, **kwargs):
            future = submit(self, *args, **kwargs)
            time.sleep(0.5)
            return future
        concurrent.futures.ThreadPoolExecutor.submit = slow_submit
    if mode == "term-handler":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    sleep = 0.5 if mode == "normal" else 60
    job = Job("import time\\ntime.sleep(%s)\\ndef f():\\n    return 1\\n" % sleep, "def check(c):\\n    assert c() == 1\\n",
              "humaneval", "f", Limits(wall_s=120, cpu_s=60))

    announced = []

    def alive(pid):
        try:
            return open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] not in "ZX"
        except OSError:
            return False

    def announce():
        while len(sandbox.processes._live) < 4:  # two runs (judge + candidate each) in flight
            time.sleep(0.01)
        announced.extend(sorted(sandbox.processes._live))
        zygote = sandbox.processes._zygote_instance
        # every process under the launcher too: the candidate launcher's spare candidates (and,
        # not root, its relay), which the caller does not know
        descendants, todo = [], [zygote.pid] if zygote is not None else []
        while todo:
            pid = todo.pop()
            try:
                children = [int(c) for c in open("/proc/%d/task/%d/children" % (pid, pid)).read().split()]
            except OSError:
                continue
            descendants += children
            todo += children
        print(json.dumps({"pids": sorted(sandbox.processes._live_pids()), "descendants": sorted(descendants),
                          "candidate_launcher": zygote is not None and zygote.candidate_launcher_pid is not None}), flush=True)
        if mode.endswith("exception"):
            sys.stdin.readline()  # the test has seen every process alive
            os.kill(os.getpid(), signal.SIGINT)  # KeyboardInterrupt, caught below: the process goes on

    threading.Thread(target=announce, daemon=True).start()
    try:
        results = run_many([job] * 6, workers=2)
        print(json.dumps([r.verdict.value for r in results]), flush=True)
    except KeyboardInterrupt:
        print(json.dumps({"interrupted": sorted(sandbox.processes._live), "alive": [p for p in announced if alive(p)]}), flush=True)
        if mode.endswith("exception"):
            sys.exit(0)
        raise
    """
)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")  # a zombie has ended (its reaping is up to its parent)


def start(mode: str):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        pytest.fail("the script printed nothing: " + proc.stderr.read()[-2000:])
    started = json.loads(line)
    pids = started["pids"]
    # the launcher, two judges and two candidates, and the candidate launcher that forks the
    # candidates wherever the system lets it make namespaces
    assert len(pids) == 5 + started["candidate_launcher"] and all(alive(p) for p in pids)
    # ... and everything under the launcher: those, the candidate launcher's spare candidates
    # waiting for a run (and, not root, its relay) must end too
    pids = sorted(set(pids) | set(started["descendants"]))
    try:
        proc.stdin.write("go\n")  # the exception modes interrupt themselves only now
        proc.stdin.flush()
    except BrokenPipeError:  # a mode that does not wait for it has already ended
        pass
    return proc, pids


def assert_all_end(pids, within: float = 15.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)]


def test_normal_end():
    proc, pids = start("normal")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert json.loads(out.splitlines()[-1]) == ["passed"] * 6
    assert_all_end(pids)


@pytest.mark.parametrize("mode", ["exception", "submit-exception"], ids=["while-running", "while-submitting"])
def test_exception_in_the_middle_of_run_many(mode):
    proc, pids = start(mode)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    # when the exception reached the caller, every run's processes had been killed and reaped
    assert json.loads(out.splitlines()[-1]) == {"interrupted": [], "alive": []}
    assert_all_end(pids)


@pytest.mark.parametrize("sig, mode", [(signal.SIGINT, "plain"), (signal.SIGTERM, "plain"), (signal.SIGTERM, "term-handler")],
                         ids=["SIGINT", "SIGTERM", "SIGTERM-handler"])
def test_signals(sig, mode):
    proc, pids = start(mode)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert_all_end(pids)


def test_a_forked_caller_starts_its_own_launcher_and_the_parents_still_ends_with_it():
    script = textwrap.dedent(
        """
        import json, os, sys
        import mrgrpo.rewards.sandbox as sandbox
        from mrgrpo.rewards.sandbox import Job, run
        job = Job("def f():\\n    return 1\\n", "def check(c):\\n    assert c() == 1\\n", "humaneval", "f")
        assert run(job).passed
        parent_launcher = sandbox.processes._zygote_instance.pid
        child = os.fork()
        if child == 0:  # e.g. a data-loader worker: it runs its own jobs and outlives the parent
            ok = run(job).passed and sandbox.processes._zygote_instance.pid != parent_launcher
            print(json.dumps({"child_ok": ok, "child_launcher": sandbox.processes._zygote_instance.pid, "child": os.getpid()}), flush=True)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            import time
            time.sleep(5)
            os._exit(0)
        print(json.dumps({"parent_launcher": parent_launcher}), flush=True)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    got = {k: v for line in lines for k, v in line.items()}
    assert got.get("child_ok") is True, proc.stderr[-2000:]
    assert alive(got["child"])  # the parent has exited, its forked child lives on...
    assert_all_end([got["parent_launcher"]], within=3.0)  # ...and the parent's launcher ended with the parent
    assert alive(got["child"])
    assert_all_end([got["child_launcher"]])
