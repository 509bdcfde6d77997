"""Bad pairings fail before any model is loaded, with one line naming the problem and the fix."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mrgrpo.cli import app
from mrgrpo.errors import ConfigError
from mrgrpo.tasks import TaskSpec, get_task
from mrgrpo.tasks.prepare import prepare
from mrgrpo.train.config import RewardsConfig, load_config


@pytest.fixture
def no_model(monkeypatch):
    """Loading a model fails the test: every check here must happen before it."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the checks")

    monkeypatch.setattr("mrgrpo.train.presets.load_model", refuse)


@pytest.mark.parametrize(
    ("config", "overrides", "message"),
    [
        # a suite whose columns the task lacks (the 82-line traceback after the model loaded)
        ("configs/math.yaml", ["rewards.suite=tool_call", "rewards.options={}", "rewards.weights=null"],
         "suite 'tool_call' needs column.s. functions, ground_truth, which task 'math' does not provide"),
        # the math preset's leftover option under another suite
        ("configs/math.yaml", ["rewards.suite=code", "rewards.weights=null"],
         "length_thresholds is not an option of suite 'code'.*it is an option of suite math"),
        # code rewards on the default math task: silently zero signal before; now named
        ("configs/math.yaml", ["rewards.suite=code", "rewards.options={}", "rewards.weights=null"],
         "suite 'code' needs column.s. test, which task 'math' does not provide.*humaneval"),
        # an option of another task
        ("configs/tool_call.yaml", ["task.options.suites=[banking]"], "suites is not an option of task 'bfcl'"),
        ("configs/code.yaml", ["task.name=nope"], "unknown task 'nope'"),
    ],
)
def test_bad_pairing_fails_before_the_model_loads_with_one_line(no_model, config, overrides, message, tmp_path):
    args = ["train", "--config", config, "--out", str(tmp_path / "run")]
    for item in overrides:
        args += ["--set", item]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    import re

    assert re.search(message, lines[0]), lines[0]
    assert not (tmp_path / "run").exists()  # nothing written either


def test_a_component_that_scores_no_sample_row_is_an_error(tmp_path):
    # JSONL code rows without a reference: ast_similarity and efficiency (both against the reference) never score
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps({"prompt": "Write f() returning 1.", "test": ["assert f() == 1"]}) + "\n")
    task_config = TaskSpec("code", {"source": str(path), "test_fraction": 0.0})
    rewards = RewardsConfig(suite="code")
    with pytest.raises(ConfigError, match=r"component\(s\) ast_similarity, efficiency scored none of 1 sample rows"):
        prepare(task_config, rewards, tokenizer=None, chat=True)
    fine = prepare(task_config, RewardsConfig(suite="code", components=["format", "syntax", "run", "pass"]), None, True)
    # no reference: an empty completion is scored (it parses, then fails with a NameError)
    assert fine.sample_means == {"format": 0.0, "syntax": 1.0, "run": 0.0, "pass": 0.0}


@pytest.mark.slow  # reads SmolLM2's tokenizer from its GGUF file twice
def test_every_example_config_passes_the_checks(no_model):
    from mrgrpo.train.job import prepare_task

    for name in ("math", "code", "tool_call", "agentdojo", "smollm2_code", "smollm2_tool_call"):
        config = load_config(f"configs/{name}.yaml")
        prepared = prepare_task(config)
        assert set(prepared.sample_means) == set(prepared.suite.names), name
        assert len(prepared.dataset) > 0


def test_gpu_configs_validate_and_name_real_models():
    for name in ("gpu_math", "gpu_code", "gpu_tool_call", "gpu_agentdojo"):
        config = load_config(f"configs/{name}.yaml")
        assert "/" in config.model, name  # a hub id (or path), not a preset
        task = get_task(prepare_task_name(config))
        assert config.rewards.suite == task.suite


def prepare_task_name(config) -> str:
    from mrgrpo.tasks import resolve

    return resolve(config.task)[0].name


def test_a_config_that_names_no_suite_gets_the_tasks(no_model, tmp_path):
    from mrgrpo.train.job import prepare_task

    path = tmp_path / "c.yaml"
    path.write_text("model: tiny\ntask: {name: bfcl, size: 4, eval_size: 2, few_shot: 0}\n")
    config = load_config(path)
    prepared = prepare_task(config)
    assert prepared.suite.name == "tool_call" and config.rewards.suite == "tool_call"  # recorded for --resume


def test_the_run_records_the_registered_suite_name_not_the_suites_own(no_model, tmp_path, monkeypatch):
    # a factory may name its suite after what it does ("renamed(math)"): the config must keep the
    # registered name, or rebuilding the suite after training (compare, analyze, resume) fails
    from mrgrpo.rewards import base, get_suite
    from mrgrpo.rewards.base import RewardSuite, register_suite
    from mrgrpo.train.job import build_suite, prepare_task

    monkeypatch.setattr(base, "_SUITES", dict(base._SUITES))  # the test's suite stays in this test

    @register_suite("renamed_for_test")
    def renamed(**options):
        base = get_suite("math", **options)
        return RewardSuite("renamed(math)", base.components, base.weights)

    path = tmp_path / "c.yaml"
    path.write_text("model: tiny\ntask: {name: math, size: 4, eval_size: 2}\nrewards: {suite: renamed_for_test}\n")
    config = load_config(path)
    prepared = prepare_task(config)
    assert prepared.suite.name == "renamed(math)" and config.rewards.suite == "renamed_for_test"
    assert build_suite(config, None).names == prepared.suite.names


def test_the_headline_configs_build_their_task_and_scaled_suite(no_model):
    # the CPU headline (a `mrgrpo compare` config): enough distinct questions for its splits, and
    # the x10 brevity bonus in its suite; the GPU one (a `mrgrpo train` config, a hub model that
    # is not here) passes `mrgrpo train --check`
    from typer.testing import CliRunner

    from mrgrpo.cli import app
    from mrgrpo.experiments.compare import load_compare_config
    from mrgrpo.train.config import validate_config
    from mrgrpo.train.job import prepare_task

    train, _ = load_compare_config("configs/testbed/smollm2_brevity10.yaml")
    config = validate_config(train)
    prepared = prepare_task(config)
    assert config.rewards.suite == "scaled" and len(prepared.dataset) == config.task.size
    assert dict(zip(prepared.suite.names, prepared.suite.reward_ranges))["length"] == (0.0, 10.0)
    result = CliRunner().invoke(app, ["train", "-c", "configs/gpu_brevity10.yaml", "--check"])
    assert result.exit_code == 0, result.output
    assert load_config("configs/gpu_brevity10.yaml").rewards.options["scales"] == {"length": 10}
