"""Config validation: unknown keys, bad values, reserved trainer keys, overrides, the embedded default."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mrgrpo.train.config import ConfigError, apply_overrides, load_config, parse_value, validate_config
from mrgrpo.train.defaults import DEFAULT_CONFIG, TINY_CONFIG

REPO = Path(__file__).resolve().parents[2]


def test_embedded_default_is_the_demo_yaml():
    assert yaml.safe_load((REPO / "configs" / "demo.yaml").read_text()) == DEFAULT_CONFIG
    assert yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text()) == TINY_CONFIG
    config = load_config(None)
    assert config.model == "smollm2" and config.estimator == "corr_grpo"
    assert config.rewards.suite == "math" and config.task.name == "chain_sum"
    assert config.max_wall_seconds is not None and config.max_wall_seconds <= 600


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "configs").glob("*.yaml")))
def test_shipped_configs_validate(name):
    load_config(REPO / "configs" / name)


def _error(data) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(data, "test.yaml")
    return str(info.value)


def test_unknown_keys_are_named():
    message = _error({"modle": "tiny"})
    assert "modle: unknown key" in message and "test.yaml" in message
    assert "task.sise: unknown key" in _error({"task": {"sise": 3}})


def test_trainer_keys_must_be_grpo_fields():
    message = _error({"trainer": {"learning_rat": 1e-5}})
    assert "trainer.learning_rat is not a GRPOConfig field" in message and "learning_rate" in message


@pytest.mark.parametrize("key", ["max_steps", "output_dir", "multi_objective_aggregation", "scale_rewards", "reward_weights"])
def test_reserved_trainer_keys_point_to_the_right_place(key):
    message = _error({"trainer": {key: 1}})
    assert f"trainer.{key} is set by mrgrpo" in message


def test_bad_values():
    assert "max_steps" in _error({"max_steps": 0})
    assert "unknown estimator 'nope'" in _error({"estimator": "nope"})
    message = _error({"estimator": "grpo", "estimator_options": {"gamma": 1.0}})
    assert "has no option(s) ['gamma']" in message and "scale" in message
    assert "max_wall_seconds" in _error({"max_wall_seconds": "soon"})


def test_estimator_options_accepted():
    config = validate_config({"estimator": "sa_mrpo", "estimator_options": {"gamma": 1.0}})
    assert config.estimator_options == {"gamma": 1.0}


def test_overrides_and_values():
    assert parse_value("1e-5") == 1e-5 and parse_value("3") == 3 and parse_value("true") is True
    assert parse_value("[24, 64]") == [24, 64] and parse_value("chain_sum") == "chain_sum"
    data = apply_overrides({"trainer": {}}, ["trainer.learning_rate=1e-5", "task.options.min_terms=3"])
    assert data == {"trainer": {"learning_rate": 1e-5}, "task": {"options": {"min_terms": 3}}}
    with pytest.raises(ConfigError, match="expected key=value"):
        apply_overrides({}, ["max_steps"])
    config = load_config(None, ["max_steps=3", "trainer.learning_rate=2e-5"], estimator="gdpo")
    assert config.max_steps == 3 and config.trainer["learning_rate"] == 2e-5 and config.estimator == "gdpo"


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(bad)


def test_grpo_config_errors_are_config_errors(tmp_path):
    from mrgrpo.train.job import grpo_config

    # 8 rollouts per step cannot be split into groups of 3
    config = validate_config({"trainer": {"num_generations": 3, "per_device_train_batch_size": 8}})
    with pytest.raises(ConfigError, match="invalid trainer settings"):
        grpo_config(config, tmp_path)


def test_cli_reports_config_errors_with_exit_code_2(tmp_path):
    import typer
    from typer.testing import CliRunner

    from mrgrpo.train.commands import register

    app = typer.Typer()
    register(app)
    runner = CliRunner()
    result = runner.invoke(app, ["train", "--set", "trainer.learing_rate=1", "--set", "foo=2"])
    assert result.exit_code == 2
    assert "learning_rate" in result.output and "foo: unknown key" in result.output
    result = runner.invoke(app, ["train", "--resume", str(tmp_path)])
    assert result.exit_code == 2 and "no config.yaml" in result.output
    result = runner.invoke(app, ["train", "--estimator", "nope"])
    assert result.exit_code == 2 and "unknown estimator 'nope'" in result.output


def test_numbers_read_as_numbers_in_config_files_and_set(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model: tiny\nestimator: grpo\nestimator_options: {eps: 1e-5}\ntrainer: {learning_rate: 5e-4}\n")
    config = load_config(path, ["trainer.max_grad_norm=1E+1", "rewards.weights.correctness=.5"])
    assert config.trainer["learning_rate"] == 5e-4 and isinstance(config.trainer["learning_rate"], float)
    assert config.estimator_options == {"eps": 1e-5} and config.trainer["max_grad_norm"] == 10.0
    assert config.rewards.weights == {"correctness": 0.5}
    assert parse_value("010") == 10 and parse_value("1:20") == "1:20" and parse_value("yes") == "yes"


def test_types_are_not_guessed():
    assert "max_steps: Input should be a valid integer, got True" in _error({"max_steps": True})
    assert "max_steps" in _error({"max_steps": "8"})
    assert "max_wall_seconds: NaN/infinity is not a valid setting" in _error({"max_wall_seconds": float("inf")})
    assert "task.options.min_terms: NaN/infinity" in _error({"task": {"options": {"min_terms": float("inf")}}})


def test_trainer_type_errors_are_one_line_naming_the_key():
    message = _error({"trainer": {"per_device_train_batch_size": "eight"}})
    assert "\n" not in message
    assert "trainer.per_device_train_batch_size: input should be a valid integer" in message and "'eight'" in message
    assert "drop the quotes" in _error({"trainer": {"learning_rate": "1e-5"}})
    assert "expected auto, true or false, got 'yes'" in _error({"trainer": {"bf16": "yes"}})
    assert "trainer.learning_rate: NaN/infinity" in _error({"trainer": {"learning_rate": float("nan")}})


def test_estimator_option_values_are_checked_with_the_config():
    assert "estimator_options: grpo: scale must be one of" in _error({"estimator": "grpo", "estimator_options": {"scale": "grup"}})
    assert "eps must be a finite number >= 0, got -1" in _error({"estimator": "corr_grpo", "estimator_options": {"eps": -1}})
    assert "gamma" in _error({"estimator": "sa_mrpo", "estimator_options": {"gamma": "half"}})
    validate_config({"estimator": "sa_corr_grpo", "estimator_options": {"gamma": 1, "shrinkage": "auto"}})


def test_a_model_path_that_does_not_exist_lists_the_presets(tmp_path):
    message = _error({"model": str(tmp_path / "no-such-model")})
    assert f"the directory {tmp_path / 'no-such-model'} does not exist" in message and "tiny, smollm2" in message
    assert "is a file" in _error({"model": __file__})
    validate_config({"model": str(tmp_path)})  # an existing directory
    validate_config({"model": "Qwen/Qwen2.5-0.5B-Instruct"})  # a hub id: accepted for users with hub access


def test_a_hub_id_that_cannot_be_loaded_is_one_line(monkeypatch):
    from mrgrpo.train.presets import load_model

    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no network in tests
    with pytest.raises(ConfigError, match=r"could not be loaded as a hub id \(no such local directory\).*presets: tiny"):
        load_model("no-such-org/no-such-model")


def test_the_train_command_refuses_bad_configs_before_any_model_loads(tmp_path, monkeypatch):
    import typer
    from typer.testing import CliRunner

    import mrgrpo.train.presets as presets
    from mrgrpo.train.commands import register

    monkeypatch.setattr(presets, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    app = typer.Typer()
    register(app)
    path = tmp_path / "run.yaml"
    for text, expected in [
        ("model: tiny\nestimator: grpo\nestimator_options: {eps: -1e-5}\n", "eps must be a finite number"),
        ("model: tiny\ntrainer: {per_device_train_batch_size: eight}\n", "per_device_train_batch_size"),
        ("model: ./no/such/dir\n", "does not exist"),
        ("model: tiny\ntrainer: {learning_rate: [1e-5\n", "not valid YAML"),
    ]:
        path.write_text(text)
        result = CliRunner().invoke(app, ["train", "-c", str(path), "--out", str(tmp_path / "run")])
        assert result.exit_code == 2, result.output
        assert expected in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
    path.write_text("model: tiny\nestimator_options: {eps: 1e-5}\ntrainer: {learning_rate: 5e-4}\n")
    result = CliRunner().invoke(app, ["train", "-c", str(path), "--check"])
    assert result.exit_code == 0 and yaml.safe_load(result.stdout)["trainer"]["learning_rate"] == 5e-4
