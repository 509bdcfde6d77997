"""The sandbox's values (:class:`Verdict`, :class:`Limits`, :class:`Job`, :class:`Result`) and the
reading of a judge's report into a :class:`Result` (runs in the caller)."""

from __future__ import annotations

import math
import numbers
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from enum import Enum

from mrgrpo.errors import ConfigError
from mrgrpo.rewards.sandbox.memcg import CGROUP_ENV


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
        tmpfs_mb: size of the private filesystem (isolated mode); without a private root, what the
            run's files on the caller's disk may hold at once (each file held open for writing
            counted at ``file_size_mb``).
        tmpfs_inodes: files and directories it may hold (``nr_inodes``: each costs the kernel
            about 1 KiB that ``tmpfs_mb`` does not count).
        output_bytes: stdout and stderr are each kept up to this many bytes.
        kill_output_bytes: a run writing more than this in total is killed
            (verdict ``error``, ``error_type`` ``OutputLimitExceeded``).
        reply_bytes: the largest reply (one return value, one stdio case's output) the judge
            accepts; a larger one fails that case (``ValueTooLarge``) and ends the candidate.
        decode_cpu_s, decode_items: the judge's budget for decoding one reply (CPU seconds;
            values, each container counting 16): past it that case fails (``NotPlainData``,
            e.g. a set of colliding hashes) in bounded time and the run goes on.
        cgroup: a cgroup directory delegated to the sandbox (cgroup v2 with ``memory`` in its
            ``cgroup.subtree_control``, or a writable directory of cgroup v1's memory
            hierarchy); default: the environment variable ``MRGRPO_SANDBOX_CGROUP``, else
            none. Each candidate then runs in a cgroup of its own made there, its memory and the
            kernel's for it bounded together (``memory.max``: ``memory_mb + tmpfs_mb`` + 32 MiB
            + 1 KiB per inode of ``tmpfs_inodes``, no swap; killed at it -> ``memory``,
            ``MemoryLimitExceeded``), and ``Result.isolation`` names the layer ``memcg``. A
            directory that cannot serve is a ``ConfigError`` at the first run (see
            :mod:`~mrgrpo.rewards.sandbox.memcg`).
        disk_files: where a run has no private root (namespaces refused, as in Docker's default
            profile; or a plain user without user namespaces) its working directory is on the
            caller's disk, which concurrent runs share, and the inode numbers a new file gets
            there depend on what the other runs hold. So by default such a run makes no file,
            directory or node (``PermissionError``; opening ``/dev/null`` for writing still
            works). True lets it make them (``tmpfs_mb`` in all, ``file_size_mb`` a file) and
            leaves that channel between concurrent runs open. With a private root every run has
            a tmpfs of its own and may always make files: this setting is not used there.
    """

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    file_size_mb: int = 16
    open_files: int = 64
    tmpfs_mb: int = 64
    tmpfs_inodes: int = 16384
    output_bytes: int = 64 * 1024
    kill_output_bytes: int = 8 * 1024 * 1024
    reply_bytes: int = 16 * 1024 * 1024
    decode_cpu_s: float = 1.0
    decode_items: int = 1 << 21
    cgroup: str | None = field(default_factory=lambda: os.environ.get(CGROUP_ENV) or None)
    disk_files: bool = False

    def __post_init__(self) -> None:
        """Each value checked where it is made: a one-line :class:`~mrgrpo.errors.ConfigError`
        naming the field (a string, a float for a count, a bool for a number, 0 or less would
        otherwise be truncated, or fail deep inside a run). Numbers of other types (numpy's)
        are kept as Python's ``int`` and ``float``."""
        for spec in fields(self):
            value = getattr(self, spec.name)
            if spec.name == "cgroup":
                if value is not None and (not isinstance(value, str) or not value):
                    raise ConfigError(f"Limits.cgroup must be a cgroup directory's path or None, not {value!r}")
            elif spec.name == "disk_files":
                if not isinstance(value, bool):
                    raise ConfigError(f"Limits.disk_files must be True or False, not {value!r}")
            elif spec.name in ("wall_s", "decode_cpu_s"):
                if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
                    raise ConfigError(f"Limits.{spec.name} must be a positive number of seconds, not {value!r}")
                object.__setattr__(self, spec.name, float(value))
            elif isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
                raise ConfigError(f"Limits.{spec.name} must be a positive whole number, not {value!r}")
            else:
                object.__setattr__(self, spec.name, int(value))


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
        test_time: seconds of wall time of loading the program and of the candidate's calls
            (each from the judge sending the request to receiving the reply), summed, measured
            by the judge; ``None`` if the tests did not finish.
        load_time: the part of ``test_time`` spent loading the program (its top level: what
            it precomputes at import counts); ``None`` if it did not load (stdio: ``None``).
        cpu_time: CPU seconds the program used from loading to its last reply (its work between
            calls included), counted by the kernel and read by the judge; ``None`` where the
            judge cannot read ``/proc`` or the tests did not finish. Efficiency uses it, from
            timing runs (:func:`~mrgrpo.rewards.sandbox.run_alone`), whose judge waits until the
            program is off the CPU before each reading; in other runs it may miss the program's
            last slice on the CPU (under a scheduler tick).
        wall_time: seconds from spawn to exit, as seen by the caller.
        stdout, stderr: the program's captured output, each capped at ``Limits.output_bytes``.
        returncode: the candidate's exit status (negative: killed by that signal).
        record: for a recording run (:func:`mrgrpo.rewards.sandbox.run_alone` with ``record``):
            what the program answered, as the judge decoded it (in the plain-data wire format:
            the names it defines, then each call's value or exception, in order), from which
            :func:`mrgrpo.rewards.sandbox.null_job` builds the problem's null program; ``None``
            otherwise, or where an answer could not be kept.
        isolation: the layers in force in the candidate, e.g.
            ``netns,mountns,ipcns,pidns,chroot,uid,landlock,seccomp,guards`` (root),
            ``userns,netns,mountns,ipcns,pidns,chroot,landlock,seccomp,guards`` (no root),
            ``jail,uid,landlock,seccomp,guards`` (root, namespaces refused: a chroot into the run's
            directory), ``landlock,seccomp,guards`` (namespaces refused),
            ``jail,nocaps,landlock,seccomp,guards`` (uid 0 of a user namespace mapping only 0,
            namespaces refused: uid 0 kept, no capability); ``,memcg`` follows where the run had a
            memory cgroup of its own (``Limits.cgroup``); see docs/sandbox.md.
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
    load_time: float | None = None
    cpu_time: float | None = None
    record: bytes | None = field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASSED

    @property
    def pass_rate(self) -> float:
        return self.cases_passed / self.cases_total if self.cases_total else float(self.passed)


_FAILED_KINDS = ("AssertionError", "WrongAnswer", "NotPlainData")


def _read_report(reports: Sequence[str], n_cases: int):
    """The judge's lines, checked against the protocol: ``iso <layers>``, at most one
    ``loaded [<ns>]``, ``case <i> ok|fail <reason>`` with ``i`` = 0, 1, 2... in order, and exactly
    one last line ``done <n> <wall ns> <cpu ns or -1>`` (``n`` the cases reported), ``error <reason>`` or
    ``invalid <reason>`` (alone, or after ``iso`` and what came before); a recording run may send
    one ``record <hex>`` right before ``done``. Anything else, out of order or after the last
    line -> ``None`` (the run fails as ``JudgeProtocol``)."""
    isolation, loaded, terminal, load_time, record = "", False, None, None, None
    outcomes: list[str | None] = []
    for at, line in enumerate(reports):
        words = line.split()
        if terminal is not None or not words:
            return None
        kind = words[0]
        if record is not None and kind != "done":
            return None
        if kind == "record" and len(words) == 2 and isolation and record is None:
            try:
                record = bytes.fromhex(words[1])
            except ValueError:
                return None
        elif kind == "iso" and len(words) == 2 and at == 0:
            isolation = words[1]
        elif kind == "loaded" and (len(words) == 1 or (len(words) == 2 and words[1].isdigit())) and not loaded and isolation:
            loaded = True
            load_time = int(words[1]) / 1e9 if len(words) == 2 else None
        elif kind == "case" and isolation and len(words) in (3, 4) and words[1] == str(len(outcomes)):
            if len(outcomes) >= n_cases:
                return None
            if words[2] == "ok" and len(words) == 3:
                outcomes.append(None)
            elif words[2] == "fail" and len(words) == 4:
                outcomes.append(words[3])
            else:
                return None
        elif (kind == "done" and isolation and len(words) == 4 and words[1] == str(len(outcomes)) and words[2].isdigit()
              and (words[3].isdigit() or words[3] == "-1")):
            terminal = ("done", (int(words[2]) / 1e9, int(words[3]) / 1e9 if words[3] != "-1" else None))
        elif kind in ("error", "invalid") and len(words) == 2:
            terminal = (kind, words[1])
        else:
            return None
    return isolation, loaded, outcomes, terminal, load_time, record


def parse_report(reports, n_cases, returncode, killed_for, wall, stdout, stderr) -> Result:
    """The judge's report lines (trusted, checked) + the candidate's exit status -> a Result."""
    read = _read_report(reports, n_cases)
    isolation = read[0] if read else ""
    loaded = bool(read and read[1])
    outcomes = read[2] if read else []
    terminal = read[3] if read else None
    load_time = read[4] if read else None
    cases_passed = sum(1 for o in outcomes if o is None)
    # "memory": the candidate's cgroup killed it at its limit (read only where it ended early)
    oom = killed_for == "memory"
    common = dict(
        cases_passed=cases_passed, cases_total=n_cases, loaded=loaded, wall_time=wall,
        stdout=stdout, stderr=stderr, returncode=returncode, isolation=isolation, load_time=load_time,
    )
    if killed_for == "output":
        return Result(Verdict.ERROR, error_type="OutputLimitExceeded", **common)
    if killed_for == "timeout":
        return Result(Verdict.TIMEOUT, error_type="Timeout", **common)
    if read is None:
        return Result(Verdict.ERROR, error_type="JudgeProtocol", **{**common, "cases_passed": 0})
    if terminal is None:
        return Result(Verdict.ERROR, error_type="JudgeFailed", **common)
    kind, value = terminal
    first_failure = next((o for o in outcomes if o is not None), None)
    if kind == "invalid":
        return Result(Verdict.INVALID, error_type=value, **common)
    if kind == "error":
        if value == "CandidateGone" or (first_failure == "CandidateGone"):
            return _candidate_ended(returncode, stderr, common, oom)
        verdict = Verdict.MEMORY if value == "MemoryError" else Verdict.ERROR
        return Result(verdict, error_type=value, **common)
    if len(outcomes) != n_cases:
        return Result(Verdict.ERROR, error_type="JudgeFailed", **common)  # pragma: no cover
    test_time, cpu_time = value
    common["cpu_time"] = cpu_time
    if first_failure is None:
        return Result(Verdict.PASSED, test_time=test_time, record=read[5], **common)
    if first_failure == "CandidateGone":
        return _candidate_ended(returncode, stderr, common, oom)
    if first_failure in _FAILED_KINDS:
        return Result(Verdict.FAILED, error_type=first_failure, test_time=test_time, **common)
    if first_failure == "MemoryError":
        return Result(Verdict.MEMORY, error_type=first_failure, test_time=test_time, **common)
    return Result(Verdict.ERROR, error_type=first_failure, test_time=test_time, **common)


def _candidate_ended(returncode, stderr, common, oom=False) -> Result:
    """The candidate's process ended without answering: its exit status says how (``oom``: the
    kernel killed it at its cgroup's memory limit)."""
    if oom:
        return Result(Verdict.MEMORY, error_type="MemoryLimitExceeded", **common)
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


