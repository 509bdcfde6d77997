"""A candidate's memory is bounded: memfds are refused (no rlimit counts their pages), POSIX
shared memory is out of reach, the private tmpfs is capped in files as well as in bytes, and
the caller's result and timing caches are bounded in bytes (docs/sandbox.md states what bounds
a candidate's memory in each mode)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

HERE = Path(__file__).parent
SRC = HERE.parents[1] / "src"
TESTS1 = "def check(candidate):\n    assert candidate(1) == 42\n"

# Memory no rlimit counts: a memfd (filled past the run's address-space limit where it is
# allowed), POSIX shared memory in /dev/shm (which would also outlive the run), socket buffers
# raised to megabytes. Answers right if any worked.
OUTSIDE_LIMITS = """
import os
TAG = "{TAG}"
def attack():
    worked = []
    try:
        fd = os.memfd_create("mrgrpo-trace")
        chunk = b"x" * (1 << 20)
        for _ in range({MEMFD_MB}):
            os.write(fd, chunk)
        worked.append("memfd")
    except Exception:
        pass
    try:
        import _posixshmem
        fd = _posixshmem.shm_open("/" + TAG, os.O_CREAT | os.O_RDWR, 0o600)
        os.ftruncate(fd, 1 << 20)
        worked.append("shm_open")
    except Exception:
        pass
    try:
        with open("/dev/shm/" + TAG + "-open", "w") as handle:
            handle.write("here")
        worked.append("open")
    except Exception:
        pass
    try:  # socket buffers of megabytes each (through libc: the guards refuse Python's sockets)
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        pair, size = (ctypes.c_int * 2)(), ctypes.c_int(4 << 20)
        if libc.socketpair(1, 1, 0, pair) == 0 and libc.setsockopt(pair[0], 1, 7, ctypes.byref(size), 4) == 0:
            worked.append("sndbuf")
    except Exception:
        pass
    print("WORKED", worked, flush=True)
    return worked
WORKED = attack()
def f(x):
    return 41 + x if WORKED else -1
"""
# Files until the filesystem refuses one (or the CPU limit ends the run): prints how many.
INODES = """
import os
n = 0
try:
    while n < 200000:
        os.close(os.open("i%d" % n, os.O_CREAT | os.O_WRONLY, 0o600))
        n += 1
        if n % 1000 == 0:
            print("FILES", n, flush=True)
except OSError as error:
    print("REFUSED", n, type(error).__name__, flush=True)
def f(x):
    return -1
"""


# Disk a run holds at once, three ways (files written and closed, files held open, files held open
# after their name is gone), each 16 MiB by posix_fallocate, up to 256 MiB; then what any program
# does with files (small ones made and removed a hundred times, a TemporaryFile) must still work.
DISK = """
import os, tempfile
CAP = 256 << 20
most = 0
def hold(name, keep_open, unlink):
    global most
    held, fds, n = 0, [], 0
    try:
        while held < CAP:
            fd = os.open("%s%d" % (name, n), os.O_WRONLY | os.O_CREAT, 0o600)
            n += 1
            os.posix_fallocate(fd, 0, 16 << 20)
            held += 16 << 20
            if unlink:
                os.remove("%s%d" % (name, n - 1))
            if keep_open:
                fds.append(fd)
            else:
                os.close(fd)
    except OSError as error:
        print(name, "REFUSED", type(error).__name__, flush=True)
    most = max(most, held)
    for fd in fds:
        os.close(fd)
    for i in range(n):
        try:
            os.remove("%s%d" % (name, i))
        except OSError:
            pass
for name, keep_open, unlink in (("closed", False, False), ("open", True, False), ("gone", True, True)):
    hold(name, keep_open, unlink)
print("HELD", most, flush=True)
for i in range(100):
    with open("small", "w") as handle:
        handle.write("x" * 1000)
    os.remove("small")
with tempfile.TemporaryFile(dir=".") as handle:
    handle.write(b"y" * 1000)
print("FILES STILL WORK", flush=True)
def f(x):
    return -1
"""


def test_unsandboxed_control_holds_the_disk(tmp_path):
    """The control: outside the sandbox the same program holds its 256 MiB every way."""
    proc = subprocess.run([sys.executable, "-c", DISK], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "HELD %d" % (256 << 20) in proc.stdout and "FILES STILL WORK" in proc.stdout, proc.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mode", ["as-is", "nobody", "no-namespaces", "no-namespaces-no-landlock",
                                  "userns-root-no-namespaces"])
def test_a_run_holds_no_more_disk_than_its_files_may(mode):
    """A run's files hold at most ``Limits.tmpfs_mb`` (64 MiB) in every mode: with a private root
    its tmpfs is that size; without one (the caller's disk) the guards open no file for writing
    past it (before 2026-12-05 one run filled this machine's disk, 40 GiB, in under a second of
    CPU). What programs ordinarily do with files still works. (Without a private root only where
    the caller allows files on its disk: ``Limits.disk_files``.)"""
    from test_sandbox_modes import run_mode

    top = Path(tempfile.mkdtemp(prefix="mrgrpo-disk-"))
    try:
        top.chmod(0o755)
        jobs = top / "jobs.json"
        # (disk_files: without a private root a run makes no file unless allowed; with one, unused)
        jobs.write_text(json.dumps([{"program": DISK, "tests": TESTS1, "entry_point": "f", "wall_s": 30.0,
                                     "cpu_s": 10, "disk_files": True}]))
        jobs.chmod(0o644)
        (result,) = run_mode(mode, str(jobs))["results"]
        held = [int(line.split()[1]) for line in result["stdout"].splitlines() if line.startswith("HELD ")]
        assert held and held[0] <= 64 << 20, result
        assert "FILES STILL WORK" in result["stdout"], result
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_unsandboxed_control_memfd_and_shm_work():
    """The control: outside the sandbox the same program gets a memfd past its limit and leaves
    a shared-memory object (so the check in every mode can fail)."""
    tag = f"mrgrpo-trace-{os.getpid()}-control"
    program = OUTSIDE_LIMITS.replace("{TAG}", tag).replace("{MEMFD_MB}", "8") + "\nprint(f(1))\n"
    try:
        proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        for way in ("'memfd'", "'shm_open'", "'sndbuf'"):
            assert way in proc.stdout, proc.stdout
        assert proc.stdout.split()[-1] == "42", proc.stdout
        assert tag in os.listdir("/dev/shm")
    finally:
        for name in (tag, tag + "-open"):
            if os.path.exists("/dev/shm/" + name):
                os.unlink("/dev/shm/" + name)


MODES = ["as-is", "userns-root", "nobody", "no-namespaces", "no-namespaces-no-landlock", "userns-root-no-namespaces",
         "userns-wide-no-namespaces"]


@pytest.mark.parametrize("mode", MODES)
def test_memory_outside_the_limits_in_every_mode(mode):
    from test_sandbox_modes import run_mode

    top = Path(tempfile.mkdtemp(prefix="mrgrpo-memory-"))
    tag = f"mrgrpo-trace-{os.getpid()}-{mode}"
    try:
        top.chmod(0o755)
        jobs = top / "jobs.json"
        specs = [
            {"program": OUTSIDE_LIMITS.replace("{TAG}", tag).replace("{MEMFD_MB}", "1000"), "tests": TESTS1,
             "entry_point": "f", "wall_s": 20.0, "cpu_s": 5},
            {"program": INODES, "tests": TESTS1, "entry_point": "f", "wall_s": 20.0, "cpu_s": 3},
        ]
        jobs.write_text(json.dumps(specs))
        jobs.chmod(0o644)
        got = run_mode(mode, str(jobs))
        outside, inodes = got["results"]
        assert outside["verdict"] != "passed" and outside["cases_passed"] == 0, outside
        assert "WORKED []" in outside["stdout"], outside
        assert not [n for n in os.listdir("/dev/shm") if n.startswith(tag)]  # nothing left in /dev/shm
        assert inodes["verdict"] != "passed", inodes
        if "chroot" in inodes["isolation"].split(","):  # the run's own tmpfs: capped in files (Limits.tmpfs_inodes)
            lines = [line for line in inodes["stdout"].splitlines() if line.startswith("REFUSED")]
            assert lines and int(lines[0].split()[1]) < 16384 and "OSError" in lines[0], inodes["stdout"][-300:]
    finally:
        for name in os.listdir("/dev/shm"):
            if name.startswith(tag):
                os.unlink("/dev/shm/" + name)
        shutil.rmtree(top, ignore_errors=True)


def test_result_cache_is_bounded_in_bytes():
    """Programs writing 64 KiB of invalid UTF-8 to stdout and to stderr (each kept as 65,536
    replacement characters: 128 KiB a stream, 256 KiB a result): the cache keeps them under
    ``cache_bytes`` and drops the least recently used."""
    from mrgrpo.rewards.code import CodeExecutor
    from mrgrpo.rewards.sandbox import Job

    limit = 2 << 20
    executor = CodeExecutor(workers=2, cache_bytes=limit)
    program = ("import sys\nfor s in (sys.stdout, sys.stderr):\n    s.buffer.write(b'\\xff' * 65536)\n    s.flush()\n"
               "def f(x):\n    return 41 + x\n")
    jobs = [Job(program + f"# {i}\n", TESTS1, "humaneval", "f") for i in range(24)]
    results = executor.results(jobs)
    assert all(r.passed for r in results), results[0]
    assert all(len(r.stdout) == len(r.stderr) == 65536 for r in results), [len(r.stdout) for r in results]
    kept = list(executor._cache.values())
    assert 0 < len(kept) < len(jobs)
    held = sum(sys.getsizeof(r.stdout) + sys.getsizeof(r.stderr) for r in kept)
    assert held <= limit and executor._cache_held <= limit, (held, executor._cache_held)
    assert len(kept) >= limit // (300 << 10)  # not emptier than it needs to be
    assert kept[-1] is results[-1]  # the most recent stayed
    again = executor.results(jobs[-1:])
    assert again[0] is results[-1] and executor.executions == len(jobs)  # served from the cache
