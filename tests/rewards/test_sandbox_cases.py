"""How trusted test code becomes separately counted cases (``mrgrpo.rewards.sandbox.cases``):
every top-level statement holding an ``assert`` is one case, the rest is setup, and the judge asks
the program for exactly the names the tests read and never bind."""

from __future__ import annotations

import ast

import pytest

from mrgrpo.errors import InputError
from mrgrpo.rewards.sandbox.cases import CASES_FUNCTION, build_cases, build_tree, global_names


def outcomes(tests: str, candidate, test_format: str = "humaneval") -> list[str | None]:
    tree, _ = build_tree(tests, test_format)
    namespace: dict = {}
    exec(compile(tree, "<tests>", "exec"), namespace)
    return [None if e is None else type(e).__name__ for e in namespace[CASES_FUNCTION](candidate)]


def test_each_top_level_assert_is_a_case_and_a_failure_does_not_stop_the_next():
    tests = "def check(candidate):\n    x = 2\n    assert candidate(x) == 4\n    assert candidate(1) == 5\n" \
            "    for i in range(3):\n        assert candidate(i) == 2 * i\n"
    assert build_tree(tests, "humaneval")[1] == 3
    assert outcomes(tests, lambda v: 2 * v) == [None, "AssertionError", None]
    assert outcomes(tests, lambda v: {}[v]) == ["KeyError", "KeyError", "KeyError"]


def test_assert_lists_are_cases_too():
    tests = "import math\nassert f(1) == 2\nassert math.pi > 3\n"
    tree, n_cases = build_tree(tests, "assert")
    assert n_cases == 2
    assert "f" in global_names(compile(tree, "<tests>", "exec"))


def test_a_suite_without_an_assert_is_one_case():
    assert build_tree("def check(candidate):\n    candidate(1)\n", "humaneval")[1] == 1


@pytest.mark.parametrize("body", ["    yield 1\n", "    x = yield\n", "    yield from range(2)\n"])
def test_tests_that_yield_themselves_are_refused(body):
    with pytest.raises(InputError, match="yield"):
        build_tree("def check(candidate):\n    assert candidate(1)\n" + body, "humaneval")


def test_a_yield_inside_a_helper_is_the_helpers_own():
    tests = "def check(candidate):\n    def gen():\n        yield 1\n    assert candidate(list(gen())) == 1\n" \
            "    f = lambda: (yield)\n"
    assert outcomes(tests, len) == [None]


def test_the_names_asked_of_the_program_include_every_name_the_tests_read_and_never_bind():
    tests = ("import math\nfrom os import path as p\nLIMIT = 3\n"
             "def check(candidate):\n    def helper(a, *rest, key=None):\n        return a + helper_of_program(a)\n"
             "    class Box:\n        size = SIZE\n"
             "    try:\n        pass\n    except ValueError as err:\n        print(err)\n"
             "    assert [is_prime(i) for i in range(LIMIT)] == (lambda q: flag(q))(candidate(helper(LIMIT)))\n"
             "    assert math.floor(p.sep == '/') == 0\n")
    tree, _ = build_tree(tests, "humaneval")
    names = global_names(compile(tree, "<tests>", "exec"))
    assert len(names) == len(set(names))
    # read and never bound, in a nested function, a class body, a comprehension, a lambda
    assert {"helper_of_program", "SIZE", "is_prime", "flag", "print", "ValueError"} <= set(names)
    # locals and parameters are never looked up by name
    assert not {"a", "rest", "key", "q", "i", "err", "candidate"} & set(names)


def test_the_tree_and_the_source_forms_agree():
    tests = "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(3) == 9\n"
    source, n_cases = build_cases(tests, "humaneval")
    tree, n_tree = build_tree(tests, "humaneval")
    assert n_cases == n_tree == 2
    assert ast.dump(ast.parse(source)) == ast.dump(ast.parse(ast.unparse(tree)))
