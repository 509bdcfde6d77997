"""No run sets or reads state that another run sees through the calls that only serve that:
page-cache advice and probes (``posix_fadvise``, ``readahead``, ``mincore``, ``cachestat``,
``preadv2(RWF_NOWAIT)``, ``madvise(WILLNEED/PAGEOUT/...)``), file events (inotify, fanotify,
``F_NOTIFY``), file locks on shared files (``flock``, record locks, leases), SIGIO owners and
futexes keyed by a shared file page. Each is refused in every privilege mode; outside the
sandbox the same program makes them (so the check can fail); and a writer run followed by a
reader run through the page cache recovers nothing, in every mode (candidates read the standard
library from memory: a copy with a private root, the launcher's image without one). What remains
of the page-cache channel is stated in docs/sandbox.md."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_sandbox_modes import MODES  # noqa: E402
TESTS1 = "def check(candidate):\n    assert candidate(1) == 42\n"

# Every call tried on a standard-library file (readable in every mode); prints what worked and
# answers right if anything did.
PROBES = """
import os, fcntl, mmap, signal, sys
def target():
    # a standard-library file as this candidate reaches it (a path of its root, or through the
    # /proc/self/fd/<n> entry of sys.path where its uid cannot walk to the standard library)
    for entry in sys.path:
        for name in ("pydoc_data/topics.py", "_pydecimal.py", "typing.py"):
            try:
                return os.open(entry + "/" + name, os.O_RDONLY), entry + "/" + name
            except OSError:
                pass
    for entry in sys.path:  # without namespaces: the launcher's image of the library, a shared memfd
        try:
            return os.open(entry, os.O_RDONLY), entry
        except OSError:
            pass
        if entry.startswith("/proc/self/fd/"):  # in a jail no path reaches it: the fd it holds
            return os.dup(int(entry.rsplit("/", 1)[1])), entry
    raise OSError("no standard-library file")
def probe():
    worked = []
    fd, TARGET = target()
    print("TARGET", TARGET, flush=True)
    def attempt(name, call):
        try:
            result = call()
        except BlockingIOError:  # answered (EAGAIN: RWF_NOWAIT on a page not cached)
            result = None
        except Exception:
            return
        if result is None or result is True or (type(result) is int and result >= 0):
            worked.append(name)
    attempt("fadvise", lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED))
    attempt("willneed", lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED))
    attempt("rwf_nowait", lambda: os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT))
    attempt("flock", lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB))
    attempt("record-lock", lambda: fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB))
    attempt("getlk", lambda: fcntl.fcntl(fd, fcntl.F_GETLK, bytes(32)) and None)
    attempt("ofd-lock", lambda: fcntl.fcntl(fd, 37, bytes(32)) and None)
    attempt("setown", lambda: fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid()))
    attempt("notify", lambda: fcntl.fcntl(os.open(os.path.dirname(TARGET), os.O_RDONLY), fcntl.F_NOTIFY, fcntl.DN_ACCESS))
    mapped = mmap.mmap(fd, 4096, prot=mmap.PROT_READ)
    attempt("madvise-willneed", lambda: mapped.madvise(mmap.MADV_WILLNEED))
    attempt("madvise-pageout", lambda: mapped.madvise(21))
    attempt("sysinfo", lambda: os.getloadavg() and None)  # glibc's getloadavg is sysinfo (as is free memory's sysconf)
    attempt("statvfs", lambda: os.statvfs(".") and None)
    attempt("fstatvfs", lambda: os.fstatvfs(fd) and None)
    attempt("pipe", lambda: os.pipe() and None)  # a pipe's inode number comes from a counter per CPU
    attempt("setpipe", lambda: fcntl.fcntl(os.pipe()[0], 1031, 1 << 20))  # F_SETPIPE_SZ: the user's pipe pages
    # FS_IOC_FIEMAP: where on the disk a file's blocks lie (how many extents, here)
    attempt("fiemap", lambda: fcntl.ioctl(fd, 0xC020660B, (0).to_bytes(8, "little") + bytes([255]) * 8 + bytes(16)) and None)
    def queue():  # a queued signal counts against the user's pending signals (EAGAIN where none may be)
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
        try:
            signal.raise_signal(signal.SIGRTMIN)
        except OSError:
            return False
        return signal.sigtimedwait([signal.SIGRTMIN], 0) is not None
    attempt("sigqueue", queue)
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
    except Exception:
        libc = None  # the guards refuse ctypes without a private root: the calls above are all there is
    if libc is not None:
        n = {NUMBERS!r}
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        where = libc.mmap(None, 4096, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED: a page of the shared file
        vec = ctypes.create_string_buffer(1)
        attempt("readahead", lambda: libc.syscall(n["readahead"], fd, 0, 1 << 20))
        attempt("mincore", lambda: libc.syscall(n["mincore"], ctypes.c_void_p(where), 4096, vec))
        attempt("cachestat", lambda: libc.syscall(n["cachestat"], fd, ctypes.byref((ctypes.c_uint64 * 2)(0, 0)),
                                                  ctypes.byref((ctypes.c_uint64 * 5)()), 0))
        attempt("inotify", lambda: libc.syscall(n["inotify_init1"], 0))
        attempt("fanotify", lambda: libc.syscall(n["fanotify_init"], 0, 0))
        attempt("shared-futex", lambda: libc.syscall(n["futex"], ctypes.c_void_p(where), 1, 1, None, None, 0))
        attempt("futex-waitv", lambda: libc.syscall(n["futex_waitv"], None, 0, 0, None, 0))
        attempt("syslog", lambda: libc.syscall(n["syslog"], 10, None, 0))  # SYSLOG_ACTION_SIZE_BUFFER
        attempt("hugetlb", lambda: libc.mmap(None, 2 << 20, 3, 0x22 | 0x40000, -1, 0) not in (None, (1 << 64) - 1))
    print("WORKED", worked, flush=True)
    return worked
WORKED = probe()
def f(x):
    return 41 + x if set(WORKED) - {"statvfs", "fstatvfs"} else -1
"""
NUMBERS = {"x86_64": {"readahead": 187, "mincore": 27, "cachestat": 451, "inotify_init1": 294, "fanotify_init": 300,
                      "futex": 202, "futex_waitv": 449, "syslog": 103},
           "aarch64": {"readahead": 213, "mincore": 232, "cachestat": 451, "inotify_init1": 26, "fanotify_init": 262,
                       "futex": 98, "futex_waitv": 449, "syslog": 116}}


def target_file() -> str:
    """A standard-library file of several pages that every mode's candidate can read."""
    stdlib = sysconfig.get_paths()["stdlib"]
    for name in ("pydoc_data/topics.py", "_pydecimal.py", "typing.py"):
        path = os.path.join(stdlib, name)
        if os.path.getsize(path) > 64 * 1024:
            return path
    raise AssertionError("no large standard-library file")


def probes_program() -> str:
    machine = os.uname().machine
    if machine not in NUMBERS:
        pytest.skip("system call numbers known for x86_64 and aarch64 only")
    return PROBES.replace("{NUMBERS!r}", repr(NUMBERS[machine]))


def test_unsandboxed_control_makes_every_call():
    proc = subprocess.run([sys.executable, "-c", probes_program() + "\nprint(f(1))\n"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    worked = set(json.loads(proc.stdout.split("WORKED", 1)[1].split("\n", 1)[0].replace("'", '"')))
    # cachestat is Linux >= 6.5, fanotify needs CAP_SYS_ADMIN, futex_waitv with no waiters fails, huge pages
    # need a pool (none here), and reading the kernel's log needs CAP_SYSLOG where dmesg_restrict is set
    assert {"fadvise", "willneed", "rwf_nowait", "flock", "record-lock", "getlk", "ofd-lock", "setown", "notify",
            "madvise-willneed", "madvise-pageout", "readahead", "mincore", "inotify", "shared-futex", "sysinfo",
            "statvfs", "fstatvfs", "pipe", "setpipe", "sigqueue", "fiemap"} <= worked, worked
    if os.geteuid() == 0:
        assert "syslog" in worked, worked
    assert proc.stdout.split()[-1] == "42"


def run_in_mode(mode: str, specs: list[dict], refuse: tuple[str, ...] = ()) -> list[dict]:
    """The results of ``specs`` (jobs) run together under privilege ``mode`` (``test_sandbox_modes``),
    the layers ``refuse`` names not tried."""
    from test_sandbox_modes import run_mode

    top = Path(tempfile.mkdtemp(prefix="mrgrpo-channels-"))
    try:
        top.chmod(0o755)
        jobs = top / "jobs.json"
        jobs.write_text(json.dumps(specs))
        jobs.chmod(0o644)
        return run_mode(mode, str(jobs), refuse=refuse)["results"]
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("mode", MODES)
def test_no_shared_state_call_in_any_mode(mode):
    (result,) = run_in_mode(mode, [{"program": probes_program(), "tests": TESTS1, "entry_point": "f"}])
    assert "TARGET " in result["stdout"], result
    worked = set(json.loads(result["stdout"].split("WORKED", 1)[1].split("\n", 1)[0].replace("'", '"')))
    # statfs stays where every filesystem in sight is the run's own or one no candidate writes to
    assert worked <= ({"statvfs", "fstatvfs"} if "chroot" in result["isolation"] else set()), result
    assert result["verdict"] != "passed" and result["cases_passed"] == 0, result


# A writer stores 64 bits in the page cache of a standard-library file (evicting the file with
# fadvise(DONTNEED), then reading the pages of the 1s); a reader, run after it, reads them back
# with preadv2(RWF_NOWAIT) (EAGAIN: not cached).
WRITER = """
import os
BITS, TARGET = {BITS}, {TARGET!r}
def store():
    fd = os.open(TARGET, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # every bit 0
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead past the pages read
    except OSError:
        pass
    for i, bit in enumerate(BITS):
        if bit:
            os.pread(fd, 1, i * 4096)
store()
def f(x):
    return -1
"""
READER = """
import os
TARGET = {TARGET!r}
def load():
    fd = os.open(TARGET, os.O_RDONLY)
    bits = []
    for i in reversed(range(64)):  # last page first: the readahead a probe starts covers pages read already
        try:
            os.preadv(fd, [bytearray(1)], i * 4096, os.RWF_NOWAIT)
            bits.append(1)
        except BlockingIOError:
            bits.append(0)
        except OSError:
            bits.append(None)
    bits.reverse()
    print("BITS", "".join("?" if b is None else str(b) for b in bits), flush=True)
    return bits
BITS = load()
def f(x):
    return -1
"""


def _recovered(bits: list[int], printed: str) -> int:
    line = [part for part in printed.splitlines() if part.startswith("BITS ")]
    return sum(1 for b, got in zip(bits, line[0].split()[1]) if str(b) == got) if line else 0


def test_writer_then_reader_recovers_nothing(tmp_path):
    """Outside the sandbox the pair recovers the 64 bits from a file of its own; in the sandbox
    (every run of the default mode, five writer/reader pairs of fresh random bits) the reader
    reads no bit at all: both calls are refused."""
    import random

    from mrgrpo.rewards.sandbox import Job, Limits, run

    target = tmp_path / "big"
    with open(target, "wb") as handle:
        handle.write(os.urandom(64 * 4096))
        handle.flush()
        os.fsync(handle.fileno())  # clean pages: fadvise(DONTNEED) evicts them
    bits = [random.getrandbits(1) for _ in range(64)]
    for program in (WRITER.replace("{BITS}", repr(bits)), READER):
        program = program.replace("{TARGET!r}", repr(str(target))) + "\nprint(f(1))\n"
        proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
    assert _recovered(bits, proc.stdout) >= 60, (bits, proc.stdout)  # the control: the channel works
    stdlib_file = target_file()
    for _ in range(5):
        bits = [random.getrandbits(1) for _ in range(64)]
        limits = Limits(wall_s=10.0, cpu_s=5)
        writer = run(Job(WRITER.replace("{BITS}", repr(bits)).replace("{TARGET!r}", repr(stdlib_file)), TESTS1,
                         "humaneval", "f", limits))
        reader = run(Job(READER.replace("{TARGET!r}", repr(stdlib_file)), TESTS1, "humaneval", "f", limits))
        assert "seccomp" in reader.isolation, reader
        assert writer.verdict.value == reader.verdict.value == "failed", (writer, reader)
        assert "BITS " + "?" * 64 in reader.stdout, reader.stdout  # refused: not one bit read


# Two candidates that run at the same time and look for each other through the state of the
# standard-library files both read: a lock (flock), a futex on a page of one file both map
# (FUTEX_WAKE counts waiters), inotify events (copy 0 opens the file copy 1 watches) and the page
# cache (copy 0 reads a page that copy 1 keeps evicting, then probes with RWF_NOWAIT). Each runs
# for RENDEZVOUS_S at load, prints what it found and answers right only if it found the other.
# A standard-library file as a candidate reaches it (a path of its root, or through the
# /proc/self/fd/<n> entry of sys.path where its uid cannot walk to the standard library).
# A file of the standard library as the candidate reaches it: under an entry of its import path,
# else the entry itself where it is a file (without namespaces: the launcher's image, a memfd
# every such candidate opens, so the file they share).
OPEN_STDLIB = """
import os, sys
def open_stdlib(name):
    for entry in sys.path:
        try:
            return os.open(entry + "/" + name, os.O_RDONLY)
        except OSError:
            pass
    for entry in sys.path:
        try:
            return os.open(entry, os.O_RDONLY)
        except OSError:
            pass
        if entry.startswith("/proc/self/fd/"):  # in a jail no path reaches the image: the fd it holds
            return os.dup(int(entry.rsplit("/", 1)[1]))
    raise OSError(name)
"""
RENDEZVOUS = OPEN_STDLIB + """
import fcntl, mmap, resource, signal, time
COPY, N = {COPY}, {NUMBERS!r}
def meet():
    found, tried = set(), []
    a, b = open_stdlib("pydoc_data/topics.py"), open_stdlib("_pydecimal.py")
    def attempt(name, call):
        try:
            if call():
                found.add(name)
            tried.append(name)
        except BlockingIOError:  # EWOULDBLOCK: the other holds the lock
            found.add(name)
        except Exception:
            pass
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        word = libc.mmap(None, 4096, 1, 1, a, 0)  # PROT_READ, MAP_SHARED: the first page of topics.py
        value = ctypes.c_int.from_address(word).value
        timeout = (ctypes.c_long * 2)(0, 20_000_000)
        watch = libc.inotify_init1(os.O_NONBLOCK) if COPY else -1
        if watch >= 0 and libc.inotify_add_watch(watch, b"/proc/self/fd/%d" % b, 0x21) < 0:  # IN_ACCESS | IN_OPEN
            watch = -1
    except Exception:
        libc = None  # the guards refuse ctypes without a private root: flock and the page cache remain
    def free():  # (free memory, free space where it works): only through sysinfo and statfs
        try:
            os.getloadavg()  # sysinfo: where it is refused, glibc's free-memory sysconf reads garbage
            memory = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            memory = None
        try:
            space = os.statvfs(".")
            space = space.f_bfree * space.f_frsize
        except OSError:
            space = None
        return memory, space
    def queued(signum, most):  # signals this process could queue (blocked, so they stay pending)
        signal.pthread_sigmask(signal.SIG_BLOCK, [signum])
        n = 0
        try:
            while n < most:
                signal.raise_signal(signum)
                n += 1
        except OSError:  # EAGAIN: its user's pending signals are at its RLIMIT_SIGPENDING
            pass
        while signal.sigtimedwait([signum], 0) is not None:
            pass
        return n
    most = resource.getrlimit(resource.RLIMIT_SIGPENDING)[0]
    most = 200_000 if most < 0 else min(most, 200_000)
    if not COPY:  # 20,000 pending for the whole span: its user's count, which the other's limit is checked against
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
        try:
            for _ in range(20_000):
                signal.raise_signal(signal.SIGRTMIN)
        except OSError:
            pass
    seen, held, flips, room = [], None, 0, []
    start = time.monotonic()
    deadline = start + {RENDEZVOUS_S}
    while time.monotonic() < deadline:
        if COPY:  # free memory and free space moving by what the other holds; room for signals
            seen.append(free())
            if time.monotonic() > start + 0.5 * (1 + len(room)) and len(room) < 2:
                room.append(queued(signal.SIGRTMIN + 1, most))
        elif time.monotonic() > start + 0.1 * flips:  # hold 192 MiB of memory and an 8 MiB file, then neither
            flips += 1
            if held is None:
                held = b"\\x01" * (192 << 20)
                try:
                    spill = os.open("spill", os.O_WRONLY | os.O_CREAT, 0o600)
                    os.write(spill, b"\\x01" * (8 << 20))
                    os.close(spill)
                except OSError:
                    pass
            else:
                held = None
                try:
                    os.remove("spill")
                except OSError:
                    pass
        attempt("flock", lambda: fcntl.flock(a, fcntl.LOCK_EX | fcntl.LOCK_NB))
        if libc is not None:  # wake whoever waits on the word (a count > 0: found), then wait on it
            attempt("futex", lambda: libc.syscall(N["futex"], ctypes.c_void_p(word), 1, 1 << 30, None, None, 0) > 0)
            attempt("futex", lambda: libc.syscall(N["futex"], ctypes.c_void_p(word), 0, value, timeout, None, 0) == 0)
            if watch >= 0:
                attempt("inotify", lambda: len(os.read(watch, 4096)) > 0)
        if COPY:  # evict page 7 of _pydecimal.py, wait, probe it without reading it in
            try:
                os.posix_fadvise(b, 0, 0, os.POSIX_FADV_RANDOM)
                os.posix_fadvise(b, 7 * 4096, 4096, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
            time.sleep(0.02)
            attempt("page-cache", lambda: os.preadv(b, [bytearray(1)], 7 * 4096, os.RWF_NOWAIT) == 1)
        else:  # open _pydecimal.py (an inotify event) and read page 7 (into the cache)
            os.close(open_stdlib("_pydecimal.py"))
            os.pread(b, 1, 7 * 4096)
            time.sleep(0.005)
    if room:
        tried.append("signals")
        if min(room) + 10_000 <= most:
            found.add("signals")
    for i, (route, least) in enumerate((("memory", 96 << 20), ("disk", 4 << 20))):
        values = [sample[i] for sample in seen if sample[i] is not None]
        if values:
            tried.append(route)
            if max(values) - min(values) >= least:
                found.add(route)
    print("FOUND", sorted(found), "TRIED", sorted(set(tried)), "SPAN", start, time.monotonic(), flush=True)
    return found
FOUND = meet()
def f(x):
    return 41 + x if FOUND else -1
"""
RENDEZVOUS_S = 2.0


def rendezvous_program(copy: int, seconds: float = RENDEZVOUS_S) -> str:
    machine = os.uname().machine
    if machine not in NUMBERS:
        pytest.skip("system call numbers known for x86_64 and aarch64 only")
    return (RENDEZVOUS.replace("{COPY}", str(copy)).replace("{NUMBERS!r}", repr(NUMBERS[machine]))
            .replace("{RENDEZVOUS_S}", repr(seconds)))


def _found(printed: str) -> set[str]:
    line = [part for part in printed.splitlines() if part.startswith("FOUND ")]
    return set(json.loads(line[0].split("FOUND ", 1)[1].split(" TRIED", 1)[0].replace("'", '"'))) if line else set()


def test_unsandboxed_concurrent_candidates_meet():
    """The control: the two copies as plain processes at the same time meet through every route."""
    with tempfile.TemporaryDirectory() as work:  # one directory, as candidates without a private root share a disk
        procs = [subprocess.Popen([sys.executable, "-c", rendezvous_program(copy) + "\nprint(f(1))\n"], cwd=work,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for copy in (0, 1)]
        outs = [proc.communicate(timeout=60) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), outs
    found = _found(outs[0][0]) | _found(outs[1][0])
    assert {"flock", "futex", "inotify", "page-cache", "memory", "disk", "signals"} <= found, outs
    # copy 1 saw copy 0's open and read, its memory, its file and its pending signals (one user's)
    assert _found(outs[1][0]) >= {"inotify", "page-cache", "memory", "disk", "signals"}, outs


@pytest.mark.parametrize("mode", MODES)
def test_concurrent_candidates_cannot_meet(mode):
    """In every privilege mode, the two copies run side by side (``run_many``, 2 workers): neither
    finds the other, and neither passes."""
    results = run_in_mode(mode, [{"program": rendezvous_program(copy), "tests": TESTS1, "entry_point": "f"}
                                 for copy in (0, 1)])
    for result in results:
        assert "FOUND [] TRIED" in result["stdout"], result
        assert result["verdict"] != "passed" and result["cases_passed"] == 0, result
    spans = [[float(x) for x in result["stdout"].split("SPAN ", 1)[1].split()[:2]] for result in results]
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans  # side by side


MAKE_FILES = """
import json, os, tempfile
MADE = {}
def attempt(name, call):
    try:
        call()
        MADE[name] = "made"
    except OSError as error:
        MADE[name] = type(error).__name__
attempt("open", lambda: open("new.txt", "w").write("x"))
attempt("os.open", lambda: os.close(os.open("new2", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)))
attempt("O_TMPFILE", lambda: os.close(os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600)))
attempt("mkdir", lambda: os.mkdir("dir"))
attempt("tempfile", lambda: tempfile.TemporaryFile(dir=".").close())
directory = os.open(".", os.O_RDONLY | os.O_DIRECTORY)  # opening a directory makes nothing (O_TMPFILE shares its bit)
os.close(directory)
print("MADE", json.dumps({"made": MADE, "listed": sorted(os.listdir("."))}), flush=True)
def f(x):
    return -1
"""


@pytest.mark.parametrize("mode", MODES)
def test_a_run_without_a_private_root_makes_no_file_unless_the_caller_allows_it(mode):
    """With a private root a run makes files on its own tmpfs; without one (its directory on the
    caller's disk) every way of making one is refused, unless ``Limits.disk_files``."""
    results = run_in_mode(mode, [{"program": MAKE_FILES, "tests": TESTS1, "entry_point": "f", "disk_files": allowed}
                                 for allowed in (False, True)])
    for result, allowed in zip(results, (False, True)):
        assert "MADE " in result["stdout"], result
        printed = json.loads(result["stdout"].split("MADE ", 1)[1].splitlines()[0])
        everything = allowed or "chroot" in result["isolation"]
        assert set(printed["made"].values()) == ({"made"} if everything else {"PermissionError"}), result
        assert printed["listed"] == (["dir", "new.txt", "new2"] if everything else []), result


# Two copies side by side for 2 s: copy 0 makes 120 empty files, holds them 0.2 s, removes them,
# waits 0.2 s, and again; copy 1 makes a file every 10 ms, reads its inode number and removes it.
# On a filesystem both write (ext4 gives the first free inode) copy 1's numbers jump up while copy
# 0 holds its files and fall back when it removes them; on a tmpfs of its own they only grow.
INODES = """
import os, time
COPY = {COPY}
def watch():
    numbers, made = [], 0
    start = time.monotonic()
    while time.monotonic() < start + 2.0:
        try:
            if COPY:
                probe = os.open("probe", os.O_WRONLY | os.O_CREAT, 0o600)
                numbers.append(os.fstat(probe).st_ino)
                os.close(probe)
                os.remove("probe")
                time.sleep(0.01)
            else:
                for i in range(120):
                    os.close(os.open("held%d" % i, os.O_WRONLY | os.O_CREAT, 0o600))
                    made += 1
                time.sleep(0.2)
                for i in range(120):
                    os.remove("held%d" % i)
                time.sleep(0.2)
        except OSError:
            time.sleep(0.01)
    falls = sum(1 for old, new in zip(numbers, numbers[1:]) if new < old - 60)
    print("INODES made", made, "read", len(numbers), "falls", falls, flush=True)
    return falls
FALLS = watch()
def f(x):
    return -1
"""


def _falls(printed: str) -> tuple[int, int, int]:
    """(files the writer made, numbers the reader read, falls of 60+ between two reads)."""
    line = [part for part in printed.splitlines() if part.startswith("INODES ")]
    assert line, printed
    words = line[0].split()
    return int(words[2]), int(words[4]), int(words[6])


def test_unsandboxed_control_reads_another_processes_files_in_inode_numbers(tmp_path):
    """The control: the two copies as plain processes in one directory; the reader's numbers fall
    back each time the writer's files go (five times in 2 s)."""
    procs = [subprocess.Popen([sys.executable, "-c", INODES.replace("{COPY}", str(copy))], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for copy in (0, 1)]
    outs = [proc.communicate(timeout=60) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), outs
    assert _falls(outs[1][0])[2] >= 3, outs


@pytest.mark.parametrize("mode", MODES)
def test_no_run_reads_another_runs_files_in_inode_numbers(mode):
    """In every mode, by default: side by side, copy 1 sees no fall (with a private root each has
    a tmpfs of its own; without one neither can make a file). With ``Limits.disk_files`` where
    there is no private root, the channel is there: why files are refused by default."""
    for allowed in (False, True):
        results = run_in_mode(mode, [{"program": INODES.replace("{COPY}", str(copy)), "tests": TESTS1,
                                      "entry_point": "f", "disk_files": allowed} for copy in (0, 1)])
        made, read, falls = _falls(results[1]["stdout"])
        private = "chroot" in results[1]["isolation"]
        assert _falls(results[0]["stdout"])[0] >= (120 if private or allowed else 0), results
        if private or not allowed:
            assert falls == 0 and (read > 50 if private else read == 0), results
        else:  # (fewer than outside: each file the guards let it make costs a walk of its directory)
            assert falls >= 2, results


# Bits left in the page cache for a later run, by timing only (no call the filter refuses): the
# test evicts the first page of 64 standard-library files nothing imports; the writer reads the
# first page of each file whose bit is 1; the reader, a second later, times a one-byte read of
# each first page (cached: a few microseconds; from the disk: tens).
# Opens a file of the host's standard library by every path a program knows for it: its import
# path's, the library its loaded modules came from (os.__file__) and the host's path, which the
# test names; None where every one is refused (then the writer leaves nothing and the reader reads
# a 0: no information).
OPEN_HOST = """
import os, sys
def open_host(name):
    for where in [e + "/" + name for e in sys.path] + [os.path.dirname(os.__file__) + "/" + name, {HOST!r} + "/" + name]:
        try:
            return os.open(where, os.O_RDONLY)
        except OSError:
            pass
    return None
"""
PAGE_WRITER = OPEN_HOST + """
BITS, FILES = {BITS}, {FILES!r}
for bit, name in zip(BITS, FILES):
    fd = open_host(name) if bit else None
    if fd is not None:
        os.pread(fd, 1, 0)
        os.close(fd)
def f(x):
    return -1
"""
PAGE_READER = OPEN_HOST + """
import time
FILES = {FILES!r}
time.sleep(1.0)  # the writer runs beside it, in the same batch: let it finish
TIMES, REFUSED = [], 0
for name in FILES:
    fd = open_host(name)
    if fd is None:
        REFUSED += 1
        TIMES.append(10 ** 9)  # nothing read: a 0
        continue
    start = time.perf_counter_ns()
    os.pread(fd, 1, 0)
    TIMES.append(time.perf_counter_ns() - start)
    os.close(fd)
print("BITS", "".join("1" if t < 20_000 else "0" for t in TIMES), "NS", sorted(TIMES)[::8], "REFUSED", REFUSED,
      flush=True)
def f(x):
    return -1
"""


def unread_stdlib_files(stdlib: str, n: int = 64) -> list[str]:
    """``n`` files (relative paths) of the standard library ``stdlib``, of packages the sandbox's
    processes never import."""
    files = []
    for package in ("asyncio", "email", "multiprocessing", "xml/dom", "xml/etree"):
        files += sorted(f"{package}/{name}" for name in os.listdir(os.path.join(stdlib, package)) if name.endswith(".py"))
    assert len(files) >= n
    return files[:n]


def mode_stdlib(mode: str) -> str:
    """The standard library that candidates of ``mode`` read (its interpreter's)."""
    from test_sandbox_modes import mode_interpreter

    exe, _ = mode_interpreter(mode)
    return subprocess.run([exe, "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"], capture_output=True,
                          text=True, timeout=60, check=True).stdout.strip()


def evict(stdlib: str, files: list[str]) -> None:
    for name in files:
        fd = os.open(os.path.join(stdlib, name), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# The writer, where seccomp is not there to refuse posix_fadvise (a job refusing it): it first
# evicts every page itself, since the candidate launcher has read the whole library (its copy)
# since the test evicted them.
PAGE_EVICTING_WRITER = PAGE_WRITER.replace("    fd = open_host(name) if bit else None\n", """    fd = open_host(name)
    if fd is not None:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if not bit:
            os.close(fd)
            fd = None
""")


def page_cache_pair(bits: list[int], files: list[str], host: str, writer: str = PAGE_WRITER) -> list[str]:
    return [program.replace("{BITS}", repr(bits)).replace("{FILES!r}", repr(files)).replace("{HOST!r}", repr(host))
            for program in (writer, PAGE_READER)]


def test_unsandboxed_page_cache_timing_carries_the_bits():
    """The control: as plain processes, the reader recovers (nearly) every bit the writer left."""
    import random

    stdlib = sysconfig.get_paths()["stdlib"]
    files = unread_stdlib_files(stdlib)
    bits = [random.getrandbits(1) for _ in files]
    evict(stdlib, files)
    outs = [subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
            for program in page_cache_pair(bits, files, stdlib)]
    assert all(out.returncode == 0 for out in outs), outs
    assert _recovered(bits, outs[1].stdout) >= 60, (bits, outs[1].stdout)


# Host paths a program could look up (a lookup fills the kernel's dentry and inode caches, which
# a later run can time: without namespaces a writer's stat of 32 of 64 rarely used host files let
# a reader, timing its own stat of each, recover 57 of 64 bits; measured 2026-12-05). Prints the
# ones that exist for it.
HOST_PATHS = """
import os
FOUND = []
for path in {PATHS!r}:
    try:
        os.stat(path)
        FOUND.append(path)
    except OSError:
        pass
print("FOUND", FOUND, flush=True)
def f(x):
    return 41 + x if FOUND else -1
"""


def host_paths(own: Path) -> list[str]:
    """Paths of the host's; ``own``: a directory of the test's (not ``/tmp`` itself, which a
    private root has too: its own tmpfs)."""
    return ["/etc/passwd", "/etc", "/usr/bin", "/var", "/proc/1", "/proc/self", str(own) + "/.",
            os.path.realpath(sys.executable), str(Path(__file__).resolve())]


def test_unsandboxed_control_finds_the_host_paths(tmp_path):
    proc = subprocess.run([sys.executable, "-c", HOST_PATHS.replace("{PATHS!r}", repr(host_paths(tmp_path)))],
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.startswith("FOUND ") and json.loads(proc.stdout[6:].replace("'", '"')) == host_paths(tmp_path), proc


@pytest.mark.parametrize("mode", MODES)
def test_no_host_path_is_in_sight_with_a_root_of_its_own(mode, tmp_path):
    """A private root, or where there are no namespaces and the candidate is uid 0, a jail (a
    chroot into the run's directory): no host path exists for the program, so none of its lookups
    reaches the host's directories (the dentry and inode caches stay out of its reach)."""
    (result,) = run_in_mode(mode, [{"program": HOST_PATHS.replace("{PATHS!r}", repr(host_paths(tmp_path))), "tests": TESTS1,
                                    "entry_point": "f"}])
    layers = result["isolation"].split(",")
    if "chroot" not in layers and "jail" not in layers:
        assert "no-namespaces" in mode and os.geteuid() != 0, result  # only a plain user without namespaces
        pytest.skip("without namespaces a plain user cannot change its root: the host's paths stay in sight")
    assert "FOUND []" in result["stdout"], result
    assert result["verdict"] != "passed" and result["cases_passed"] == 0, result


@pytest.mark.parametrize("mode", MODES)
def test_a_run_leaves_no_page_cache_bits_for_another(mode):
    """Candidates read the standard library from memory: with a private root a copy on a tmpfs,
    with namespaces refused the launcher's image in a memfd (the host's files refused to them).
    The writer reads the first page of the files of its 1 bits, the reader times a read of each:
    it recovers what chance gives (32 of 64), not the writer's bits (64 of 64 with namespaces
    refused before the image, and outside the sandbox)."""
    import random

    stdlib = mode_stdlib(mode)
    files = unread_stdlib_files(stdlib)
    bits = [random.getrandbits(1) for _ in files]
    evict(stdlib, files)
    writer, reader = run_in_mode(mode, [{"program": program, "tests": TESTS1, "entry_point": "f"}
                                        for program in page_cache_pair(bits, files, stdlib)])
    assert "BITS " in reader["stdout"], (writer, reader)
    assert writer["verdict"] == reader["verdict"] == "failed", (writer, reader)
    assert _recovered(bits, reader["stdout"]) <= 48, (bits, reader["stdout"])  # chance: 32 +- 4


@pytest.mark.parametrize("mode", [m for m in MODES if "no-namespaces" not in m])
def test_a_candidate_making_its_own_root_leaves_no_page_cache_bits(mode):
    """A candidate that makes its namespaces and its root itself (a job the candidate launcher
    cannot serve: here one refusing seccomp, so the writer may evict pages itself; also every
    candidate where that launcher's probe failed) gets a copy of the launcher's image in its root,
    not the host's library: none of the reader's 64 opens of the host's files works, and it
    recovers what chance gives (it recovered 64 of 64 when the host's library was bound into the
    root)."""
    import random

    stdlib = mode_stdlib(mode)
    files = unread_stdlib_files(stdlib)
    bits = [random.getrandbits(1) for _ in files]
    pair = page_cache_pair(bits, files, stdlib, writer=PAGE_EVICTING_WRITER)
    writer, reader = run_in_mode(mode, [{"program": program, "tests": TESTS1, "entry_point": "f"} for program in pair],
                                 refuse=("seccomp",))
    assert "chroot" in reader["isolation"] and "seccomp" not in reader["isolation"], reader
    assert writer["verdict"] == reader["verdict"] == "failed", (writer, reader)
    assert "REFUSED 64" in reader["stdout"], reader["stdout"]
    assert _recovered(bits, reader["stdout"]) <= 48, (bits, reader["stdout"])  # chance: 32 +- 4


# Tries every way a program has to change the standard library it imports (without namespaces:
# the launcher's image, a memfd shared by every such candidate) and prints what worked.
TAMPER = """
import os, sys, mmap, fcntl
CHANGED = []
def attempt(name, call):
    try:
        call()
        CHANGED.append(name)
    except BaseException:
        pass
image = next((e for e in sys.path if e.startswith("/proc/self/fd/")), None)  # its fd (no path in a jail)
if image is not None:
    fd = int(image.rsplit("/", 1)[1])
    attempt("reopen for writing", lambda: os.close(os.open(image, os.O_RDWR)))
    attempt("write", lambda: os.pwrite(fd, b"PK", 0))
    attempt("truncate", lambda: os.ftruncate(fd, 0))
    attempt("map for writing", lambda: mmap.mmap(fd, 4096, access=mmap.ACCESS_WRITE))
    attempt("remove a seal", lambda: fcntl.fcntl(fd, 1033, 0))
print("IMAGE", image, "CHANGED", CHANGED, flush=True)
def f(x):
    return -1
"""
# After TAMPER: a module the launcher does not preload, imported from the image, still works.
LATER = "import email.mime.text\ndef f(x):\n    return 41 + x if email.mime.text.MIMEText('x').get_payload() == 'x' else -1\n"


@pytest.mark.parametrize("mode", [m for m in MODES if "no-namespaces" in m])
def test_no_candidate_changes_the_launchers_image(mode):
    """Without namespaces the candidates import from the launcher's image: a program trying to
    write, truncate, map it for writing or unseal it changes nothing, and a later run imports from
    it as before."""
    tamper, later = run_in_mode(mode, [{"program": TAMPER, "tests": TESTS1, "entry_point": "f"},
                                       {"program": LATER, "tests": TESTS1, "entry_point": "f"}])
    assert "IMAGE /proc/self/fd/" in tamper["stdout"] and "CHANGED []" in tamper["stdout"], tamper
    assert later["verdict"] == "passed", later


def _resident_pages(path: str, offset: int, length: int) -> list[bool]:
    """Which pages of ``path`` in ``[offset, offset + length)`` are in the page cache (mincore of
    a fresh shared mapping, which reads nothing in)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, length, 1, 1, fd, offset)  # PROT_READ, MAP_SHARED
        assert address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        try:
            pages = (length + 4095) // 4096
            vector = ctypes.create_string_buffer(pages)
            assert libc.mincore(address, length, vector) == 0, ctypes.get_errno()
            return [bool(byte & 1) for byte in vector.raw[:pages]]
        finally:
            libc.munmap(address, length)
    finally:
        os.close(fd)


def _file_ranges(pid: int) -> list[tuple[str, int, int, int]]:
    """``(path, file offset, start address, length)`` of every readable mapping of a file by ``pid``."""
    ranges = []
    with open(f"/proc/{pid}/maps") as handle:
        for line in handle:
            fields = line.split(None, 5)
            if len(fields) == 6 and fields[5].strip().startswith("/") and "r" in fields[1] and os.path.isfile(fields[5].strip()):
                start, end = (int(value, 16) for value in fields[0].split("-"))
                ranges.append((fields[5].strip(), int(fields[2], 16), start, end - start))
    return ranges


def _page_kinds(pid: int, start: int, length: int) -> list[str]:
    """Per page of ``pid``'s memory from ``start``: ``file`` (a page of the file's page cache,
    mapped), ``copy`` (its own copy: written at relocation, or by the lock of a writable mapping;
    a forked candidate reads that copy, never the file), ``absent`` (/proc/<pid>/pagemap)."""
    import struct

    pages = length // 4096
    with open(f"/proc/{pid}/pagemap", "rb") as handle:
        handle.seek(start // 4096 * 8)
        entries = struct.unpack(f"={pages}Q", handle.read(pages * 8))
    return ["absent" if not entry >> 63 & 1 else "file" if entry >> 61 & 1 else "copy" for entry in entries]


def test_no_page_of_the_files_candidates_map_can_be_evicted():
    """Every candidate is a fork of the launcher and can touch every page of the files it maps
    (the interpreter, libpython, the C library, extension modules): as root the launcher locks
    them all in memory (each page present in its page tables, its mappings locked), so eviction
    (here ``fadvise(DONTNEED)`` on each file, as memory pressure or proactive reclaim would)
    leaves every page a candidate could read from the file cached, and a touch costs the same in
    every run. Without the lock most pages are absent from the launcher's page tables and the
    same call evicts them. The control: a standard-library file nobody maps is evicted too."""
    import mrgrpo.rewards.sandbox as sandbox

    import resource

    with open("/proc/self/status") as handle:
        effective = int(next(line for line in handle if line.startswith("CapEff:")).split()[1], 16)
    if not effective >> 14 & 1 and resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] != resource.RLIM_INFINITY:
        pytest.skip("locking the files' pages needs CAP_IPC_LOCK (or an RLIMIT_MEMLOCK above their size)")
    if os.geteuid() != 0:
        pytest.skip("reading another process's page map needs root")
    result = sandbox.run(sandbox.Job("def f(x):\n    return x\n", "def check(candidate):\n    assert candidate(1) == 1\n",
                                     "humaneval", "f", sandbox.Limits(wall_s=10, cpu_s=5)))
    assert result.passed, result
    launcher = sandbox.processes._zygote_instance
    ranges = _file_ranges(launcher.pid)
    assert any("libpython" in path or "python3" in path for path, _, _, _ in ranges), ranges
    for path in {path for path, _, _, _ in ranges}:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    evicted, absent = {}, {}
    for path, offset, start, length in ranges:
        length = min(length, max(0, os.path.getsize(path) - offset + 4095) // 4096 * 4096)  # no page past the file's end
        if not length:
            continue
        kinds = _page_kinds(launcher.pid, start, length)
        resident = _resident_pages(path, offset, length)
        absent[path] = absent.get(path, 0) + kinds.count("absent")
        evicted[path] = evicted.get(path, 0) + sum(1 for kind, cached in zip(kinds, resident) if kind != "copy" and not cached)
    assert not any(absent.values()) and not any(evicted.values()), (
        {path: n for path, n in absent.items() if n}, {path: n for path, n in evicted.items() if n})
    # what the candidate launcher (the parent of most candidates) maps, the launcher maps too
    if launcher.candidate_launcher_pid is not None:
        theirs = {(p, o) for p, o, _, _ in _file_ranges(launcher.candidate_launcher_pid)}
        assert theirs <= {(p, o) for p, o, _, _ in ranges}
    control = os.path.join(sysconfig.get_paths()["stdlib"], "pydoc_data", "topics.py")
    with open(control, "rb") as handle:
        handle.read()
    fd = os.open(control, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    assert not any(_resident_pages(control, 0, os.path.getsize(control)))


def _mappings(pid: int) -> list[dict]:
    """Each mapping of ``pid`` (/proc/<pid>/smaps): its address range, permissions, device,
    inode, file offset, path, ``Size`` in kB and ``locked`` (``VmFlags`` has ``lo``: mlock; the
    ``Locked`` figure is shared out among the processes mapping a page)."""
    mappings = []
    with open(f"/proc/{pid}/smaps") as handle:
        for line in handle:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:
                mappings.append({"range": fields[0], "perms": fields[1], "offset": fields[2], "dev": fields[3],
                                 "inode": fields[4], "path": fields[5] if len(fields) > 5 else ""})
            elif fields[0] == "Size:" and mappings:
                mappings[-1]["Size"] = int(fields[1])
            elif fields[0] == "VmFlags:" and mappings:
                mappings[-1]["locked"] = "lo" in fields[1:]
    return mappings


def _candidates(pids: list[int]) -> list[int]:
    """Those of ``pids`` confined as candidates (their own seccomp filter on top of the launcher's)."""
    found = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as handle:
                if int(next(line for line in handle if line.startswith("Seccomp_filters:")).split()[1]) >= 2:
                    found.append(pid)
        except (OSError, StopIteration):
            pass
    return found


@pytest.mark.parametrize("mode", MODES)
def test_every_disk_page_a_candidate_maps_is_held_in_memory(mode):
    """Whatever a candidate may lock (an unprivileged launcher usually 8 MB, less than the 15 MB of
    files it maps): every readable mapping of a file on a disk that a candidate holds is a range
    the launcher has locked; what it could not lock it replaced by anonymous copies (which are in
    no page cache). So no run can warm a cold page of those files for a later one to time."""
    if os.geteuid() != 0:
        pytest.skip("reading the launcher's and the candidates' memory maps needs root")
    from test_sandbox_modes import HERE as MODES_HERE, SRC, mode_interpreter

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    exe, kwargs = mode_interpreter(mode)
    proc = subprocess.Popen([exe, str(MODES_HERE / "sandbox_modes_script.py"), mode if mode != "nobody" else "as-is",
                             "--lifecycle=exception", str(SRC)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd="/", **kwargs)
    try:
        line = proc.stdout.readline()
        if not line:
            err = proc.communicate(timeout=60)[1]
            if mode.startswith("userns") and "unshare(CLONE_NEWUSER)" in err:
                pytest.skip("this system refuses unprivileged user namespaces")
            pytest.fail("the script printed nothing: " + err[-3000:])
        pids = json.loads(line)["pids"]
        candidates = _candidates(pids)
        held = {}
        for pid in pids:
            for m in _mappings(pid):
                if m.get("locked"):
                    held[(m["dev"], m["inode"], m["offset"], m["Size"])] = True
        loose = []
        for pid in candidates:
            for m in _mappings(pid):
                on_disk = m["path"].startswith("/") and m["dev"].split(":")[0] != "00"  # not tmpfs, memfd
                if on_disk and "r" in m["perms"] and (m["dev"], m["inode"], m["offset"], m["Size"]) not in held:
                    loose.append((pid, m["range"], m["perms"], m["path"]))
        proc.stdin.write("go\n")
        proc.stdin.flush()
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    assert len(candidates) >= 2, pids  # the two runs in flight (and the spare)
    assert not loose, loose[:20]
