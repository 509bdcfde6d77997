"""``mrgrpo eval`` scoring: pass@k, and each task scored right on known-good completions."""

from __future__ import annotations

import json

import pytest

from mrgrpo.train.config import ConfigError, TaskConfig
from mrgrpo.train.evaluate import build_eval_task, pass_at_k, resolve_model, run_eval, score
from mrgrpo.train.presets import load_tokenizer


def test_pass_at_k():
    assert pass_at_k(5, 0, 1) == 0.0 and pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - (3 * 2) / (4 * 3))  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(3, 2, 2) == 1.0


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny")


def test_math_gold_answers_score_one(tokenizer):
    task = build_eval_task("math", tokenizer, chat=True, limit=4, task_config=TaskConfig(size=4, eval_size=4))
    gold = [[f"<answer>{a}</answer>", "<answer>nope</answer>"] for a in task.dataset["answer"]]
    result = score(task, gold)
    assert result["metrics"]["pass@1"] == pytest.approx(0.5) and result["metrics"]["pass@2"] == 1.0
    assert result["components"]["format"] == 1.0


def test_bfcl_reference_calls_are_all_exact(tokenizer):
    from mrgrpo.rewards.tool_call import format_calls, reference_calls

    task = build_eval_task("bfcl", tokenizer, chat=True, limit=3)
    gold = [
        [format_calls(reference_calls(json.loads(g), json.loads(f)))]
        for g, f in zip(task.dataset["ground_truth"], task.dataset["functions"])
    ]
    result = score(task, gold)
    assert result["metrics"]["pass@1"] == 1.0 and result["components"]["all_exact"] == 1.0


def test_humaneval_canonical_solutions_pass(tokenizer):
    task = build_eval_task("humaneval", tokenizer, chat=True, limit=2)
    gold = [[f"```python\n{r}```"] for r in task.dataset["reference"]]
    result = score(task, gold)
    assert result["metrics"]["pass@1"] == 1.0


def test_resolve_model_and_errors(tmp_path):
    assert resolve_model("tiny") == ("tiny", None)
    (tmp_path / "config.yaml").write_text("model: tiny\n")
    with pytest.raises(ConfigError, match="without checkpoints"):
        resolve_model(str(tmp_path))
    with pytest.raises(ConfigError, match="--task must be one of"):
        run_eval("tiny", "poetry")
