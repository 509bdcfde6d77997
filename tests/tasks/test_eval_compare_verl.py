"""``mrgrpo eval --task`` for every registered task, ``mrgrpo compare`` on the code and tool-calling
configs, and verl's reward function scoring real rows of the math, code and tool-calling tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mrgrpo.cli import app
from mrgrpo.integrations import verl_reward
from mrgrpo.tasks import TaskSpec, available_tasks, get_task

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {"math": "configs/math.yaml", "humaneval": "configs/code.yaml", "bfcl": "configs/tool_call.yaml",
           "agentdojo": "configs/agentdojo.yaml"}


def _own_data_config(task: str, tmp_path: Path) -> Path:
    """A config for the tasks that read the user's own files (qa, code), with real rows written there."""
    from mrgrpo.data.humaneval import humaneval_records
    from mrgrpo.data.reasoning_tasks import load_reasoning_gym

    data = tmp_path / f"{task}.jsonl"
    if task == "qa":
        rows = load_reasoning_gym("basic_arithmetic", n_train=12, n_test=0, few_shot=0)["train"]
        data.write_text("".join(json.dumps({"question": json.loads(e)["question"], "answer": a}) + "\n"
                                for e, a in zip(rows["task_entry"], rows["answer"])))
    else:
        data.write_text("".join(json.dumps({k: r[k] for k in ("prompt", "test", "entry_point", "reference")}
                                           | {"test_format": "humaneval"}) + "\n" for r in humaneval_records()[:8]))
    config = tmp_path / f"{task}.yaml"
    config.write_text(yaml.safe_dump({"model": "tiny", "task": {"name": task, "options": {"source": str(data)},
                                                                "few_shot": 0, "eval_size": 4}}))
    return config


@pytest.mark.parametrize("task", available_tasks())
def test_mrgrpo_eval_works_for_every_registered_task(task, tmp_path):
    config = CONFIGS.get(task) or (str(_own_data_config(task, tmp_path)) if task in ("qa", "code") else None)
    out = tmp_path / "eval.json"
    args = ["eval", "--model", "tiny", "--task", task, "--limit", "1" if task in ("agentdojo", "asb") else "2",
            "--max-new-tokens", "8", "--out", str(out)]
    result = CliRunner().invoke(app, args + (["--config", str(ROOT / config)] if config else []))
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["task"] == task and report["problems"] >= 1
    metric = report["metric"]
    assert any(key == metric or key.endswith(f"/{metric}") for key in report["metrics"]), report["metrics"]
    if get_task(task).rollout == "single_turn":
        assert set(report["components"]) and report["metrics"]["pass@1"] >= 0.0


VERL_CASES = {
    "math": ("correctness", lambda row: f"<answer>{row['answer']}</answer>"),
    "humaneval": ("pass", lambda row: f"```python\n{row['reference']}\n```"),
    "bfcl": ("all_exact", None),
}


@pytest.mark.parametrize("name", list(VERL_CASES))
def test_verl_reward_function_scores_real_rows_through_the_registry(name):
    task = get_task(name)
    rows = task.rows(TaskSpec(name, size=3, eval_size=1), "train")
    key, good = VERL_CASES[name]
    for row in rows:
        verl_row = task.verl_row(row)
        assert verl_row["extra_info"]["mrgrpo_task"] == name
        solution = good(row) if good else task.reference(row)
        truth = verl_row["reward_model"]["ground_truth"]
        scored = verl_reward.compute_score(verl_row["data_source"], solution, truth, verl_row["extra_info"])
        assert scored[key] == 1.0, (name, scored)
        # the task named in reward_kwargs gives the same scores; a wrong answer scores 0
        assert verl_reward.compute_score("s", solution, truth, verl_row["extra_info"], task=name) == scored
        wrong = verl_reward.compute_score("s", "I do not know.", truth, verl_row["extra_info"])
        assert wrong[key] == 0.0 and wrong["score"] < scored["score"]
        suite = verl_reward.load_suite(task=name)
        assert scored["score"] == pytest.approx(sum(w * scored[n] for n, w in zip(suite.names, suite.weights)
                                                    if scored[n] == scored[n]))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["code", "tool_call"])
def test_compare_on_the_code_and_tool_calling_configs_writes_its_table(name, tmp_path):
    out = tmp_path / "cmp"
    result = CliRunner().invoke(app, [
        "compare", "--config", str(ROOT / f"configs/{name}.yaml"), "--estimators", "grpo,gdpo", "--seeds", "2",
        "--jobs", "2", "--out", str(out), "--set", "max_steps=2", "--set", "save_steps=2",
        "--set", "experiment.eval.limit=2", "--set", "experiment.eval.samples=2",
        "--set", "experiment.eval.max_new_tokens=8",
    ])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["estimators"] == ["grpo", "gdpo"] and summary["seeds"] == [0, 1]
    table = (out / "compare.md").read_text()
    assert "| grpo |" in table and "| gdpo |" in table
    expected = {"code": ["format", "syntax", "compile", "run", "pass", "ast_similarity", "efficiency"],
                "tool_call": ["format", "function_name", "parameter_names", "parameter_values", "all_exact"]}[name]
    assert summary["names"] == expected and all(f"| {n} " in table or n in table for n in expected)
