"""A sandbox for untrusted generated code whose verdicts the code cannot spoof.

**The guarantee.** A run's verdict, its per-case counts and its timing are computed by a
*judge* process that no untrusted code ever runs in; the program runs in a separate
*candidate* process. The judge runs the tests in its own namespace, with its own pristine
builtins and its own copies of every module the tests import; each call the tests make to
the program is a request over a pipe, timed on the judge's clock, and what comes back is
decoded by a restricted decoder into plain data only (``None``, ``bool``, ``int``,
``float``, ``complex``, ``str``, ``bytes``, ``list``/``tuple``/``dict``/``set``/``frozenset``
of these; see ``_sandbox_wire``). Every value the tests see therefore has an exact built-in
type with that type's genuine comparison and arithmetic; an instance of a subclass of those
types (``Counter``, ``namedtuple``, a ``float`` subclass with a lying ``__sub__``) arrives as the
value its base type holds, without its methods; anything else the program returns (an
object, a function, a generator) fails that case with the named reason ``NotPlainData``.
Names the tests use resolve in the judge first (its builtins, the trusted context such as
HumanEval's prompt helpers, the tests), and only then among the program's definitions. A
reply the candidate writes before it is asked ends it (``EarlyExit``).
Only the judge holds the tests, the expected outputs and the pipe on which the verdict goes to
the caller; the candidate holds no secret and no channel to the caller except its captured
stdout/stderr. So nothing the program does to its own interpreter (lying ``__eq__`` or
``__sub__``, shadowing builtins or modules, patching clocks, walking frames, reading its own
memory, ``sys.exit``/``os._exit``/self-kill at import or call time, writing to any fd) changes
a verdict: at best it makes its own answers wrong or its process end, which fails the case.
stdin/stdout cases are compared by the judge too. This holds by construction in every mode;
what the program can reach *outside* its process is bounded by the isolation below.

**Processes.** A pristine ``python -I -S`` launcher (never a fork of the trainer) forks a
fresh candidate process for every run, and judge servers that judge one run at a time: a
judge never runs untrusted code, so it stays pristine from run to run; each run's tests get
a fresh namespace, and a judge whose run timed out is killed. With ``launcher=False`` both
are new interpreters per run. All of them end with the caller, on every exit path
(``run_many`` kills and reaps a batch's processes before an exception propagates; the
launcher kills everything it started when the caller's end of its socket closes).

**Isolation of the candidate**: empty environment, its own session, output captured and
capped, the whole process group killed on timeout, and before any untrusted code runs:

* when the caller is root: new **network** and **mount** namespaces, a fresh root on a private
  size-capped tmpfs (only the standard library, read-only with ``site-packages`` hidden, three
  devices, and the working directory; it vanishes with the process) entered with ``chroot``,
  then a drop to a fresh per-run uid, so ``RLIMIT_NPROC = 1`` forbids ``fork`` (and threads) and
  the caller's files, datasets and processes are out of reach. The judge and the launcher are
  non-dumpable (no ``ptrace``, no ``/proc/<pid>/mem``).
* otherwise (not root, or namespaces refused): a fresh temporary directory of the caller is the
  working directory (removed afterwards) and only the guards below hold, tightened: no
  ``ctypes`` and no reading outside the standard library and the working directory. The
  sandbox then says so once, loudly, in the log; ``require_isolation=True`` raises
  :class:`IsolationError` instead.
* rlimits: CPU time, address space, file size, open files, processes, core dumps;
* an audit hook that refuses process creation, signals, sockets, tracing, gc walking, new
  audit hooks, rlimit changes, and writes/deletes/renames outside the working directory.

Verdicts (:class:`Verdict`): ``passed``, ``failed`` (an assertion, a wrong answer, a value
that is not plain data), ``error`` (exception, ``error_type`` names it; ``EarlyExit`` when the
program's process ended without answering), ``timeout`` (wall or CPU), ``memory``, ``crashed``
(killed by a signal), ``invalid`` (the program does not compile).

Limits of the design, stated plainly: arguments are copies, so tests that check in-place
mutation of an argument see the original; the candidate's time *between* calls is not
counted (as root it has no threads to spend it with); tests may use only plain data with the
program (its functions, and module-level plain values).
"""

from __future__ import annotations

import atexit
import logging
import marshal
import os
import random
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from pathlib import Path

from mrgrpo.errors import IsolationError
from mrgrpo.rewards._sandbox_cases import build_cases, declared_stubs, free_names
from mrgrpo.rewards._sandbox_zygote import STUB_PREFIX, Zygote, ZygoteDied

__all__ = ["IsolationError", "Job", "Limits", "Result", "Verdict", "run", "run_many"]

logger = logging.getLogger(__name__)


class Verdict(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    CRASHED = "crashed"
    INVALID = "invalid"


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run.

    Attributes:
        wall_s: wall-clock seconds before both processes are killed (verdict ``timeout``).
        cpu_s: CPU seconds of the candidate (``RLIMIT_CPU``; SIGXCPU -> ``timeout``).
        memory_mb: the candidate's address space (``RLIMIT_AS``); ``MemoryError`` -> ``memory``.
        file_size_mb: largest file the program may write (``RLIMIT_FSIZE``).
        open_files: ``RLIMIT_NOFILE``.
        tmpfs_mb: size of the private filesystem (isolated mode).
        output_bytes: stdout and stderr are each kept up to this many bytes.
        kill_output_bytes: a run writing more than this in total is killed
            (verdict ``error``, ``error_type`` ``OutputLimitExceeded``).
        reply_bytes: the largest reply (one return value, one stdio case's output) the judge
            accepts; a larger one fails that case (``ValueTooLarge``) and ends the candidate.
    """

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    file_size_mb: int = 16
    open_files: int = 64
    tmpfs_mb: int = 64
    output_bytes: int = 64 * 1024
    kill_output_bytes: int = 8 * 1024 * 1024
    reply_bytes: int = 16 * 1024 * 1024


@dataclass(frozen=True)
class Job:
    """One program and its tests.

    Attributes:
        program: Python source (untrusted), run in the candidate process.
        tests: for ``humaneval`` the test module defining ``check(candidate)``; for
            ``assert`` assert statements (a string or a list); for ``stdio`` a sequence of
            ``(stdin, expected_stdout)`` pairs; ignored for ``none`` (program only).
        test_format: ``humaneval`` | ``assert`` | ``stdio`` | ``none``.
        entry_point: the function handed to ``check`` (``humaneval``).
        limits: per-run limits (default :class:`Limits`).
        context: trusted code the tests rely on (HumanEval's prompt: imports and helpers such
            as ``poly``), run in the judge before the tests. Functions it only declares (body =
            docstring / ``pass`` / ``...``) and ``entry_point`` come from the program; every
            other name the tests use is looked up in the judge first (its builtins, the
            context, the tests), then among the program's module-level definitions.
    """

    program: str
    tests: str | Sequence = ""
    test_format: str = "none"
    entry_point: str | None = None
    limits: Limits = field(default_factory=Limits)
    context: str = ""


@dataclass(frozen=True)
class Result:
    """What one run did.

    Attributes:
        verdict: see :class:`Verdict`.
        error_type: exception type name for ``error``/``failed``/``memory``/``invalid``.
        cases_passed / cases_total: test cases passed (judged by the judge), out of all cases.
        loaded: the program's top-level code ran without an exception (stdio: the first case
            ran without one).
        test_time: seconds of wall time of the candidate's calls (each from the judge sending
            the request to receiving the reply), summed, measured by the judge; ``None`` if
            the tests did not finish.
        wall_time: seconds from spawn to exit, as seen by the caller.
        stdout, stderr: the program's captured output, each capped at ``Limits.output_bytes``.
        returncode: the candidate's exit status (negative: killed by that signal).
        isolation: what the candidate achieved: e.g. ``netns,mountns,chroot,uid`` or ``guards``.
    """

    verdict: Verdict
    error_type: str | None = None
    cases_passed: int = 0
    cases_total: int = 0
    loaded: bool = False
    test_time: float | None = None
    wall_time: float = 0.0
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    isolation: str = ""

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASSED

    @property
    def pass_rate(self) -> float:
        return self.cases_passed / self.cases_total if self.cases_total else float(self.passed)


_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
_FAILED_KINDS = ("AssertionError", "WrongAnswer", "NotPlainData")


@lru_cache(maxsize=1)
def _boot_code() -> bytes:
    here = Path(__file__)
    codes = tuple(
        compile(here.with_name(name).read_text(), f"<mrgrpo-sandbox-{name[9:-3]}>", "exec", dont_inherit=True)
        for name in ("_sandbox_wire.py", "_sandbox_boot.py", "_sandbox_candidate.py", "_sandbox_judge.py")
    )
    return marshal.dumps(codes)


@lru_cache(maxsize=1)
def _interpreter() -> tuple[str, str]:
    """(real interpreter path, standard library directory) for the child."""
    import sysconfig

    return os.path.realpath(sys.executable), os.path.realpath(sysconfig.get_paths()["stdlib"])


_uids_lock = threading.Lock()
_uids_in_use: set[int] = set()


def _take_uid() -> int:
    with _uids_lock:
        while True:
            uid = 2_000_000 + random.randrange(1 << 24)
            if uid not in _uids_in_use:
                _uids_in_use.add(uid)
                return uid


@lru_cache(maxsize=4096)
def _tests_code(tests: str, test_format: str) -> tuple[bytes, int, tuple[str, ...]]:
    source, n_cases = build_cases(tests, test_format)
    code = compile(source, "<tests>", "exec", dont_inherit=True)
    return marshal.dumps(code), n_cases, free_names(source)


@lru_cache(maxsize=4096)
def _context_code(context: str) -> tuple[bytes, tuple[str, ...]]:
    code = compile(context, "<context>", "exec", dont_inherit=True)
    return marshal.dumps(code), declared_stubs(context)


def _stdio_pairs(tests: Iterable) -> list[tuple[str, str]]:
    pairs = []
    for case in tests:
        if isinstance(case, dict):
            pairs.append((str(case["input"]), str(case["output"])))
        else:
            stdin, expected = case
            pairs.append((str(stdin), str(expected)))
    return pairs


def _payloads(job: Job, workdir: str, uid: int, require_isolation: bool) -> tuple[dict, dict, int]:
    """(judge's job, candidate's job, number of cases). Raises ValueError/SyntaxError for bad tests."""
    limits = job.limits
    judge = {
        "mode": "none", "context": None, "declared": (), "tests": b"", "names": (), "n_cases": 0,
        "entry_point": job.entry_point or "", "stdio_cases": [], "value_cap": int(limits.reply_bytes),
    }
    fmt = job.test_format
    if fmt in ("humaneval", "assert"):
        tests = job.tests if isinstance(job.tests, str) else "\n".join(str(t) for t in job.tests)
        code, n_cases, names = _tests_code(tests, fmt)
        judge.update(mode="code", tests=code, n_cases=n_cases, names=names)
        if job.context:
            judge["context"], judge["declared"] = _context_code(job.context)
    elif fmt == "stdio":
        cases = _stdio_pairs(job.tests)
        judge.update(mode="stdio", stdio_cases=cases, n_cases=len(cases))
    elif fmt != "none":
        raise ValueError(f"unknown test format {fmt!r}; expected humaneval | assert | stdio | none")
    candidate = {
        "program": job.program,
        "workdir": workdir,
        "isolate": os.geteuid() == 0,
        "require_isolation": require_isolation,
        "uid": uid,
        "stdlib": _interpreter()[1],
        "tmpfs_kb": limits.tmpfs_mb * 1024,
        "cpu_s": max(1, int(limits.cpu_s)),
        "fsize": limits.file_size_mb << 20,
        "nofile": limits.open_files,
        "address_space": limits.memory_mb << 20,
    }
    return judge, candidate, judge["n_cases"]


def _framed(payload: dict) -> bytes:
    data = marshal.dumps(payload)
    return b"%010d" % len(data) + data


def run(job: Job, launcher: bool = True, require_isolation: bool = False) -> Result:
    """Run one job: its judge and its candidate process (blocking).

    ``launcher``: fork both processes from the pre-started launcher (see ``_sandbox_zygote``;
    much faster) rather than start two new ``python -I -S`` interpreters (same guarantee and
    isolation either way). ``require_isolation``: raise :class:`IsolationError` instead of
    running with the Python-level guards only when OS-level isolation is unavailable.
    """
    if require_isolation and os.geteuid() != 0:
        raise IsolationError(_ISOLATION_MESSAGE)
    limits = job.limits
    uid = _take_uid()
    workdir = tempfile.mkdtemp(prefix="mrgrpo-sbx-")
    try:
        os.chmod(workdir, 0o700)
        try:
            judge, candidate, n_cases = _payloads(job, workdir, uid, require_isolation)
        except (ValueError, SyntaxError) as error:
            return Result(Verdict.ERROR, error_type=f"TestsInvalid: {error}"[:200])
        stdins = (_framed(judge), _framed(candidate))
        zygote = _zygote() if launcher else None
        result = None
        if zygote is not None:
            try:
                result = _run_pair(_ZygotePair(zygote), stdins, n_cases, limits)
            except ZygoteDied:
                _drop_zygote(zygote)
        if result is None:
            result = _run_pair(_DirectPair(), tuple(b"%010d" % len(_boot_code()) + _boot_code() + s for s in stdins), n_cases, limits)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        with _uids_lock:
            _uids_in_use.discard(uid)
    if result.error_type == "IsolationUnavailable":
        raise IsolationError(_ISOLATION_MESSAGE)
    if "uid" not in result.isolation.split(","):
        _warn_guards_only()
    return result


_ISOLATION_MESSAGE = (
    "the sandbox cannot isolate generated code here (it needs root, or a container that allows "
    "mount/network namespaces and chroot): run as root, or pass require_isolation=False to run "
    "with Python-level guards only"
)
_warned = False


def _warn_guards_only() -> None:
    global _warned
    if not _warned:
        _warned = True
        logger.warning(
            "MRGRPO SANDBOX IS NOT ISOLATED: no namespaces, chroot or uid drop are available "
            "(not root, or refused by this system), so generated code runs with Python-level "
            "guards only and can reach this user's files and processes. Verdicts stay unspoofable "
            "(the judge is a separate process). Run as root for full isolation, or pass "
            "require_isolation=True to refuse to run instead."
        )


# --- launching the two processes ----------------------------------------------------------

_zygote_lock = threading.Lock()
_zygote_instance: Zygote | None = None
_zygote_deaths = 0
_MAX_ZYGOTE_DEATHS = 3  # then every run starts fresh interpreters instead


def _zygote() -> Zygote | None:
    """The process's launcher, started on first use (again after a fork of the caller)."""
    global _zygote_instance, _zygote_deaths
    with _zygote_lock:
        z = _zygote_instance
        if z is not None and z.alive and z.owner == os.getpid():
            return z
        if _zygote_deaths >= _MAX_ZYGOTE_DEATHS:
            return None
        try:
            _zygote_instance = Zygote(_interpreter()[0], _ENV, _boot_code())
        except OSError:
            _zygote_deaths = _MAX_ZYGOTE_DEATHS
            return None
        return _zygote_instance


def _drop_zygote(z: Zygote) -> None:
    global _zygote_instance, _zygote_deaths
    with _zygote_lock:
        if _zygote_instance is z:
            _zygote_instance = None
            _zygote_deaths += 1
    z.close()


def _forget_zygote_in_child() -> None:
    """After a fork of the caller: drop the child's copies of the launcher's sockets, so the
    launcher still sees its owner's end close when the owner exits (the child starts its own)."""
    global _zygote_instance
    z, _zygote_instance = _zygote_instance, None
    if z is not None:
        for _, sock in z.idle_judges:
            sock.close()
        z.forget()


os.register_at_fork(after_in_child=_forget_zygote_in_child)


@atexit.register
def _close_zygote() -> None:
    """At interpreter exit: end the launcher, and with it every sandbox process, and reap it."""
    global _zygote_instance
    with _zygote_lock:
        z, _zygote_instance = _zygote_instance, None
    if z is not None and z.owner == os.getpid():
        z.close()


class _DirectPair:
    """Judge and candidate started as new interpreters (``python -I -S -c <stub> <fds>``)."""

    def start(self, judge_fds, candidate_fds) -> tuple[int, int]:
        exe = _interpreter()[0]
        self.procs = {}
        j_in, j_report, j_to, j_from = judge_fds
        c_in, c_out, c_err, c_from, c_to = candidate_fds
        for role, stdin, stdout, stderr, extra in (
            ("candidate", c_in, c_out, c_err, (c_from, c_to)),
            ("judge", j_in, subprocess.DEVNULL, subprocess.DEVNULL, (j_report, j_to, j_from)),
        ):
            stub = STUB_PREFIX + f"g['_boot'](_read, {role!r})\n"
            proc = subprocess.Popen(
                [exe, "-I", "-S", "-c", stub, *map(str, extra)],
                stdin=stdin, stdout=stdout, stderr=stderr, env=_ENV, cwd="/",
                start_new_session=True, pass_fds=extra,
            )
            self.procs[proc.pid] = proc
        judge_pid, candidate_pid = list(self.procs)[1], list(self.procs)[0]
        return judge_pid, candidate_pid

    def wait(self, pid: int, timeout: float | None) -> int | None:
        try:
            return self.procs[pid].wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def end(self, pids: tuple[int, int], judge_done: bool) -> int | None:
        judge_pid, candidate_pid = pids
        _kill(candidate_pid)
        if not judge_done:
            _kill(judge_pid)
        returncode = self.wait(candidate_pid, 5.0)
        if self.wait(judge_pid, 1.0) is None:
            _kill(judge_pid)
            self.wait(judge_pid, 5.0)
        return returncode


class _ZygotePair:
    """A judge server (reused from run to run) and a candidate forked by the launcher."""

    def __init__(self, zygote: Zygote):
        self.zygote = zygote
        self.judge: tuple[int, socket.socket] | None = None

    def _judge(self) -> tuple[int, socket.socket]:
        with _zygote_lock:
            if self.zygote.idle_judges:
                return self.zygote.idle_judges.pop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = self.zygote.spawn(b"K", [theirs.fileno()])
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return pid, ours

    def start(self, judge_fds, candidate_fds) -> tuple[int, int]:
        for attempt in range(3):
            pid, sock = self._judge()
            try:
                socket.send_fds(sock, [b"J"], list(judge_fds))
                break
            except OSError:  # that judge server is gone: take another
                sock.close()
                _kill(pid)
                if attempt == 2:
                    raise ZygoteDied("sandbox judge servers keep failing") from None
        self.judge = (pid, sock)
        try:
            candidate = self.zygote.spawn(b"C", candidate_fds)
        except BaseException:
            self.end_judge(ok=False)
            raise
        return pid, candidate

    def end_judge(self, ok: bool) -> None:
        """The run is over: keep its judge for the next run (``ok``) or kill and reap it."""
        pid, sock = self.judge  # type: ignore[misc]
        if ok and not self.zygote.exited(pid):
            with _zygote_lock:
                if self.zygote.alive:
                    self.zygote.idle_judges.append((pid, sock))
                    return
        sock.close()
        _kill(pid)
        self.zygote.wait(pid, 5.0)

    def end(self, pids: tuple[int, int], judge_done: bool) -> int | None:
        judge_pid, candidate_pid = pids
        _kill(candidate_pid)
        returncode = self.zygote.wait(candidate_pid, 5.0)
        self.end_judge(judge_done)
        return returncode

    def wait(self, pid: int, timeout: float | None) -> int | None:
        return self.zygote.wait(pid, timeout)


_live_lock = threading.Lock()
_live: set[int] = set()  # pids of the judge and candidate processes of runs in progress


def _live_pids() -> set[int]:
    """Sandbox processes started and not yet reaped: runs in progress, idle judge servers and
    the launcher."""
    with _live_lock:
        pids = set(_live)
    z = _zygote_instance
    if z is not None and z.alive:
        pids.add(z.pid)
        pids.update(pid for pid, _ in list(z.idle_judges))
    return pids


def _kill(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _kill_all_live() -> None:
    with _live_lock:
        pids = list(_live)
    for pid in pids:
        _kill(pid)


def _run_pair(pair, stdins: tuple[bytes, bytes], n_cases: int, limits: Limits) -> Result:
    # judge: stdin, report; candidate: stdin, stdout, stderr; judge->candidate, candidate->judge
    j_in, report, c_in, c_out, c_err, j2c, c2j = (os.pipe() for _ in range(7))
    judge_fds = (j_in[0], report[1], j2c[1], c2j[0])
    candidate_fds = (c_in[0], c_out[1], c_err[1], j2c[0], c2j[1])
    ours = (j_in[1], report[0], c_in[1], c_out[0], c_err[0])
    # Fill both stdin pipes before the processes exist (a pipe holds 64 KiB), so that each
    # starts working at once; _collect writes whatever did not fit.
    stdins = tuple(_prefill(fd, data) for fd, data in ((j_in[1], stdins[0]), (c_in[1], stdins[1])))
    started = time.monotonic()
    pids: tuple[int, int] | None = None
    try:
        try:
            with _live_lock:  # register before the pids exist: a cancel kills them
                pids = pair.start(judge_fds, candidate_fds)
                _live.update(pids)
        finally:
            for fd in judge_fds + candidate_fds:
                os.close(fd)
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    owned = set(ours)  # _collect closes the stdins early and removes them: never close twice
    got = None
    try:
        got = _collect(pids, ours, owned, stdins, limits, started)
    finally:
        for fd in owned:
            os.close(fd)
        # the judge has spoken (or failed): the candidate's part is over
        returncode = pair.end(pids, judge_done=got is not None and got[4])
        with _live_lock:
            _live.difference_update(pids)
    reports, stdout, stderr, killed_for, _ = got
    return _verdict(reports, n_cases, returncode, killed_for, time.monotonic() - started, stdout, stderr)


def _prefill(fd: int, data: bytes) -> bytes:
    """Write what fits into the pipe ``fd`` without blocking; the rest."""
    os.set_blocking(fd, False)
    try:
        return data[os.write(fd, data) :]
    except BlockingIOError:
        return data


def _collect(pids, fds, owned, stdins, limits, started):
    """Feed both stdins, gather output and the judge's report until the judge is done (then a
    short grace for the candidate's last output) or the deadline; kills on timeout/output."""
    judge_pid, candidate_pid = pids
    j_in, report_fd, c_in, out_fd, err_fd = fds
    deadline = started + limits.wall_s
    grace_end = deadline
    selector = selectors.DefaultSelector()
    buffers = {out_fd: bytearray(), err_fd: bytearray(), report_fd: bytearray()}
    for fd in buffers:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    pending = {}
    for fd, data in ((j_in, stdins[0]), (c_in, stdins[1])):
        if data:
            pending[fd] = memoryview(data)
            selector.register(fd, selectors.EVENT_WRITE)
        else:
            owned.discard(fd)
            os.close(fd)
    open_reads = set(buffers)
    total = 0
    killed_for = None
    try:
        while open_reads:
            now = time.monotonic()
            if now >= deadline:
                killed_for = "timeout"
                break
            if report_fd not in open_reads and now >= grace_end:
                break
            for key, _ in selector.select(min(deadline, grace_end) - now):
                fd = key.fd
                if fd in pending:
                    try:
                        pending[fd] = pending[fd][os.write(fd, pending[fd][: 1 << 16]) :]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        pending[fd] = pending[fd][:0]
                    if not pending[fd]:
                        del pending[fd]
                        selector.unregister(fd)
                        owned.discard(fd)
                        os.close(fd)
                    continue
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(fd)
                    open_reads.discard(fd)
                    if fd == report_fd:
                        grace_end = min(deadline, time.monotonic() + 0.5)
                    continue
                keep = buffers[fd]
                if fd == report_fd:
                    if len(keep) < (1 << 20):
                        keep += chunk
                    continue
                total += len(chunk)
                if len(keep) < limits.output_bytes:
                    keep += chunk[: limits.output_bytes - len(keep)]
                if total > limits.kill_output_bytes:
                    killed_for = "output"
                    break
            if killed_for:
                break
    finally:
        selector.close()
    if killed_for:
        _kill(judge_pid)
    reports = bytes(buffers[report_fd]).decode("ascii", "replace").splitlines()
    judge_done = not killed_for and report_fd not in open_reads and bool(reports) and reports[-1].split()[0] in _LAST
    return (
        reports,
        bytes(buffers[out_fd]).decode("utf-8", "replace"),
        bytes(buffers[err_fd]).decode("utf-8", "replace"),
        killed_for,
        judge_done,
    )


_LAST = ("done", "error", "invalid")  # the judge's last line of a run it finished


def _verdict(reports, n_cases, returncode, killed_for, wall, stdout, stderr) -> Result:
    """The judge's report lines (trusted) + the candidate's exit status -> a Result."""
    isolation, loaded, done, error, invalid = "", False, None, None, None
    outcomes: dict[int, str | None] = {}
    for line in reports:
        words = line.split()
        if not words:
            continue
        kind = words[0]
        if kind == "iso" and len(words) > 1:
            isolation = words[1]
        elif kind == "loaded":
            loaded = True
        elif kind == "invalid":
            invalid = words[1] if len(words) > 1 else "SyntaxError"
        elif kind == "error" and error is None:
            error = words[1] if len(words) > 1 else "Exception"
        elif kind == "case" and len(words) >= 3 and words[1].isdigit():
            index = int(words[1])
            if index < n_cases and index not in outcomes:
                outcomes[index] = None if words[2] == "ok" else (words[3] if len(words) > 3 else "Exception")
        elif kind == "done" and len(words) == 3 and words[1].isdigit() and words[2].isdigit():
            done = (int(words[1]), int(words[2]) / 1e9)
    cases_passed = sum(1 for i in range(n_cases) if outcomes.get(i, "missing") is None)
    common = dict(
        cases_passed=cases_passed, cases_total=n_cases, loaded=loaded, wall_time=wall,
        stdout=stdout, stderr=stderr, returncode=returncode, isolation=isolation,
    )
    first_failure = next((outcomes[i] for i in range(n_cases) if outcomes.get(i)), None)
    if invalid is not None:
        return Result(Verdict.INVALID, error_type=invalid, **common)
    if killed_for == "output":
        return Result(Verdict.ERROR, error_type="OutputLimitExceeded", **common)
    if killed_for == "timeout":
        return Result(Verdict.TIMEOUT, error_type="Timeout", **common)
    if error == "CandidateGone" or (error is None and first_failure == "CandidateGone"):
        return _candidate_ended(returncode, stderr, common)
    if error is not None:
        verdict = Verdict.MEMORY if error == "MemoryError" else Verdict.ERROR
        return Result(verdict, error_type=error, **common)
    if done is None or done[0] != n_cases or len(outcomes) != n_cases:
        return Result(Verdict.ERROR, error_type="JudgeFailed", **common)  # pragma: no cover
    test_time = done[1]
    if first_failure is None:
        return Result(Verdict.PASSED, test_time=test_time, **common)
    if first_failure in _FAILED_KINDS:
        return Result(Verdict.FAILED, error_type=first_failure, test_time=test_time, **common)
    if first_failure == "MemoryError":
        return Result(Verdict.MEMORY, error_type=first_failure, test_time=test_time, **common)
    return Result(Verdict.ERROR, error_type=first_failure, test_time=test_time, **common)


def _candidate_ended(returncode, stderr, common) -> Result:
    """The candidate's process ended without answering: its exit status says how."""
    memory_hint = "MemoryError" in stderr or "Cannot allocate memory" in stderr
    if returncode is not None and returncode < 0:
        sig = -returncode
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            return Result(Verdict.TIMEOUT, error_type="CPUTimeExceeded", **common)
        if memory_hint:
            return Result(Verdict.MEMORY, error_type="MemoryError", **common)
        if sig == signal.SIGXFSZ:
            return Result(Verdict.ERROR, error_type="FileSizeExceeded", **common)
        name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
        return Result(Verdict.CRASHED, error_type=name, **common)
    if memory_hint:
        return Result(Verdict.MEMORY, error_type="MemoryError", **common)
    return Result(Verdict.ERROR, error_type="EarlyExit", **common)


def default_workers() -> int:
    """Parallel runs by default: one per core the process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def run_many(
    jobs: Sequence[Job],
    workers: int | None = None,
    progress: bool | None = None,
    launcher: bool = True,
    require_isolation: bool = False,
) -> list[Result]:
    """Run ``jobs`` in parallel (``workers`` at a time, default: one per core); results in order.

    Each job gets its own judge and candidate processes; one hostile job cannot disturb
    another or the caller. ``progress``: show a tqdm bar (default: for batches of 64 or more on
    a TTY). If the caller is interrupted (an exception, ``KeyboardInterrupt``, a signal
    handler raising), queued jobs are dropped and every running job's processes are killed
    and reaped before the exception propagates.
    """
    jobs = list(jobs)
    if not jobs:
        return []
    workers = default_workers() if workers is None else max(1, int(workers))
    if progress is None:
        progress = len(jobs) >= 64 and sys.stderr.isatty()
    results: list[Result | None] = [None] * len(jobs)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(jobs), desc="sandbox", unit="prog")
    pool = ThreadPoolExecutor(max_workers=min(workers, len(jobs)), thread_name_prefix="mrgrpo-sandbox")
    # Which jobs are running is counted by the jobs themselves, under one lock with the cancel
    # flag: an interruption can arrive before the futures are all submitted (or recorded), and
    # once `cancelled` is set no job starts, so `running` covers every job that did.
    state = {"running": 0, "cancelled": False}
    state_lock = threading.Lock()

    def guarded(job: Job) -> Result | None:
        with state_lock:
            if state["cancelled"]:
                return None
            state["running"] += 1
        try:
            return run(job, launcher, require_isolation)
        finally:
            with state_lock:
                state["running"] -= 1

    try:
        futures = {pool.submit(guarded, job): i for i, job in enumerate(jobs)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if bar is not None:
                bar.update(1)
    except BaseException:
        with state_lock:
            state["cancelled"] = True
        pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + 30.0
        # kill until every running job has noticed and reaped its processes
        while time.monotonic() < deadline:
            with state_lock:
                if not state["running"]:
                    break
            _kill_all_live()
            time.sleep(0.01)
        pool.shutdown(wait=True)
        raise
    finally:
        if bar is not None:
            bar.close()
    pool.shutdown(wait=True)
    return results  # type: ignore[return-value]

