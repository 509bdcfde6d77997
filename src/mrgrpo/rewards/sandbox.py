"""A sandbox for untrusted generated code: run a program and its tests in a fresh interpreter.

Every run is a new ``python -I -S`` process (never a fork of the caller) started with an
empty environment (``PATH``, ``LANG`` only), its own session (the whole process group is
killed on timeout), stdout/stderr captured and capped, and a bootstrap
(``_sandbox_boot.py``) that, before any untrusted code runs:

* when the caller is root: enters new **network** and **mount** namespaces, mounts a private
  size-capped tmpfs on ``/tmp`` (the working directory lives there and vanishes with the
  process), covers the other world-writable directories with read-only empty tmpfs, and drops
  to a fresh per-run uid, so ``RLIMIT_NPROC = 1`` forbids ``fork`` (and threads) and the
  caller's files and processes are out of reach. Otherwise a fresh temporary directory of
  the caller is the working directory (removed afterwards) and the guards below do the work;
* sets rlimits: CPU time, address space, file size, open files, processes, core dumps;
* installs an audit hook that refuses process creation, signals, sockets, tracing, gc
  walking, new audit hooks, rlimit changes, and writes/deletes/renames outside the working
  directory.

A pass is **proved**, not inferred from the exit code: the bootstrap reports each test case
and the end of the tests over a private pipe, each line prefixed by a per-run random nonce
that the program cannot read (see ``_sandbox_boot``). ``sys.exit(0)``/``os._exit(0)`` or a
self-kill before the tests, overriding ``AssertionError``/``exit``/``check`` or the
builtins, all end without a proved pass.

Verdicts (:class:`Verdict`): ``passed``, ``failed`` (an assertion / wrong answer),
``error`` (exception, ``error_type`` names it), ``timeout`` (wall or CPU), ``memory``,
``crashed`` (killed by a signal), ``invalid`` (the program does not compile).

Limits of the design, stated plainly: the program shares its process with the bootstrap,
so code that reads raw memory (``ctypes``) could in principle find the nonce; what it can
reach outside its process is bounded by the OS-level isolation above (full only as root),
not by the Python-level guards. Results whose ``==`` is always true are not detected.
"""

from __future__ import annotations

import marshal
import os
import random
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from pathlib import Path

from mrgrpo.rewards._sandbox_cases import build_cases, imported_modules
from mrgrpo.rewards._sandbox_zygote import STUB_PREFIX, Zygote, ZygoteDied

__all__ = ["Job", "Limits", "Result", "Verdict", "run", "run_many"]


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
        wall_s: wall-clock seconds before the process group is killed (verdict ``timeout``).
        cpu_s: CPU seconds (``RLIMIT_CPU``; SIGXCPU -> ``timeout``).
        memory_mb: address space (``RLIMIT_AS``); ``MemoryError`` -> ``memory``.
        file_size_mb: largest file the program may write (``RLIMIT_FSIZE``).
        open_files: ``RLIMIT_NOFILE``.
        tmpfs_mb: size of the private ``/tmp`` (isolated mode).
        output_bytes: stdout and stderr are each kept up to this many bytes.
        kill_output_bytes: a run writing more than this in total is killed
            (verdict ``error``, ``error_type`` ``OutputLimitExceeded``).
    """

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    file_size_mb: int = 16
    open_files: int = 64
    tmpfs_mb: int = 64
    output_bytes: int = 64 * 1024
    kill_output_bytes: int = 8 * 1024 * 1024


@dataclass(frozen=True)
class Job:
    """One program and its tests.

    Attributes:
        program: Python source (untrusted).
        tests: for ``humaneval`` the test module defining ``check(candidate)``; for
            ``assert`` assert statements (a string or a list); for ``stdio`` a sequence of
            ``(stdin, expected_stdout)`` pairs; ignored for ``none`` (program only).
        test_format: ``humaneval`` | ``assert`` | ``stdio`` | ``none``.
        entry_point: the function handed to ``check`` (``humaneval``).
        limits: per-run limits (default :class:`Limits`).
    """

    program: str
    tests: str | Sequence = ""
    test_format: str = "none"
    entry_point: str | None = None
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True)
class Result:
    """What one run did.

    Attributes:
        verdict: see :class:`Verdict`.
        error_type: exception type name for ``error``/``failed``/``memory``/``invalid``.
        cases_passed / cases_total: test cases passed, out of all cases of the job.
        loaded: the program's top-level code ran without an exception.
        test_time: seconds spent inside the tests (measured in the child), ``None`` if the
            tests did not finish.
        wall_time: seconds from spawn to exit, as seen by the caller.
        stdout, stderr: captured output, each capped at ``Limits.output_bytes``.
        returncode: the child's exit status (negative: killed by that signal).
        isolation: what the child achieved: e.g. ``netns,mountns,uid`` or ``guards``.
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


_STUB = STUB_PREFIX + "g['_boot'](_read)\n"
_REPORT_FD = 3
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


@lru_cache(maxsize=1)
def _boot_code() -> bytes:
    source = (Path(__file__).with_name("_sandbox_boot.py")).read_text()
    return marshal.dumps(compile(source, "<mrgrpo-sandbox-boot>", "exec", dont_inherit=True))


@lru_cache(maxsize=1)
def _interpreter() -> tuple[str, str]:
    """(real interpreter path, standard library directory) for the child."""
    import sysconfig

    executable = os.path.realpath(sys.executable)
    return executable, os.path.realpath(sysconfig.get_paths()["stdlib"])


def _world_writable_dirs() -> list[str]:
    return [d for d in ("/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue") if os.path.isdir(d)]


_uids_lock = threading.Lock()
_uids_in_use: set[int] = set()


def _take_uid() -> int:
    with _uids_lock:
        while True:
            uid = 2_000_000 + random.randrange(1 << 24)
            if uid not in _uids_in_use:
                _uids_in_use.add(uid)
                return uid


def _job_payload(job: Job, workdir: str, uid: int) -> tuple[dict, int]:
    limits = job.limits
    payload = {
        "program": job.program,
        "mode": "none",
        "tests": "",
        "n_cases": 0,
        "stdio_cases": [],
        "test_modules": (),
        "entry_point": job.entry_point or "",
        "workdir": workdir,
        "isolate": os.geteuid() == 0,
        "uid": uid,
        "stdlib": _interpreter()[1],
        "readonly_dirs": _world_writable_dirs(),
        "tmpfs_kb": limits.tmpfs_mb * 1024,
        "cpu_s": max(1, int(limits.cpu_s)),
        "fsize": limits.file_size_mb << 20,
        "nofile": limits.open_files,
        "address_space": limits.memory_mb << 20,
    }
    fmt = job.test_format
    if fmt in ("humaneval", "assert"):
        source, n_cases = build_cases(job.tests, fmt)
        payload.update(mode="code", tests=source, n_cases=n_cases, test_modules=_test_modules(source))
    elif fmt == "stdio":
        cases = [(str(i), str(o)) for i, o in _stdio_pairs(job.tests)]
        payload.update(mode="stdio", stdio_cases=cases, n_cases=len(cases))
    elif fmt != "none":
        raise ValueError(f"unknown test format {fmt!r}; expected humaneval | assert | stdio | none")
    return payload, payload["n_cases"]


@lru_cache(maxsize=4096)
def _test_modules(source: str) -> tuple[str, ...]:
    return imported_modules(source)


def _stdio_pairs(tests: Iterable) -> list[tuple[str, str]]:
    pairs = []
    for case in tests:
        if isinstance(case, dict):
            pairs.append((case["input"], case["output"]))
        else:
            stdin, expected = case
            pairs.append((stdin, expected))
    return pairs


def run(job: Job, launcher: bool = True) -> Result:
    """Run one job in a fresh sandboxed interpreter (blocking).

    ``launcher``: start the child from the pre-started launcher (see ``_sandbox_zygote``;
    much faster) rather than as a new ``python -I -S`` process (same isolation either way).
    """
    limits = job.limits
    uid = _take_uid()
    workdir = tempfile.mkdtemp(prefix="mrgrpo-sbx-")
    try:
        os.chmod(workdir, 0o700)
        try:
            payload, n_cases = _job_payload(job, workdir, uid)
        except (ValueError, SyntaxError) as error:
            return Result(Verdict.ERROR, error_type=f"TestsInvalid: {error}"[:200])
        nonce = secrets.token_hex(16).encode()
        job_bytes = marshal.dumps(payload)
        stdin = nonce + b"%010d" % len(job_bytes) + job_bytes
        zygote = _zygote() if launcher else None
        if zygote is not None:
            try:
                return _run_child(_ZygoteChild(zygote), stdin, nonce, n_cases, limits)
            except ZygoteDied:
                _drop_zygote(zygote)
        data = _boot_code()
        return _run_child(_DirectChild(), b"%010d" % len(data) + data + stdin, nonce, n_cases, limits)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        with _uids_lock:
            _uids_in_use.discard(uid)


_zygote_lock = threading.Lock()
_zygote_instance: Zygote | None = None
_zygote_deaths = 0
_MAX_ZYGOTE_DEATHS = 3  # then every run starts a fresh interpreter instead


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


class _DirectChild:
    """A child started as a new interpreter (``python -I -S -c _STUB <report fd>``)."""

    def start(self, fds: tuple[int, int, int, int]) -> None:
        stdin_r, stdout_w, stderr_w, report_w = fds
        self.proc = subprocess.Popen(
            [_interpreter()[0], "-I", "-S", "-c", _STUB, str(report_w)],
            stdin=stdin_r, stdout=stdout_w, stderr=stderr_w, env=_ENV, cwd="/",
            start_new_session=True, pass_fds=(report_w,),
        )
        self.pid = self.proc.pid

    def wait(self, timeout: float | None) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


class _ZygoteChild:
    """A child forked by the launcher from its pristine state (the report pipe is fd 3)."""

    def __init__(self, zygote: Zygote):
        self.zygote = zygote

    def start(self, fds: tuple[int, int, int, int]) -> None:
        self.pid = self.zygote.spawn(fds)

    def wait(self, timeout: float | None) -> int | None:
        return self.zygote.wait(self.pid, timeout)


def _kill(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _run_child(child, stdin: bytes, nonce: bytes, n_cases: int, limits: Limits) -> Result:
    pipes = [os.pipe() for _ in range(4)]  # stdin, stdout, stderr, report: (read, write)
    theirs = (pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1])
    ours = (pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0])
    started = time.monotonic()
    try:
        try:
            child.start(theirs)
        finally:
            for fd in theirs:
                os.close(fd)
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    owned = set(ours)  # _collect closes stdin early and removes it: never close an fd twice
    try:
        return _collect(child, ours, owned, stdin, nonce, n_cases, limits, started)
    finally:
        for fd in owned:
            os.close(fd)


def _collect(child, fds, owned, stdin, nonce, n_cases, limits, started) -> Result:
    stdin_fd, out_fd, err_fd, report_fd = fds
    deadline = started + limits.wall_s
    selector = selectors.DefaultSelector()
    buffers = {out_fd: bytearray(), err_fd: bytearray(), report_fd: bytearray()}
    for fd in buffers:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    os.set_blocking(stdin_fd, False)
    pending = memoryview(stdin)
    selector.register(stdin_fd, selectors.EVENT_WRITE)
    open_reads = set(buffers)
    total = 0
    killed_for = None
    try:
        while open_reads:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                killed_for = "timeout"
                break
            for key, _ in selector.select(remaining):
                fd = key.fd
                if fd == stdin_fd:
                    try:
                        pending = pending[os.write(fd, pending[: 1 << 16]) :]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
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
                    continue
                total += len(chunk)
                keep = buffers[fd]
                cap = (1 << 20) if fd == report_fd else limits.output_bytes
                if len(keep) < cap:
                    keep += chunk[: cap - len(keep)]
                if total > limits.kill_output_bytes:
                    killed_for = "output"
                    break
            if killed_for:
                break
    finally:
        selector.close()
    if killed_for:
        _kill(child.pid)
    returncode = child.wait(max(0.0, deadline - time.monotonic()) + 1.0)
    if returncode is None:
        _kill(child.pid)
        killed_for = killed_for or "timeout"
        returncode = child.wait(None)
    return _verdict(
        reports=_reports(bytes(buffers[report_fd]), nonce),
        n_cases=n_cases,
        returncode=returncode,
        killed_for=killed_for,
        wall=time.monotonic() - started,
        stdout=bytes(buffers[out_fd]).decode("utf-8", "replace"),
        stderr=bytes(buffers[err_fd]).decode("utf-8", "replace"),
        cpu_limit=limits.cpu_s,
    )


def _reports(data: bytes, nonce: bytes) -> list[list[str]]:
    """The bootstrap's report lines (those carrying the nonce), split into words."""
    out = []
    for line in data.split(b"\n"):
        at = line.rfind(nonce + b" ")
        if at >= 0:
            out.append(line[at + len(nonce) + 1 :].decode("ascii", "replace").split())
    return out


def _verdict(reports, n_cases, returncode, killed_for, wall, stdout, stderr, cpu_limit) -> Result:
    isolation, loaded, done, error, invalid = "", False, None, None, None
    outcomes: dict[int, str | None] = {}
    for words in reports:
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
    cases_passed = sum(1 for i in range(n_cases) if i in outcomes and outcomes[i] is None)
    common = dict(
        cases_passed=cases_passed, cases_total=n_cases, loaded=loaded, wall_time=wall,
        stdout=stdout, stderr=stderr, returncode=returncode, isolation=isolation,
    )
    first_failure = next((outcomes[i] for i in range(n_cases) if outcomes.get(i)), None)
    memory_hint = "MemoryError" in stderr or "Cannot allocate memory" in stderr
    if invalid is not None:
        return Result(Verdict.INVALID, error_type=invalid, **common)
    if killed_for == "output":
        return Result(Verdict.ERROR, error_type="OutputLimitExceeded", **common)
    if killed_for == "timeout":
        return Result(Verdict.TIMEOUT, error_type="Timeout", **common)
    if error is not None:
        verdict = Verdict.MEMORY if error == "MemoryError" else Verdict.ERROR
        return Result(verdict, error_type=error, **common)
    if done is not None and done[0] == n_cases and len(outcomes) == n_cases:
        test_time = done[1]
        if first_failure is None:
            return Result(Verdict.PASSED, test_time=test_time, **common)
        if first_failure in ("AssertionError", "WrongAnswer"):
            return Result(Verdict.FAILED, error_type=first_failure, test_time=test_time, **common)
        if first_failure == "MemoryError":
            return Result(Verdict.MEMORY, error_type=first_failure, test_time=test_time, **common)
        return Result(Verdict.ERROR, error_type=first_failure, test_time=test_time, **common)
    if returncode is not None and returncode < 0:
        sig = -returncode
        if sig in (signal.SIGXCPU, signal.SIGKILL) and killed_for is None:
            return Result(Verdict.TIMEOUT, error_type="CPUTimeExceeded", **common)
        if memory_hint:
            return Result(Verdict.MEMORY, error_type="MemoryError", **common)
        if sig == signal.SIGXFSZ:
            return Result(Verdict.ERROR, error_type="FileSizeExceeded", **common)
        return Result(Verdict.CRASHED, error_type=signal.Signals(sig).name if sig in signal.valid_signals() else str(sig), **common)
    if memory_hint:
        return Result(Verdict.MEMORY, error_type="MemoryError", **common)
    # Exited without the bootstrap's proof that the tests ran: os._exit, a broken report pipe...
    if first_failure is not None:
        kind = Verdict.FAILED if first_failure in ("AssertionError", "WrongAnswer") else Verdict.ERROR
        return Result(kind, error_type=first_failure, **common)
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
) -> list[Result]:
    """Run ``jobs`` in parallel (``workers`` at a time, default: one per core); results in order.

    Each job gets its own fresh sandboxed interpreter; one hostile job cannot disturb another
    or the caller. ``progress``: show a tqdm bar (default: for batches of 64 or more on a TTY).
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
    with ThreadPoolExecutor(max_workers=min(workers, len(jobs)), thread_name_prefix="mrgrpo-sandbox") as pool:
        futures = {pool.submit(run, job, launcher): i for i, job in enumerate(jobs)}
        from concurrent.futures import as_completed

        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return results  # type: ignore[return-value]
