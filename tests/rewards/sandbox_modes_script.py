"""Runs a batch of sandbox jobs under one privilege mode and prints what happened as JSON.

Started by ``test_sandbox_modes.py`` as its own process (so that it can be a different user,
or sit in a user namespace or under a seccomp filter, without touching the test process):

    python sandbox_modes_script.py MODE JOBS.json SRC_DIR
    python sandbox_modes_script.py MODE --lifecycle=PATH SRC_DIR

MODE: ``as-is`` (the caller's own privileges), ``userns-root`` (first unshare a user namespace
mapping this user to uid 0, as ``unshare -U -r`` and rootless containers do),
``userns-root-no-namespaces`` (that user namespace, then namespaces refused as below: a
rootless container whose seccomp profile refuses them), ``userns-wide-no-namespaces`` (the
same in a user namespace mapping 0 to this user and 1-65536 to others, as rootless podman does;
needs root), ``no-namespaces``
(first install a seccomp filter refusing namespaces, as Docker's default profile does),
``no-namespaces-no-landlock`` (the same, and Landlock not tried). The uid drop of the
``nobody`` mode is done by the test when it starts this script. ``MRGRPO_TEST_REFUSE`` names
more layers not to try, comma-separated.

It imports the sandbox package without the rest of ``mrgrpo`` (whose dependencies another
user's interpreter may lack), counts every catchable signal it receives, and prints one JSON
line: ``{"uid", "results": [{verdict, error_type, cases_passed, isolation, test_time, wall, stdout}], "signals",
"efficiency": {case: [score per program], case + ":pass": [pass per program]}}`` (the efficiency
cases come from ``JOBS.json.efficiency``).
Each job's ``{CALLER}`` in the program is replaced by this process's pid first.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import struct
import sys
import types


def stub_packages(src: str) -> None:
    for name in ("mrgrpo", "mrgrpo.rewards"):
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(src, *name.split("."))]
        sys.modules[name] = module


def enter_user_namespace_as_root() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
    for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"0 {uid} 1"), ("/proc/self/gid_map", f"0 {gid} 1")):
        with open(path, "w") as handle:
            handle.write(text)


def enter_wide_user_namespace() -> None:
    """A rootless podman's map: uid and gid 0 to this user, 1-65536 to 200000-265535. A map of
    more than one's own id needs CAP_SETUID over the parent namespace, so a helper forked before
    the unshare (real root here, as ``newuidmap`` is setuid root) writes it."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.geteuid(), os.getegid()
    ready_r, ready_w = os.pipe()
    helper = os.fork()
    if helper == 0:
        os.close(ready_w)
        code = 1
        try:
            if os.read(ready_r, 1) == b"u":
                target = os.getppid()
                for name, own in (("uid_map", uid), ("gid_map", gid)):
                    with open(f"/proc/{target}/{name}", "w") as handle:
                        handle.write(f"0 {own} 1\n1 200000 65536\n")
                code = 0
        finally:
            os._exit(code)
    os.close(ready_r)
    failed = libc.unshare(0x10000000) != 0  # CLONE_NEWUSER
    os.write(ready_w, b"x" if failed else b"u")
    os.close(ready_w)
    _, status = os.waitpid(helper, 0)
    if failed:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
    if status != 0:
        raise OSError("writing the user namespace's map failed")


def refuse_namespaces() -> None:
    """seccomp: unshare/setns -> EPERM, clone with any CLONE_NEW* flag -> EPERM, clone3 -> ENOSYS (x86_64)."""
    if os.uname().machine != "x86_64":
        raise OSError("this simulation knows x86_64 only")
    new_flags = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
    ins = []

    def op(code, jt, jf, k):
        ins.append(struct.pack("=HBBI", code, jt, jf, k))

    op(0x20, 0, 0, 4)  # ld arch
    op(0x15, 1, 0, 0xC000003E)
    op(0x06, 0, 0, 0x80000000)  # kill
    op(0x20, 0, 0, 0)  # ld nr
    op(0x15, 6, 0, 272)  # unshare -> eperm
    op(0x15, 5, 0, 308)  # setns -> eperm
    op(0x15, 5, 0, 435)  # clone3 -> enosys
    op(0x15, 0, 2, 56)  # clone: check flags, else allow
    op(0x20, 0, 0, 16)  # ld args[0]
    op(0x45, 1, 0, new_flags)  # jset -> eperm
    op(0x06, 0, 0, 0x7FFF0000)  # allow
    op(0x06, 0, 0, 0x00050001)  # eperm
    op(0x06, 0, 0, 0x00050026)  # enosys
    program = b"".join(ins)
    buffer = ctypes.create_string_buffer(program, len(program))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(ins), ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp")


#: How ``--lifecycle PATH`` ends the caller (test_sandbox_modes): killed with SIGKILL by the test,
#: a normal end, an exception in the middle of ``run_many`` (caught; the script then ends
#: normally), SIGINT, SIGTERM with its default action (the process dies at once), SIGTERM turned
#: into ``SystemExit`` by a handler (as training scripts do).
EXIT_PATHS = ("kill", "normal", "exception", "SIGINT", "SIGTERM", "SIGTERM-handler")


def lifecycle(sandbox, Job, Limits, run_many, path: str) -> None:
    """``--lifecycle PATH`` instead of a jobs file: two runs in flight (after one that ran, so that
    the candidate launcher has a spare waiting), then one line ``{"pids": [every process under
    the launcher, and the launcher], "live": [...]}``; then the caller ends by ``path``
    (:data:`EXIT_PATHS`: ``exception`` waits for a line on stdin first)."""
    import threading
    import time

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, (lambda *_: sys.exit(3)) if path == "SIGTERM-handler" else signal.SIG_DFL)
    sleep = 2 if path == "normal" else 60
    sleeping = Job("import time\ntime.sleep(%d)\ndef f():\n    return 1\n" % sleep, "def check(c):\n    assert c() == 1\n",
                   "humaneval", "f", Limits(wall_s=120, cpu_s=60))
    quick = Job("def f():\n    return 1\n", "def check(c):\n    assert c() == 1\n", "humaneval", "f",
                Limits(wall_s=120, cpu_s=60))
    assert run_many([quick], workers=1)[0].passed

    def announce():
        while len(sandbox.processes._live) < 4:  # two runs (judge + candidate each) in flight
            time.sleep(0.01)
        time.sleep(0.5)  # the spare forked after the second run's reply
        zygote = sandbox.processes._zygote_instance
        pids, todo = [zygote.pid], [zygote.pid]
        while todo:
            pid = todo.pop()
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as handle:
                    children = [int(c) for c in handle.read().split()]
            except OSError:
                continue
            pids += children
            todo += children
        print(json.dumps({"pids": sorted(pids), "live": sorted(sandbox.processes._live_pids())}), flush=True)
        if path == "exception":
            sys.stdin.readline()  # the test has seen every process alive
            os.kill(os.getpid(), signal.SIGINT)  # KeyboardInterrupt in run_many, caught below

    threading.Thread(target=announce, daemon=True).start()
    try:
        results = run_many([sleeping] * 2, workers=2)
    except KeyboardInterrupt:
        print(json.dumps({"interrupted": sorted(sandbox.processes._live)}), flush=True)
        if path == "exception":
            return
        raise
    print(json.dumps({"results": [r.verdict.value for r in results]}), flush=True)


def main() -> None:
    mode, jobs_path, src = sys.argv[1:4]
    received: list[int] = []
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD, signal.SIGWINCH, signal.SIGURG):
            try:
                signal.signal(sig, lambda number, frame: received.append(number))
            except (OSError, ValueError):
                pass
    if mode.startswith("userns-root"):
        enter_user_namespace_as_root()
    elif mode == "userns-wide-no-namespaces":
        enter_wide_user_namespace()
    if "no-namespaces" in mode:
        refuse_namespaces()
    stub_packages(src)
    from mrgrpo.rewards import sandbox
    from mrgrpo.rewards.sandbox import Job, Limits, run_many

    if mode == "no-namespaces-no-landlock":
        sandbox._refused_layers = frozenset({"landlock"})
    # more layers not to try, comma-separated (seccomp: each candidate makes its namespaces and
    # its root itself, as where the candidate launcher cannot serve)
    refused = {name for name in os.environ.get("MRGRPO_TEST_REFUSE", "").split(",") if name}
    sandbox._refused_layers = sandbox._refused_layers | refused
    if jobs_path.startswith("--lifecycle"):
        lifecycle(sandbox, Job, Limits, run_many, jobs_path.partition("=")[2] or "kill")
        return
    with open(jobs_path) as handle:
        specs = json.load(handle)
    me = str(os.getpid())
    jobs = [
        Job(s["program"].replace("{CALLER}", me), s["tests"], "humaneval", s["entry_point"],
            Limits(wall_s=s.get("wall_s", 10.0), cpu_s=s.get("cpu_s", 5), memory_mb=768, disk_files=s.get("disk_files", False)),
            s.get("context", ""))
        for s in specs
    ]
    results = run_many(jobs, workers=2)
    out = [
        {"verdict": r.verdict.value, "error_type": r.error_type, "cases_passed": r.cases_passed, "isolation": r.isolation,
         "test_time": r.test_time, "wall": r.wall_time, "stdout": r.stdout[:2000]}
        for r in results
    ]
    efficiency = {}
    if os.path.exists(jobs_path + ".efficiency"):
        from mrgrpo.rewards.code import code_suite

        with open(jobs_path + ".efficiency") as handle:
            cases = json.load(handle)
        for name, case in cases.items():
            suite = code_suite(components=("efficiency", "pass"), timeout=6, workers=2)
            n = len(case["programs"])
            columns = {"test": [case["test"]] * n, "entry_point": ["f"] * n, "code_prefix": [""] * n,
                       "test_format": ["humaneval"] * n, "reference": [case["reference"]] * n}
            efficiency[name] = suite.components[0](["p"] * n, case["programs"], **columns)
            efficiency[name + ":pass"] = suite.components[1](["p"] * n, case["programs"], **columns)
    print(json.dumps({"uid": os.geteuid(), "results": out, "signals": received, "efficiency": efficiency}), flush=True)


if __name__ == "__main__":
    main()
