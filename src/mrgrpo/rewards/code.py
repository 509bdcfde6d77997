"""Code reward suite (CorrGRPO's seven components; SA-MRPO's pass rate + executability).

Every component is a TRL reward function ``(prompts, completions, **columns) -> list[float]``
reading these dataset columns (lists, one entry per completion; see ``mrgrpo.data.humaneval``):

* ``test``: the tests (a ``check(candidate)`` module, assert statements, or stdin/stdout cases
  as a list of ``{"input", "output"}`` or a JSON string of it);
* ``test_format``: ``humaneval`` | ``assert`` | ``stdio`` (default ``humaneval``);
* ``entry_point``: the function under test (``humaneval``);
* ``code_prefix`` (optional): code the completion continues or relies on (HumanEval's prompt:
  imports, helpers, the signature). A completion that defines ``entry_point`` itself is
  appended after it (its definition wins); otherwise it is treated as the continuation. It is
  dataset code, so it is also the trusted *context* of the tests: helpers the tests call
  (HumanEval's ``poly``, ``encode_cyclic``) are the judge's own copies, which the completion
  cannot redefine (see :class:`mrgrpo.rewards.sandbox.Job`);
* ``reference`` (optional): a correct full program, for ``ast_similarity`` and ``efficiency``.

Components and ranges (all in [0, 1]):

==============  =========================================================================
format          1 for a closed fenced code block, 0.5 for an opened but unclosed fence
                (truncated completion), 0 for raw text
syntax          the assembled program parses (``ast.parse``)
compile         it compiles to bytecode (``compile``: also catches e.g. ``return`` outside
                a function)
run             it ran without a runtime error: verdict ``passed`` or ``failed``
pass            all tests passed, as judged by a process the program cannot reach (see
                ``mrgrpo.rewards.sandbox``: lying return values, shadowed builtins, exit
                tricks and patched clocks cannot earn it)
ast_similarity  ``difflib.SequenceMatcher`` ratio of the pre-order AST node-type sequences of
                the entry-point function (whole module when absent) and the reference's
efficiency      ``clip(1 - (t_gen - t_null) / (t_ref - t_null), 0, 1)`` when passing (0
                otherwise): the share of the reference's own work the program saves. ``t``
                the CPU time the kernel counts for a program from loading it to its last
                reply (the judge's wall clock where ``/proc`` is unreadable); ``t_null`` the
                harness's share of it, the time of the problem's *null program* (trusted,
                replaying the reference's answers: ``mrgrpo.rewards.sandbox.null``). The
                program is timed in a *window* of runs interleaved with the reference's and
                the null program's (3 rounds, up to 9), each run alone (no other sandbox run
                in flight), and compared only in conditions the window shows to be the same
                for both (at the reference's fastest, confirmed, or one steady speed:
                ``mrgrpo.rewards.timing``). ``None`` without a passing reference, when
                ``t_ref - t_null`` < ``min_reference_s`` (1 ms), or when the window shows no
                such conditions. Less what a program serving the judge's pipe itself could
                save (the null program's time beyond the problem's *bare program*, a share
                of ``t_ref - t_null``); ``None`` where that share is over
                ``max_harness_share`` (0.15). See docs/sandbox.md for the noise and what
                holds under load
pass_rate       fraction of test cases passed (SA-MRPO)
executable      the program's top-level code ran without an exception (SA-MRPO)
==============  =========================================================================

Nothing untrusted runs in the caller: syntax/compile/AST only parse and compile; execution
goes through the sandbox. A completion is executed once however many components read it:
the suite's :class:`CodeExecutor` caches results by (program, tests) in a bounded LRU and
runs every uncached program of a batch (and uncached references) in one ``run_many`` call.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import json
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mrgrpo.errors import ConfigError, InputError
from mrgrpo.rewards.base import RewardComponent, RewardSuite, completion_text, register_suite
from mrgrpo.rewards.sandbox import Job, Limits, Result, Verdict, null_job, probe, run_alone, run_many
from mrgrpo.rewards.sandbox.null import bare_job
from mrgrpo.rewards.timing import Timing, base, harness_ratio, window_efficiency, window_score

CODE_COMPONENTS = ("format", "syntax", "compile", "run", "pass", "ast_similarity", "efficiency")
CODE_WEIGHTS = (0.05, 0.05, 0.05, 0.25, 0.60, 0.30, 0.20)
SA_MRPO_COMPONENTS = ("pass_rate", "executable")

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(```|\Z)", re.S)
_PYTHON_TAGS = {"", "python", "py", "python3", "py3"}
_MAX_PARSE_CHARS = 200_000


@dataclass(frozen=True)
class Extracted:
    """The code found in a completion. ``fence``: ``closed`` | ``open`` | ``none``."""

    code: str
    fence: str


def extract_code(text: str, entry_point: str | None = None) -> Extracted:
    """The program in a completion.

    Fenced blocks win over raw text; among them Python (or untagged) blocks over others, and
    among those the last one defining ``entry_point`` (else the last one). A final fence
    without its closing ``` (a truncated completion) still yields its code. Without any
    fence the whole completion is the code.
    """
    blocks = []
    for match in _FENCE.finditer(text):
        closed = match.group(3) == "```"
        blocks.append((match.group(1).lower(), match.group(2), closed))
    if not blocks:
        return Extracted(text, "none")
    python = [b for b in blocks if b[0] in _PYTHON_TAGS] or blocks
    if entry_point:
        defining = [b for b in python if _defines(b[1], entry_point)]
        if defining:
            python = defining
    _, code, closed = python[-1]
    return Extracted(code, "closed" if closed else "open")


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*(async\s+)?def\s+{re.escape(name)}\s*\(", code, re.M) is not None


def assemble_program(code: str, code_prefix: str | None, entry_point: str | None) -> str:
    """Program to run: the completion's code after ``code_prefix`` (see module docstring)."""
    if not code_prefix:
        return code
    if entry_point and _defines(code, entry_point):
        return code_prefix.rstrip() + "\n\n" + code
    return code_prefix + code


def _parses(program: str) -> bool:
    if len(program) > _MAX_PARSE_CHARS:
        return False
    try:
        ast.parse(program)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False


def _compiles(program: str) -> bool:
    if len(program) > _MAX_PARSE_CHARS:
        return False
    try:
        compile(program, "<completion>", "exec", dont_inherit=True)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False


def node_types(program: str, entry_point: str | None = None) -> list[str] | None:
    """Pre-order AST node-type names of ``entry_point``'s definition (else the module).

    Only parses (never executes); ``None`` when the program does not parse.
    """
    if len(program) > _MAX_PARSE_CHARS:
        return None
    try:
        tree: ast.AST = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None
    if entry_point:
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point]
        if defs:
            tree = defs[-1]
    out: list[str] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        out.append(type(node).__name__)
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    return out


def ast_similarity(program: str, reference: str, entry_point: str | None = None) -> float:
    """difflib ratio of the node-type sequences; 0 when either does not parse."""
    a, b = node_types(program, entry_point), node_types(reference, entry_point)
    if a is None or b is None:
        return 0.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _stdio_tests(test: Any) -> list:
    if isinstance(test, str):
        test = json.loads(test)
    return list(test)


def make_job(
    program: str, test: Any, test_format: str, entry_point: str | None, limits: Limits, context: str | None = None
) -> Job:
    """The sandbox job of one program; ``context``: the trusted code the tests rely on (``code_prefix``)."""
    fmt = test_format or "humaneval"
    tests = _stdio_tests(test) if fmt == "stdio" else test
    return Job(program, tests, fmt, entry_point or None, limits, context or "")


def _job_key(job: Job) -> tuple:
    tests = job.tests if isinstance(job.tests, str) else json.dumps(job.tests, sort_keys=True, default=str)
    return (job.program, tests, job.test_format, job.entry_point, job.context)


def _footprint(key: tuple, *values: object) -> int:
    """Bytes a cache entry keeps alive, counted from its strings and bytes (the key's program,
    tests and context; a result's output and record), plus a fixed share for the objects."""
    size = 512
    for item in (*key, *values):
        if isinstance(item, (str, bytes)):
            size += sys.getsizeof(item)
        elif isinstance(item, Result):
            size += sum(sys.getsizeof(x) for x in (item.stdout, item.stderr, item.record, item.error_type)
                        if isinstance(x, (str, bytes)))
    return size


def _avoidable(null: Timing, bare: Timing) -> float:
    """``1 - t_bare / t_null`` from the floors (fastest runs) of interleaved runs, at least 0; 1
    (all of it) where the bare program has no time to compare, or where its floor is not below the
    null program's (it does strictly less, so the runs met conditions that cannot be compared).

    Floors, not a median of per-round ratios: besides slow spells (which scale a round's two
    runs alike), a run can be charged a fixed few milliseconds more (measured 2026-12-04 on a
    2-vCPU Firecracker guest, HZ=250, two CPU-bound jobs on it: HumanEval/32's bare program
    0.3 ms or 3.8-4.1 ms, its null program 0.6 ms or 4.4-5.5 ms, its reference 6-7 ms or
    10.3-13.5 ms, per run, in spells of seconds). Each run is hit or not on its own, so a round's
    ratio mixes the two states (0.08 with both hit, -5 with only the bare one), while each
    series' fastest run is unhit in any spell that leaves one run of it unhit."""
    if (null.best is None or bare.best is None or bare.clock != null.clock or not null.best
            or bare.best >= null.best):
        return 1.0
    return 1.0 - bare.best / null.best


class CodeExecutor:
    """Runs programs once: results cached by (program, tests) in an LRU of ``cache_size``
    entries and ``cache_bytes`` bytes (a result keeps up to ``Limits.output_bytes`` of each of
    stdout and stderr, and a reference's record up to 256 KiB; each of the two caches, results
    and timings with their records, stays under ``cache_bytes``).

    Timing for ``efficiency`` is separate, every run alone (no other sandbox run of this
    process in flight: :func:`mrgrpo.rewards.sandbox.run_alone`) and cached: a reference is
    first run ``reference_repeats`` times (:meth:`timings`: whether its problem can be scored at
    all, and the answers its null program replays), its null program as many times
    (:meth:`nulls`: the harness's own cost on that problem; interleaved with its bare program,
    the least harness cost any program pays there: :meth:`harness`), then each program in a window of
    its own, ``timing_repeats`` rounds or more interleaved with new runs of its reference and
    null program (:meth:`time_against`), against which alone it is scored.
    """

    def __init__(
        self,
        limits: Limits | None = None,
        workers: int | None = None,
        cache_size: int = 8192,
        require_isolation: bool = False,
        allow_unisolated: bool | None = None,
        timing_repeats: int = 3,
        reference_repeats: int = 7,
        extra_repeats: int = 6,
        cache_bytes: int = 128 << 20,
    ):
        self.limits = limits or Limits()
        self.cache_bytes = cache_bytes
        self._sizes: dict[tuple, int] = {}  # bytes of each entry of _cache, and of _timings (+ its record)
        self._cache_held = 0
        self._timings_held = 0
        self.extra_repeats = extra_repeats
        self.workers = workers
        self.require_isolation = require_isolation
        self.allow_unisolated = allow_unisolated
        self.timing_repeats = timing_repeats
        self.reference_repeats = reference_repeats
        self._timings: OrderedDict[tuple, Timing] = OrderedDict()
        self._records: dict[tuple, bytes | None] = {}  # reference -> its recorded answers (for nulls)
        self._avoidable: dict[tuple, float] = {}  # null program -> the share of its time a program could skip
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple, Result] = OrderedDict()
        self._lock = threading.Lock()
        self.executions = 0  # programs actually run for their verdicts (for tests and logging)
        self.timed_runs = 0  # runs made to time programs for efficiency

    def results(self, jobs: Sequence[Job]) -> list[Result]:
        keys = [_job_key(j) for j in jobs]
        with self._lock:
            todo = {}
            for key, job in zip(keys, jobs):
                if key not in self._cache and key not in todo:
                    todo[key] = job
            if todo:
                fresh = run_many(
                    list(todo.values()), workers=self.workers, require_isolation=self.require_isolation,
                    allow_unisolated=self.allow_unisolated,
                )
                self.executions += len(todo)
                for key, result in zip(todo, fresh):
                    self._cache[key] = result
                    self._sizes[("result", key)] = size = _footprint(key, result)
                    self._cache_held += size
            out = []
            for key in keys:
                self._cache.move_to_end(key)
                out.append(self._cache[key])
            while self._cache and (len(self._cache) > self.cache_size or self._cache_held > self.cache_bytes):
                key, _ = self._cache.popitem(last=False)
                self._cache_held -= self._sizes.pop(("result", key), 0)
        return out

    def timings(self, jobs: Sequence[Job], reference: bool = False) -> list[Timing]:
        """One :class:`Timing` per job (cached; ``reference``: ``reference_repeats`` runs, else
        ``timing_repeats``), every run alone."""
        repeats = self.reference_repeats if reference else self.timing_repeats
        keys = [(reference, *_job_key(j)) for j in jobs]
        with self._lock:
            todo = {}
            for key, job in zip(keys, jobs):
                if key not in self._timings and key not in todo:
                    todo[key] = job
            if todo:
                runs = run_alone(list(todo.values()), repeats, record=reference,
                                 require_isolation=self.require_isolation, allow_unisolated=self.allow_unisolated)
                self.timed_runs += repeats * len(todo)
                for key, results in zip(todo, runs):
                    self._timings[key] = Timing.of(results)
                    if reference:
                        self._records[key] = next((r.record for r in results if r.record), None)
                    self._held(key)
            return self._cached(keys)

    def nulls(self, references: Sequence[Job]) -> list[Timing]:
        """The null program's :class:`Timing` per reference job (cached): the harness's cost on that
        problem (:mod:`mrgrpo.rewards.sandbox.null`), timed like the reference
        (``reference_repeats`` runs, alone); ``best`` is ``None`` where there is none (the
        reference was not timed or did not pass, or its answers could not be replayed).
        References with the same answers share one null program and its timing. Each run of the
        null program is followed by one of the problem's *bare program* (the least harness cost
        any program can pay there: :func:`mrgrpo.rewards.sandbox.null.bare_program`), for
        :meth:`harness`."""
        with self._lock:
            keys, todo = [], {}
            for job in references:
                key, null = self._null_of(job)
                keys.append(key)
                if key not in self._timings and key not in todo:
                    todo[key] = (null, bare_job(job, self._records.get((True, *_job_key(job)))))
            runnable = {key: jobs for key, jobs in todo.items() if jobs[0] is not None}
            if runnable:
                got: dict[tuple, list[list[Result]]] = {key: [[], []] for key in runnable}
                for _ in range(self.reference_repeats):  # interleaved: both meet the same conditions
                    pairs = [(key, kind, job) for key, jobs in runnable.items() for kind, job in enumerate(jobs) if job is not None]
                    runs = run_alone([job for _, _, job in pairs], 1, require_isolation=self.require_isolation,
                                     allow_unisolated=self.allow_unisolated)
                    for (key, kind, _), [result] in zip(pairs, runs):
                        got[key][kind].append(result)
                    self.timed_runs += len(pairs)
                for key, (nulls, bares) in got.items():
                    self._timings[key] = null = Timing.of(nulls)
                    bare = Timing.of(bares) if bares else Timing(None, None, None, 0)
                    self._avoidable[key] = _avoidable(null, bare)
            for key in todo:
                self._timings.setdefault(key, Timing(None, None, None, 0))
                self._held(key)
            return self._cached(keys)

    def harness(self, references: Sequence[Job]) -> list[float]:
        """Per reference job (call :meth:`nulls` first): the share of its null program's time that
        a program could skip by serving the judge's pipe itself, ``1 - t_bare / t_null`` (the
        median over their interleaved rounds); 1 where the bare program could not be timed (all of
        the harness counted as avoidable), 0 where there is no null program (``t_null`` is 0)."""
        out = []
        with self._lock:
            for job in references:
                key = self._null_of(job)[0]
                timed = key in self._timings and self._timings[key].best is not None
                out.append(self._avoidable.get(key, 1.0) if timed else 0.0)
        return out

    def _cached(self, keys: Sequence[tuple]) -> list[Timing]:
        """The cached timings of ``keys`` (marked recently used), the cache then trimmed to size."""
        out = []
        for key in keys:
            self._timings.move_to_end(key)
            out.append(self._timings[key])
        self._trim()
        return out

    def _held(self, key: tuple) -> None:
        """Count the bytes of timing entry ``key`` (its key's strings, its times, its record)."""
        timing = self._timings.get(key)
        runs = () if timing is None else (timing, *(timing.against or ()))
        size = _footprint(key, self._records.get(key)) + 16 * sum(len(t.times) for t in runs)
        self._timings_held += size - self._sizes.get(("timing", key), 0)
        self._sizes[("timing", key)] = size

    def _trim(self) -> None:
        while self._timings and (len(self._timings) > self.cache_size or self._timings_held > self.cache_bytes):
            key, _ = self._timings.popitem(last=False)
            self._records.pop(key, None)
            self._avoidable.pop(key, None)
            self._timings_held -= self._sizes.pop(("timing", key), 0)

    def _null_of(self, reference: Job) -> tuple[tuple, Job | None]:
        null = null_job(reference, self._records.get((True, *_job_key(reference))))
        return (("null", *_job_key(null)) if null is not None else ("null", None, *_job_key(reference))), null

    def time_against(self, pairs: Sequence[tuple[Job, Job]]) -> list[tuple[Timing, Timing, Timing]]:
        """For ``(reference job, program job)`` pairs: ``(reference Timing, null Timing, program
        Timing)``, the first two of the program's own window (call :meth:`timings` with
        ``reference=True`` first, which records what the null program replays; :meth:`nulls`).

        The window: one run of the reference, then rounds of (program, null program, reference),
        all alone, so that the three are timed under the same conditions; the program is compared
        with these runs (at the floor the reference's runs of all time have shown, or within a
        steady window: :func:`mrgrpo.rewards.timing.window_score`). ``timing_repeats`` rounds, and
        up to ``extra_repeats`` more while the window shows neither; then the program's timing is
        ``disturbed`` (efficiency abstains). The cached timings of the reference and the null
        program take the window's runs in."""
        repeats = self.timing_repeats
        with self._lock:
            todo: dict[tuple, tuple[Job, Job, tuple, Job | None]] = {}
            for ref, gen in pairs:
                key = (False, *_job_key(gen))
                if key not in self._timings and key not in todo:
                    todo[key] = (ref, gen, *self._null_of(ref))
            for key, (ref, gen, null_key, null) in todo.items():
                ref_key = (True, *_job_key(ref))
                history = [self._timings.get(k) for k in (ref_key, null_key)]
                got: dict[str, list[Result]] = {"null": [], "ref": [], "gen": []}
                jobs = {"null": null, "ref": ref, "gen": gen}

                def timed(*wanted: str) -> None:
                    kinds = [k for k in wanted if jobs[k] is not None]
                    runs = run_alone([jobs[k] for k in kinds], 1, require_isolation=self.require_isolation,
                                     allow_unisolated=self.allow_unisolated)
                    for kind, [result] in zip(kinds, runs):
                        got[kind].append(result)
                    self.timed_runs += len(kinds)

                def window() -> tuple[Timing, Timing, Timing]:
                    ref_window, null_window = Timing.of(got["ref"]), Timing.of(got["null"])
                    floors = []
                    for past, now in zip(history, (ref_window, null_window)):
                        best = [t.best for t in (past, now) if t is not None and t.best is not None and t.clock == ref_window.clock]
                        floors.append(min(best) if best else 0.0)
                    return dataclasses.replace(Timing.of(got["gen"]), floors=tuple(floors)), ref_window, null_window

                timed("ref")
                cap = repeats + self.extra_repeats
                while True:
                    timed("gen", "null", "ref")
                    rounds = len(got["gen"])
                    if not got["gen"][-1].passed:  # a failed run decides: efficiency 0
                        break
                    if not all(r.passed for r in got["ref"] + got["null"]):  # nothing to compare with
                        break
                    if rounds >= cap or (rounds >= repeats and window_score(*window()) is not None):
                        break
                for cached_key, kind in (ref_key, "ref"), (null_key, "null"):
                    if got[kind]:
                        fresh = Timing.of(got[kind])
                        self._timings[cached_key] = (self._timings[cached_key].merged(fresh)
                                                     if cached_key in self._timings else fresh)
                        self._held(cached_key)
                timing, ref_window, null_window = window()
                disturbed = timing.best is not None and window_score(timing, ref_window, null_window) is None
                self._timings[key] = dataclasses.replace(timing, disturbed=disturbed, against=(ref_window, null_window))
                self._held(key)
            out = []
            for ref, gen in pairs:
                keys = ((True, *_job_key(ref)), self._null_of(ref)[0], (False, *_job_key(gen)))
                for k in keys:
                    if k not in self._timings:
                        self._timings[k] = Timing(None, None, None, 0)
                        self._held(k)
                    self._timings.move_to_end(k)
                ref_timing, null_timing, timing = (self._timings[k] for k in keys)
                out.append((*timing.against, timing) if timing.against else (ref_timing, null_timing, timing))
            self._trim()
        return out  # type: ignore[return-value]


def _column(columns: dict, name: str, n: int, default: Any = None) -> list:
    values = columns.get(name)
    if values is None:
        return [default] * n
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        return [values] * n
    if len(values) != n:
        raise InputError(f"column {name!r} has {len(values)} entries for {n} completions")
    return list(values)


class _Batch:
    """Programs, jobs and (lazily) sandbox results of one call, shared by the components."""

    def __init__(self, suite: CodeRewardState, completions: list, columns: dict):
        n = len(completions)
        self.texts = [completion_text(c) for c in completions]
        self.entry = _column(columns, "entry_point", n)
        self.prefix = _column(columns, "code_prefix", n)
        self.test = _column(columns, "test", n)
        self.fmt = _column(columns, "test_format", n, "humaneval")
        self.reference = _column(columns, "reference", n)
        self.extracted = [extract_code(t, e) for t, e in zip(self.texts, self.entry)]
        self.programs = [assemble_program(x.code, p, e) for x, p, e in zip(self.extracted, self.prefix, self.entry)]
        self.suite = suite

    def job(self, i: int, reference: bool = False) -> Job:
        program = self.reference[i] if reference else self.programs[i]
        return make_job(program, self.test[i], self.fmt[i], self.entry[i], self.suite.executor.limits, self.prefix[i])

    def results(self, with_reference: bool = False) -> tuple[list[Result | None], list[Result | None]]:
        jobs, where = [], []
        for i, program in enumerate(self.programs):
            if self.test[i] is not None:
                jobs.append(self.job(i))
                where.append(("gen", i))
            if with_reference and self.test[i] is not None and self.reference[i]:
                jobs.append(self.job(i, reference=True))
                where.append(("ref", i))
        got = self.suite.executor.results(jobs)
        gen: list[Result | None] = [None] * len(self.programs)
        ref: list[Result | None] = [None] * len(self.programs)
        for (kind, i), result in zip(where, got):
            (gen if kind == "gen" else ref)[i] = result
        return gen, ref


class CodeRewardState:
    """State shared by the components of one code suite: the executor and its cache.

    ``min_reference_s``: ``efficiency`` is left unscored (``None``) for problems whose
    reference takes less beyond its null program (the timing cannot resolve them; see
    docs/sandbox.md). ``max_harness_share``: a program that serves its end of the judge's pipe
    itself pays less harness time than the trusted server, down to the bare program's
    (:meth:`CodeExecutor.harness`); the most it can save, as a share of the reference's own
    work, is deducted from every score (so such a program is never paid for its protocol), and
    where it exceeds ``max_harness_share`` the problem is not scored (the deduction would
    distort honest scores by more). ``None``: neither (the unbounded ratio; neither applies
    where ``min_reference_s`` is 0)."""

    def __init__(self, executor: CodeExecutor, time_reference: bool, min_reference_s: float = 1e-3,
                 max_harness_share: float | None = 0.15):
        self.executor = executor
        self.time_reference = time_reference
        self.min_reference_s = min_reference_s
        self.max_harness_share = max_harness_share

    def avoidable_share(self, reference: Timing, null: Timing, avoidable: float = 1.0,
                        floors: tuple[float, float] | None = None) -> float:
        """The most a program could gain by serving the judge's pipe itself, as a share of the
        reference's own work: ``avoidable * t_null / (t_ref - t_null)`` (``avoidable``: the share
        of the null program's time it could skip, :meth:`CodeExecutor.harness`; 1 by default, all
        of it; the ratio from ``floors``, a program's window's, else the timings' best times:
        :func:`mrgrpo.rewards.timing.harness_ratio`); 0 where ``max_harness_share`` is ``None``
        or ``min_reference_s`` is 0."""
        if self.max_harness_share is None or not self.min_reference_s:
            return 0.0
        return avoidable * harness_ratio(reference, null, floors) if avoidable else 0.0

    def resolves(self, reference: Timing, null: Timing) -> bool:
        """The reference's time beyond its null program's is at least ``min_reference_s`` (always,
        where ``min_reference_s`` is 0: every problem scored)."""
        if not self.min_reference_s:
            return True
        return (reference.best or 0.0) - base(null, reference) >= self.min_reference_s

    def score(self, reference: Timing, null: Timing, program: Timing, avoidable: float = 1.0) -> float | None:
        """A program's efficiency from its window (:meth:`CodeExecutor.time_against`: the window's
        reference and null program timings), less the most it could have gained by serving its
        own pipe (:meth:`avoidable_share`, from the floors of the program's window): ``None`` where the window's
        reference does not resolve (:meth:`resolves`), where that share is over
        ``max_harness_share``, or where the window is disturbed; 0 where a run of the program
        failed."""
        if not self.resolves(reference, null):
            return None
        share = self.avoidable_share(reference, null, avoidable, program.floors)
        if self.max_harness_share is not None and share > self.max_harness_share:
            return None
        value = window_efficiency(program, reference, null)
        return max(0.0, value - share) if value else value

    def batch(self, completions: list, columns: dict) -> _Batch:
        return _Batch(self, completions, columns)


def _components(state: CodeRewardState) -> dict[str, RewardComponent]:
    def results(completions, columns):
        return state.batch(completions, columns).results(with_reference=state.time_reference)

    def fmt(prompts, completions, **columns):
        score = {"closed": 1.0, "open": 0.5, "none": 0.0}
        return [score[x.fence] for x in state.batch(completions, columns).extracted]

    def syntax(prompts, completions, **columns):
        return [float(_parses(p)) for p in state.batch(completions, columns).programs]

    def compiles(prompts, completions, **columns):
        return [float(_compiles(p)) for p in state.batch(completions, columns).programs]

    def run(prompts, completions, **columns):
        gen, _ = results(completions, columns)
        return [None if r is None else float(r.verdict in (Verdict.PASSED, Verdict.FAILED)) for r in gen]

    def passed(prompts, completions, **columns):
        gen, _ = results(completions, columns)
        return [None if r is None else float(r.passed) for r in gen]

    def similarity(prompts, completions, **columns):
        batch = state.batch(completions, columns)
        return [
            None if not ref else ast_similarity(p, ref, e)
            for p, ref, e in zip(batch.programs, batch.reference, batch.entry)
        ]

    def eff(prompts, completions, **columns):
        batch = state.batch(completions, columns)
        gen, ref = batch.results(with_reference=True)
        out: list[float | None] = []
        timed = []
        for i, (g, r) in enumerate(zip(gen, ref)):
            if g is None or r is None or not r.passed:
                out.append(None)
            elif not g.passed:
                out.append(0.0)
            else:
                out.append(None)
                timed.append(i)
        if timed:
            executor = state.executor
            ref_jobs = [batch.job(i, reference=True) for i in timed]
            references = executor.timings(ref_jobs, reference=True)
            passing = [(i, job, r) for i, job, r in zip(timed, ref_jobs, references) if r.best is not None]
            nulls = executor.nulls([job for _, job, _ in passing])
            avoidables = executor.harness([job for _, job, _ in passing])
            # scored where the reference's own work (its time beyond the harness's) is resolvable
            resolved = [(i, a) for (i, _, r), n, a in zip(passing, nulls, avoidables) if state.resolves(r, n)]
            timings = executor.time_against([(batch.job(i, reference=True), batch.job(i)) for i, _ in resolved])
            for (i, a), (r, n, g) in zip(resolved, timings):
                out[i] = state.score(r, n, g, a)
        return out

    def pass_rate(prompts, completions, **columns):
        gen, _ = results(completions, columns)
        return [None if r is None else r.pass_rate for r in gen]

    def executable(prompts, completions, **columns):
        gen, _ = results(completions, columns)
        return [None if r is None else float(r.loaded) for r in gen]

    fns = {
        "format": fmt, "syntax": syntax, "compile": compiles, "run": run, "pass": passed,
        "ast_similarity": similarity, "efficiency": eff, "pass_rate": pass_rate, "executable": executable,
    }
    for fn in fns.values():
        fn.state = state  # type: ignore[attr-defined]  # see code_state()
    # efficiency abstains (None) where the reference takes under min_reference_s: sparse by design
    return {name: RewardComponent(name, (0.0, 1.0), fn, sparse=name == "efficiency") for name, fn in fns.items()}


def code_state(suite: RewardSuite) -> CodeRewardState:
    """The executor state (sandbox limits, result cache, ``executions`` count) of a code suite."""
    for component in suite.components:
        state = getattr(component.fn, "state", None)
        if isinstance(state, CodeRewardState):
            return state
    raise ConfigError(f"suite {suite.name!r} has no code reward component")


def _limits(timeout: float | None, memory_mb: int | None, limits: Limits | None,
            disk_files: bool | None = None) -> Limits:
    base = limits or Limits()
    changes: dict[str, Any] = {}
    if timeout is not None:
        changes.update(wall_s=float(timeout), cpu_s=max(1, int(round(timeout))))
    if memory_mb is not None:
        changes["memory_mb"] = int(memory_mb)
    if disk_files is not None:
        changes["disk_files"] = disk_files  # (Limits checks it)
    return Limits(**{**base.__dict__, **changes})


@register_suite("code", columns=("test",))
def code_suite(
    components: Sequence[str] = CODE_COMPONENTS,
    weights: Sequence[float] | None = None,
    timeout: float | None = None,
    memory_mb: int | None = None,
    workers: int | None = None,
    cache_size: int = 8192,
    limits: Limits | None = None,
    require_isolation: bool = False,
    allow_unisolated: bool | None = None,
    timing_repeats: int = 3,
    reference_repeats: int = 7,
    min_reference_s: float = 1e-3,
    extra_repeats: int = 6,
    cache_bytes: int = 128 << 20,
    max_harness_share: float | None = 0.15,
    disk_files: bool | None = None,
) -> RewardSuite:
    """CorrGRPO's code suite: format, syntax, compile, run, pass, ast_similarity, efficiency.

    Default weights .05/.05/.05/.25/.60/.30/.20 (the paper's). ``components`` may select any
    of the nine components of this module (e.g. add ``pass_rate``); weights then default to
    the paper's where it has one, else 1. The sandbox is checked when the suite is built
    (:func:`mrgrpo.rewards.sandbox.probe`): where it cannot isolate generated code with any
    kernel layer (namespaces, Landlock, seccomp), :class:`mrgrpo.errors.IsolationError` is
    raised here, before training, unless ``allow_unisolated`` (or the environment variable
    ``MRGRPO_SANDBOX_ALLOW_UNISOLATED=1``) accepts Python-level guards only;
    ``require_isolation`` also refuses a sandbox without a private root (namespaces).
    ``timing_repeats``, ``reference_repeats``, ``extra_repeats``, ``min_reference_s``: the efficiency timing (see
    the module docstring and docs/sandbox.md); ``max_harness_share``: what a program serving its own end of
    the judge's pipe could save (the null program's time beyond the bare program's, as a share of
    the reference's own work) is deducted from every efficiency, and ``efficiency`` abstains where
    it exceeds this share (``None``: neither; docs/sandbox.md).
    ``cache_size``, ``cache_bytes``: the bounds of the result cache (entries, bytes), and of the
    timing cache. ``disk_files``: let programs make files where the sandbox has no private root
    (namespaces refused), at the cost of a channel between concurrent runs
    (:class:`~mrgrpo.rewards.sandbox.Limits`; ``None``: as ``limits``, by default refused).
    """
    components = tuple(components)
    executor = CodeExecutor(
        _limits(timeout, memory_mb, limits, disk_files), workers, cache_size, require_isolation, allow_unisolated,
        timing_repeats, reference_repeats, extra_repeats, cache_bytes,
    )
    if any(c in components for c in ("run", "pass", "efficiency", "pass_rate", "executable")):
        probe(require_isolation=require_isolation, allow_unisolated=allow_unisolated)
    state = CodeRewardState(executor, "efficiency" in components, min_reference_s, max_harness_share)
    available = _components(state)
    unknown = [c for c in components if c not in available]
    if unknown:
        raise ConfigError(f"unknown code reward component(s) {unknown}; available: {sorted(available)}")
    defaults = dict(zip(CODE_COMPONENTS, CODE_WEIGHTS))
    chosen = tuple(available[c] for c in components)
    weights = tuple(weights) if weights is not None else tuple(defaults.get(c, 1.0) for c in components)
    return RewardSuite("code", chosen, weights)


@register_suite("code_sa_mrpo", columns=("test",), forwards=("code",))
def code_sa_mrpo_suite(weights: Sequence[float] = (1.0, 1.0), **options: Any) -> RewardSuite:
    """SA-MRPO's code setup: ``pass_rate`` (fraction of test cases passed) and ``executable``."""
    suite = code_suite(components=SA_MRPO_COMPONENTS, weights=weights, **options)
    return RewardSuite("code_sa_mrpo", suite.components, suite.weights)
