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
efficiency      ``clip(1 - t_gen / t_ref, 0, 1)`` when passing (0 otherwise), ``t`` the wall
                time of the program's calls made by the tests, measured on the judge's side
                of the pipe, the reference timed the same way (``None`` when there is no
                passing reference)
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
import difflib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mrgrpo.rewards.base import RewardComponent, RewardSuite, completion_text, register_suite
from mrgrpo.rewards.sandbox import Job, Limits, Result, Verdict, run_many

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


def efficiency(t_gen: float | None, t_ref: float | None) -> float:
    """``clip(1 - t_gen / t_ref, 0, 1)``; 0 when either time is missing or ``t_ref`` is 0."""
    if t_gen is None or not t_ref:
        return 0.0
    return min(1.0, max(0.0, 1.0 - t_gen / t_ref))


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


class CodeExecutor:
    """Runs programs once: results cached by (program, tests) in an LRU of ``cache_size``."""

    def __init__(
        self, limits: Limits | None = None, workers: int | None = None, cache_size: int = 8192, require_isolation: bool = False
    ):
        self.limits = limits or Limits()
        self.workers = workers
        self.require_isolation = require_isolation
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple, Result] = OrderedDict()
        self._lock = threading.Lock()
        self.executions = 0  # programs actually run (for tests and logging)

    def results(self, jobs: Sequence[Job]) -> list[Result]:
        keys = [_job_key(j) for j in jobs]
        with self._lock:
            todo = {}
            for key, job in zip(keys, jobs):
                if key not in self._cache and key not in todo:
                    todo[key] = job
            if todo:
                fresh = run_many(list(todo.values()), workers=self.workers, require_isolation=self.require_isolation)
                self.executions += len(todo)
                for key, result in zip(todo, fresh):
                    self._cache[key] = result
            out = []
            for key in keys:
                self._cache.move_to_end(key)
                out.append(self._cache[key])
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return out


def _column(columns: dict, name: str, n: int, default: Any = None) -> list:
    values = columns.get(name)
    if values is None:
        return [default] * n
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        return [values] * n
    if len(values) != n:
        raise ValueError(f"column {name!r} has {len(values)} entries for {n} completions")
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

    def results(self, with_reference: bool = False) -> tuple[list[Result | None], list[Result | None]]:
        limits = self.suite.executor.limits
        jobs, where = [], []
        for i, program in enumerate(self.programs):
            if self.test[i] is not None:
                jobs.append(make_job(program, self.test[i], self.fmt[i], self.entry[i], limits, self.prefix[i]))
                where.append(("gen", i))
            if with_reference and self.test[i] is not None and self.reference[i]:
                jobs.append(make_job(self.reference[i], self.test[i], self.fmt[i], self.entry[i], limits, self.prefix[i]))
                where.append(("ref", i))
        got = self.suite.executor.results(jobs)
        gen: list[Result | None] = [None] * len(self.programs)
        ref: list[Result | None] = [None] * len(self.programs)
        for (kind, i), result in zip(where, got):
            (gen if kind == "gen" else ref)[i] = result
        return gen, ref


class CodeRewardState:
    """State shared by the components of one code suite: the executor and its cache."""

    def __init__(self, executor: CodeExecutor, time_reference: bool):
        self.executor = executor
        self.time_reference = time_reference

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
        gen, ref = results(completions, columns)
        out: list[float | None] = []
        for g, r in zip(gen, ref):
            if g is None or r is None or not r.passed:
                out.append(None)
            else:
                out.append(efficiency(g.test_time, r.test_time) if g.passed else 0.0)
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
    return {name: RewardComponent(name, (0.0, 1.0), fn) for name, fn in fns.items()}


def code_state(suite: RewardSuite) -> CodeRewardState:
    """The executor state (sandbox limits, result cache, ``executions`` count) of a code suite."""
    for component in suite.components:
        state = getattr(component.fn, "state", None)
        if isinstance(state, CodeRewardState):
            return state
    raise ValueError(f"suite {suite.name!r} has no code reward component")


def _limits(timeout: float | None, memory_mb: int | None, limits: Limits | None) -> Limits:
    base = limits or Limits()
    changes = {}
    if timeout is not None:
        changes.update(wall_s=float(timeout), cpu_s=max(1, int(round(timeout))))
    if memory_mb is not None:
        changes["memory_mb"] = int(memory_mb)
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
) -> RewardSuite:
    """CorrGRPO's code suite: format, syntax, compile, run, pass, ast_similarity, efficiency.

    Default weights .05/.05/.05/.25/.60/.30/.20 (the paper's). ``components`` may select any
    of the nine components of this module (e.g. add ``pass_rate``); weights then default to
    the paper's where it has one, else 1. ``require_isolation``: raise
    :class:`mrgrpo.errors.IsolationError` rather than run code where the sandbox cannot isolate
    it (not root); by default it runs with Python-level guards and logs a warning once.
    """
    components = tuple(components)
    executor = CodeExecutor(_limits(timeout, memory_mb, limits), workers, cache_size, require_isolation)
    state = CodeRewardState(executor, "efficiency" in components)
    available = _components(state)
    unknown = [c for c in components if c not in available]
    if unknown:
        raise ValueError(f"unknown code reward component(s) {unknown}; available: {sorted(available)}")
    defaults = dict(zip(CODE_COMPONENTS, CODE_WEIGHTS))
    chosen = tuple(available[c] for c in components)
    weights = tuple(weights) if weights is not None else tuple(defaults.get(c, 1.0) for c in components)
    return RewardSuite("code", chosen, weights)


@register_suite("code_sa_mrpo", columns=("test",), forwards=("code",))
def code_sa_mrpo_suite(weights: Sequence[float] = (1.0, 1.0), **options: Any) -> RewardSuite:
    """SA-MRPO's code setup: ``pass_rate`` (fraction of test cases passed) and ``executable``."""
    suite = code_suite(components=SA_MRPO_COMPONENTS, weights=weights, **options)
    return RewardSuite("code_sa_mrpo", suite.components, suite.weights)
