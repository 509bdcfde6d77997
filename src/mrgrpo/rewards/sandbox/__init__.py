"""A sandbox for untrusted generated code whose verdicts the code cannot spoof.

**The guarantee.** A run's verdict, its per-case counts and its timing are computed by a
*judge* process that no untrusted code ever runs in; the program runs in a separate
*candidate* process. The judge runs the tests in its own namespace, with its own pristine
builtins and its own copies of every module the tests import; each call the tests make to
the program is a request over a pipe, timed on the judge's clock, and what comes back is
decoded by a restricted decoder into plain data only (``None``, ``bool``, ``int``,
``float``, ``complex``, ``str``, ``bytes``, ``list``/``tuple``/``dict``/``set``/``frozenset``
of these; see ``child/wire.py``). Every value the tests see therefore has an exact built-in
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
capped, the whole process group killed on timeout, rlimits, an audit hook (no process
creation, signals, sockets, tracing, gc walking, rlimit changes, writes outside the working
directory), and before any untrusted code runs the strongest kernel layers the system allows
(``child/confine.py``), reported per result in ``Result.isolation`` and logged once:

* root: network, mount and IPC namespaces, a private root (standard library read-only, three
  devices, the working directory) entered with ``chroot``, a fresh per-run uid without
  capabilities (also where namespaces are refused, and then, as for uid 0 of a user namespace
  that may make none, a ``chroot`` into the run's directory: ``jail``);
* not root, or uid 0 of a user namespace (rootless containers): the same in a user namespace
  of its own, plus a PID namespace, every capability dropped; where namespaces are refused
  there, another uid mapped in it, else uid 0 without any capability (``nocaps``); a
  candidate that still holds a capability exits instead of running;
* everywhere: Landlock (where the kernel has it) and a seccomp filter (no signals, ``pidfd``,
  ``ptrace`` or ``process_vm`` calls towards other processes, no sockets, socket pairs or pipes
  of its own, no namespaces, mounts, processes, threads, ``execve``, SysV IPC or POSIX mqueues,
  none of the calls that read system-wide counters other runs move);
* given a delegated cgroup (``Limits.cgroup`` or ``MRGRPO_SANDBOX_CGROUP``): a memory cgroup of
  the run's own, which bounds its memory and the kernel's for it in one figure (``memcg``,
  :mod:`.memcg`);
* with no kernel layer at all (no namespaces, Landlock or seccomp) the program does not run:
  :class:`IsolationError`, unless ``allow_unisolated`` or ``MRGRPO_SANDBOX_ALLOW_UNISOLATED=1``
  accepts the Python-level guards alone. :func:`probe` checks this once, before training.

The judge and the launcher are non-dumpable; the verdict and job channels the caller holds
are Unix sockets (not reopenable through ``/proc``); the caller checks the judge's lines
against the protocol; the judge decodes replies under a budget (docs/sandbox.md).

Verdicts (:class:`Verdict`): ``passed``, ``failed`` (an assertion, a wrong answer, a value
that is not plain data), ``error`` (exception, ``error_type`` names it; ``EarlyExit`` when the
program's process ended without answering), ``timeout`` (wall or CPU), ``memory``, ``crashed``
(killed by a signal), ``invalid`` (the program does not compile).

Limits of the design, stated plainly: arguments are copies, so tests that check in-place
mutation of an argument see the original; tests may use only plain data with the program (its
functions, and module-level plain values).
"""

from __future__ import annotations

import logging
import marshal
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, as_completed, wait
from contextlib import contextmanager
from functools import lru_cache

from mrgrpo.errors import ConfigError, IsolationError
from mrgrpo.rewards.sandbox import memcg, processes
from mrgrpo.rewards.sandbox.cases import build_tree, declared_stubs, global_names
from mrgrpo.rewards.sandbox.cleanup import owned_prefix, remove_workdir, sweep_stale
from mrgrpo.rewards.sandbox.null import null_job
from mrgrpo.rewards.sandbox.results import Job, Limits, Result, Verdict

__all__ = [
    "ALLOW_UNISOLATED_ENV", "IsolationError", "Job", "Limits", "Result", "Verdict", "default_workers", "null_job", "probe",
    "run", "run_alone", "run_many",
]

logger = logging.getLogger(__name__)


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
    tree, n_cases = build_tree(tests, test_format)  # compiled as a tree: no unparse, no second parse
    code = compile(tree, "<tests>", "exec", dont_inherit=True)
    return marshal.dumps(code), n_cases, global_names(code)


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


#: The seed of the judge's ``random`` in timing runs (:func:`run_alone`): every timed run of a
#: problem sees the same test inputs (HumanEval/38 and /50 draw theirs at random).
TIMING_SEED = 0


def _payloads(
    job: Job, workdir: str, uid: int, minimum: str, timing: bool = False, record: bool = False
) -> tuple[dict, dict, int]:
    """(judge's job, candidate's job, number of cases). Raises ValueError/SyntaxError for bad tests."""
    limits = job.limits
    judge = {
        "seed": TIMING_SEED if timing else None, "record": bool(record), "settle": bool(timing),
        "mode": "none", "context": None, "declared": (), "tests": b"", "names": (), "n_cases": 0,
        "entry_point": job.entry_point or "", "stdio_cases": [], "value_cap": int(limits.reply_bytes),
        "decode_cpu_ns": int(limits.decode_cpu_s * 1e9), "decode_items": int(limits.decode_items),
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
        raise ConfigError(f"unknown test format {fmt!r}; expected humaneval | assert | stdio | none")
    candidate = {
        "program": job.program,
        "stdio": fmt == "stdio",  # its builtins are restored after each case (a snapshot first)
        "workdir": workdir,
        "minimum": minimum,
        "refuse": tuple(sorted(_refused_layers)),
        "uid": uid,
        "stdlib": processes._interpreter()[1],
        "tmpfs_kb": limits.tmpfs_mb * 1024,
        "tmpfs_inodes": max(64, int(limits.tmpfs_inodes)),
        "cpu_s": max(1, int(limits.cpu_s)),
        "fsize": limits.file_size_mb << 20,
        "nofile": limits.open_files,
        "address_space": limits.memory_mb << 20,
        "disk_files": bool(limits.disk_files),
    }
    return judge, candidate, judge["n_cases"]


def _framed(payload: dict) -> bytes:
    data = marshal.dumps(payload)
    return b"%010d" % len(data) + data


#: Set this environment variable to ``1`` to let the sandbox run generated code where the system
#: allows no kernel layer at all (no namespaces, no seccomp, no Landlock), with its Python-level
#: guards only: the code then runs as your user and what corrupts the interpreter's memory
#: without ``ctypes`` can reach your files and processes. Same as ``allow_unisolated=True``.
ALLOW_UNISOLATED_ENV = "MRGRPO_SANDBOX_ALLOW_UNISOLATED"
# Layers the candidate does not try ("namespaces", "chroot", "landlock", "seccomp"): tests use it
# to reproduce systems that refuse them.
_refused_layers: frozenset[str] = frozenset()


def _minimum(require_isolation: bool, allow_unisolated: bool | None) -> str:
    if require_isolation:
        return "private-root"
    if allow_unisolated is None:
        allow_unisolated = os.environ.get(ALLOW_UNISOLATED_ENV, "") not in ("", "0")
    return "none" if allow_unisolated else "kernel"


def run(job: Job, launcher: bool = True, require_isolation: bool = False, allow_unisolated: bool | None = None) -> Result:
    """Run one job: its judge and its candidate process (blocking).

    ``launcher``: fork both processes from the pre-started launcher (see :mod:`.launcher`;
    much faster) rather than start two new ``python -I -S`` interpreters (same guarantee and
    isolation either way). The candidate gets the strongest layers the system allows
    (``Result.isolation``); it never runs with none of the kernel layers (namespaces with a
    private root, Landlock, seccomp) unless ``allow_unisolated`` (default: the environment
    variable :data:`ALLOW_UNISOLATED_ENV`) says so, and never without a private root if
    ``require_isolation``: otherwise :class:`IsolationError` is raised and the program never runs.
    """
    with _gate.shared():
        return _run(job, launcher, require_isolation, allow_unisolated)


def _run(job: Job, launcher: bool, require_isolation: bool, allow_unisolated: bool | None, timing: bool = False,
         record: bool = False, reap: bool = True) -> Result:
    minimum = _minimum(require_isolation, allow_unisolated)
    limits = job.limits
    if limits.cgroup:
        memcg.delegated(limits.cgroup)  # checked once per path: a ConfigError before anything runs
    uid = _take_uid()
    shared = not {"namespaces", "chroot", "seccomp"} & _refused_layers
    stdlib = processes._interpreter()[1]
    # A candidate of the candidate launcher works in a tmpfs of its own and never sees a directory
    # of the caller's: none is made for it (its job names none, ""; processes.NeedsWorkdir if it
    # cannot go there after all).
    workdir = "" if launcher and shared and processes.candidate_launcher_ready(stdlib) else None
    try:
        while True:
            if workdir is None:
                sweep_stale(tempfile.gettempdir())  # what killed callers left (once per process)
                workdir = tempfile.mkdtemp(prefix=owned_prefix())
                os.chmod(workdir, 0o700)
            try:
                judge, candidate, n_cases = _payloads(job, workdir, uid, minimum, timing, record)
            except (ValueError, SyntaxError) as error:
                return Result(Verdict.ERROR, error_type=f"TestsInvalid: {error}"[:200])
            try:
                result = processes.execute((_framed(judge), _framed(candidate)), n_cases, limits, launcher,
                                           shared_userns=shared, reap=reap or timing, stdlib=stdlib,
                                           has_workdir=bool(workdir), key=processes.confinement_key(candidate))
                break
            except processes.NeedsWorkdir:
                workdir = None
    finally:
        if workdir:
            remove_workdir(workdir)  # iterative, bounded in time; never raises (logs what it left)
        with _uids_lock:
            _uids_in_use.discard(uid)
    if result.error_type == "IsolationUnavailable":
        raise IsolationError(_refusal(result.isolation, minimum))
    if result.isolation:
        _log_layers(result.isolation)
    return result


def _refusal(isolation: str, minimum: str) -> str:
    found = isolation.replace(",guards", "").replace("guards", "") or "none"
    if minimum == "private-root":
        return (
            f"the sandbox cannot give generated code a private root here (layers available: {found}; it "
            "needs root or unprivileged user namespaces with mount/network/PID namespaces): enable user "
            "namespaces (sysctl user.max_user_namespaces, or a container run with them allowed), or drop "
            "require_isolation to run under the layers available"
        )
    return (
        "the sandbox cannot isolate generated code here: no namespaces, no seccomp and no Landlock are "
        "available, so it would run as your user with Python-level guards only (code that corrupts the "
        "interpreter's memory could then reach your files and processes); allow user namespaces or "
        f"seccomp, or accept that risk with {ALLOW_UNISOLATED_ENV}=1 (or allow_unisolated=True)"
    )


_logged: set[str] = set()
_warned = False


def _log_layers(isolation: str) -> None:
    """Say once per process which layers are in force; loudly when there is no private root."""
    global _warned
    if isolation in _logged:
        return
    _logged.add(isolation)
    layers = set(isolation.split(","))
    if not layers & {"chroot", "landlock", "seccomp"}:
        if not _warned:
            _warned = True
            logger.warning(
                "MRGRPO SANDBOX IS NOT ISOLATED (%s): no namespaces, Landlock or seccomp are available, so "
                "generated code runs as this user with Python-level guards only and can reach this user's "
                "files and processes (allowed by %s / allow_unisolated). Verdicts stay the judge's (a separate, "
                "non-dumpable process).", isolation, ALLOW_UNISOLATED_ENV,
            )
    elif "chroot" not in layers:
        logger.warning(
            "mrgrpo sandbox: no namespaces here (%s): generated code is confined by the kernel layers "
            "listed and Python-level guards, without a private root; see docs/sandbox.md", isolation,
        )
    else:
        logger.info("mrgrpo sandbox isolation: %s", isolation)


def probe(launcher: bool = True, require_isolation: bool = False, allow_unisolated: bool | None = None) -> str:
    """The layers a candidate gets here (``Result.isolation``), checked once per setting; raises
    :class:`IsolationError` (one line naming the fix) where :func:`run` would refuse. Code
    reward suites call it when they are built, so a refusal comes before training starts."""
    key = (launcher, _minimum(require_isolation, allow_unisolated), _refused_layers)
    if key not in _probed:
        probe_job = Job("def f():\n    return 1\n", "def check(candidate):\n    assert candidate() == 1\n", "humaneval", "f")
        result = run(probe_job, launcher, require_isolation, allow_unisolated)
        if not result.passed:
            raise IsolationError(f"the sandbox cannot run a correct program here ({result.verdict.value}: {result.error_type}; "
                                 f"layers {result.isolation or 'none'}): see docs/sandbox.md")
        _probed[key] = result.isolation
    return _probed[key]


_probed: dict[tuple, str] = {}


class _Gate:
    """Runs share the sandbox; a timing run has it alone (no other run of this process in flight).

    A thread holding it alone may run (its own runs pass through)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._alone = False
        self._waiting = 0
        self._mine = threading.local()

    @contextmanager
    def shared(self):
        if getattr(self._mine, "alone", False):
            yield
            return
        with self._cond:
            self._cond.wait_for(lambda: not self._alone and not self._waiting)
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextmanager
    def alone(self):
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: not self._alone and not self._shared)
            self._waiting -= 1
            self._alone = True
        self._mine.alone = True
        try:
            yield
        finally:
            self._mine.alone = False
            with self._cond:
                self._alone = False
                self._cond.notify_all()


_gate = _Gate()


def run_alone(jobs: Sequence[Job], repeats: int = 1, launcher: bool = True, record: bool = False,
              require_isolation: bool = False, allow_unisolated: bool | None = None) -> list[list[Result]]:
    """Run each job ``repeats`` times, one run at a time, while no other run of this process is
    in flight (runs started meanwhile wait): for timing. ``[[result of each repeat] per job]``.
    The judge's ``random`` is seeded (:data:`TIMING_SEED`), so every timed run of a problem gets
    the same inputs. ``record``: passing runs also carry what the program answered
    (``Result.record``, for :func:`null_job`). ``require_isolation`` / ``allow_unisolated``: as
    for :func:`run`."""
    with _gate.alone():
        processes.settle()  # no candidate of an earlier batch still ending
        return [[_run(job, launcher, require_isolation, allow_unisolated, timing=True, record=record)
                 for _ in range(max(1, int(repeats)))] for job in jobs]


def default_workers() -> int:
    """Parallel runs by default: one per core the process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def _all_or_first_failure(futures) -> list:
    """Wait until every future is done or one raised; the futures, one that raised first."""
    done, _ = wait(futures, return_when=FIRST_EXCEPTION)
    failed = [f for f in done if f.exception() is not None]
    return failed + [f for f in futures if f not in failed]


def run_many(
    jobs: Sequence[Job],
    workers: int | None = None,
    progress: bool | None = None,
    launcher: bool = True,
    require_isolation: bool = False,
    allow_unisolated: bool | None = None,
) -> list[Result]:
    """Run ``jobs`` in parallel (``workers`` at a time, default: one per core); results in order.

    ``require_isolation``, ``allow_unisolated``: as for :func:`run`. Each job gets its own judge
    and candidate processes; one hostile job cannot disturb
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
            # candidates whose judge finished are not waited for one by one (settled below)
            with _gate.shared():
                return _run(job, launcher, require_isolation, allow_unisolated, reap=False)
        finally:
            with state_lock:
                state["running"] -= 1

    try:
        futures = {pool.submit(guarded, job): i for i, job in enumerate(jobs)}
        # Without a bar this thread sleeps until every job is done or one raised (one wake-up,
        # not one per job: each would take the GIL from the threads doing the runs).
        for future in as_completed(futures) if bar is not None else _all_or_first_failure(futures):
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
            processes._kill_all_live()
            time.sleep(0.01)
        pool.shutdown(wait=True)
        raise
    finally:
        if bar is not None:
            bar.close()
        processes.settle()  # every candidate of the batch reaped before it returns
    pool.shutdown(wait=True)
    return results  # type: ignore[return-value]


