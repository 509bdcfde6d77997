"""The code reward suite: extraction, the nine components, caching, the registered suites."""

from __future__ import annotations

import json

import pytest

from mrgrpo.rewards import get_suite
from mrgrpo.rewards.code import (
    CODE_COMPONENTS,
    CODE_WEIGHTS,
    assemble_program,
    code_state,
    ast_similarity,
    extract_code,
    node_types,
)
from mrgrpo.rewards.timing import efficiency

PREFIX = 'from typing import List\n\n\ndef add(a: int, b: int) -> int:\n    """Sum."""\n'
TEST = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 0) == 0\n    assert candidate(-2, 2) == 0\n"
REFERENCE = PREFIX + "    return a + b\n"


def columns(n: int, **overrides) -> dict:
    base = {"test": TEST, "entry_point": "add", "code_prefix": PREFIX, "reference": REFERENCE, "test_format": "humaneval"}
    base.update(overrides)
    return {k: [v] * n for k, v in base.items()}


def score(suite, completions, **overrides):
    cols = columns(len(completions), **overrides)
    prompts = ["p"] * len(completions)
    return {c.name: c(prompts, completions, **cols) for c in suite.components}


# --- extraction ----------------------------------------------------------------------------

def test_extract_fenced_raw_and_unclosed():
    assert extract_code("Here:\n```python\nx = 1\n```\nDone.") .code == "x = 1\n"
    assert extract_code("```python\nx = 1\n```").fence == "closed"
    assert extract_code("```python\ndef add(a, b):\n    return a +").fence == "open"
    assert extract_code("```python\ndef add(a, b):\n    return a +").code == "def add(a, b):\n    return a +"
    raw = extract_code("    return a + b\n")
    assert (raw.code, raw.fence) == ("    return a + b\n", "none")


def test_extract_prefers_python_blocks_defining_the_entry_point():
    text = "```python\ndef add(a, b):\n    return 0\n```\n```python\nprint(add(1, 2))\n```\n```text\nout\n```"
    assert extract_code(text, "add").code.startswith("def add")
    assert extract_code(text).code == "print(add(1, 2))\n"  # no entry point: the last python block
    assert extract_code("```bash\nls\n```\n```\ny = 2\n```").code == "y = 2\n"


def test_assemble_continuation_or_full_definition():
    assert assemble_program("    return a + b\n", PREFIX, "add") == PREFIX + "    return a + b\n"
    full = "def add(a, b):\n    return a + b\n"
    assert assemble_program(full, PREFIX, "add") == PREFIX.rstrip() + "\n\n" + full
    assert assemble_program(full, "", "add") == full


# --- pure components ---------------------------------------------------------------------

def test_ast_similarity_and_node_types():
    assert ast_similarity(REFERENCE, REFERENCE, "add") == 1.0
    other = PREFIX + "    total = 0\n    for x in (a, b):\n        total += x\n    return total\n"
    assert 0.0 < ast_similarity(other, REFERENCE, "add") < 1.0
    assert ast_similarity("def add(:", REFERENCE, "add") == 0.0
    assert node_types("def f():\n    return 1\n", "f") == ["FunctionDef", "arguments", "Return", "Constant"]


def test_ast_similarity_never_executes(tmp_path):
    marker = tmp_path / "ran"
    program = f"open({str(marker)!r}, 'w').write('x')\ndef add(a, b):\n    return a + b\n"
    assert ast_similarity(program, REFERENCE, "add") > 0.5
    assert not marker.exists()


def test_efficiency_formula():
    assert efficiency(1.0, 4.0) == 0.75       # 1 - 1/4
    assert efficiency(4.0, 1.0) == 0.0        # slower than the reference: clipped
    assert efficiency(None, 1.0) == 0.0 and efficiency(1.0, 0.0) == 0.0


# --- the suites ------------------------------------------------------------------------------

def test_code_suite_has_the_papers_components_and_weights():
    suite = get_suite("code")
    assert tuple(suite.names) == CODE_COMPONENTS == ("format", "syntax", "compile", "run", "pass", "ast_similarity", "efficiency")
    assert suite.weights == CODE_WEIGHTS == (0.05, 0.05, 0.05, 0.25, 0.60, 0.30, 0.20)
    assert all(r == (0.0, 1.0) for r in suite.reward_ranges)
    sa = get_suite("code_sa_mrpo")
    assert sa.names == ["pass_rate", "executable"] and sa.name == "code_sa_mrpo"


def test_components_on_a_spectrum_of_completions():
    completions = [
        "```python\ndef add(a, b):\n    return a + b\n```",            # correct, fenced
        "    return a + b\n",                                             # correct continuation, raw
        "```python\ndef add(a, b):\n    return a - b\n```",            # runs, fails
        "```python\ndef add(a, b):\n    return {}[a]\n```",            # runtime error
        "```python\ndef add(a, b):\n    return a +",                    # truncated: no parse
        "```python\ndef add(a, b):\n    pass\nreturn 1\n```",          # parses, does not compile
        [{"role": "assistant", "content": "```python\ndef add(a, b):\n    return b + a\n```"}],  # chat
    ]
    got = score(get_suite("code", min_reference_s=0.0), completions)  # time even a reference this fast
    assert got["format"] == [1.0, 0.0, 1.0, 1.0, 0.5, 1.0, 1.0]
    assert got["syntax"] == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    assert got["compile"] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    assert got["run"] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    assert got["pass"] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert got["ast_similarity"][1] == 1.0  # the reference itself
    assert 0.5 < got["ast_similarity"][0] < 1.0  # same body, no annotations or docstring
    assert all(0 <= v <= 1 for v in got["efficiency"])
    assert [got["efficiency"][i] for i in (2, 3, 4, 5)] == [0.0] * 4  # only passing code earns it
    sa = score(get_suite("code_sa_mrpo"), completions)
    # a - b: passes (0,0) only -> 1/3; {}[a]: every case raises -> 0
    assert sa["pass_rate"] == pytest.approx([1.0, 1.0, 1 / 3, 0.0, 0.0, 0.0, 1.0])
    assert sa["executable"] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0]


def test_each_completion_runs_once_per_step_whatever_reads_it():
    suite = get_suite("code")
    completions = ["```python\ndef add(a, b):\n    return a + b\n```", "    return a * b\n", "    return a * b\n"]
    cols = columns(3)
    for component in suite.components:
        component(["p"] * 3, completions, **cols)
    # two distinct programs + one reference, whatever the number of components and duplicates
    assert code_state(suite).executor.executions == 3
    for component in suite.components:
        component(["p"] * 3, completions, **cols)
    assert code_state(suite).executor.executions == 3


def test_assert_and_stdio_test_formats():
    suite = get_suite("code_sa_mrpo")
    asserts = "assert add(1, 2) == 3\nassert add(2, 2) == 5\n"
    got = score(suite, ["def add(a, b):\n    return a + b\n"], test=asserts, test_format="assert", code_prefix="")
    assert got["pass_rate"] == [0.5]
    program = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    cases = json.dumps([{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10"}])
    got = score(get_suite("code"), [program], test=cases, test_format="stdio", code_prefix="", entry_point="",
                reference="a, b = map(int, input().split())\nprint(a + b)\n")
    assert got["pass"] == [1.0] and got["run"] == [1.0] and got["ast_similarity"] == [1.0]


def test_missing_tests_mean_unscored():
    got = score(get_suite("code"), ["    return a + b\n"], test=None)
    assert got["pass"] == [None] and got["run"] == [None] and got["syntax"] == [1.0]


def test_files_without_a_private_root_are_a_suite_option():
    """``disk_files`` reaches the sandbox's limits (``rewards.options.disk_files`` in a config);
    unset, the limits given decide (refused by default)."""
    from mrgrpo.errors import ConfigError
    from mrgrpo.rewards.sandbox import Limits

    limits = lambda **options: code_state(get_suite("code", components=("format",), **options)).executor.limits
    assert limits().disk_files is False and limits(disk_files=True).disk_files is True
    assert limits(limits=Limits(disk_files=True)).disk_files is True
    assert limits(limits=Limits(disk_files=True), disk_files=False).disk_files is False
    with pytest.raises(ConfigError, match="disk_files must be True or False"):
        limits(disk_files="yes")


def test_unknown_component_is_rejected():
    with pytest.raises(ValueError, match="unknown code reward component"):
        get_suite("code", components=("pass", "speed"))
