"""Every estimator mistake fails before any model loads, with one line, on each TRL entry point:
the trainer's constructor, ``mrgrpo train --check``, ``mrgrpo train`` and ``--resume`` (the
estimator is bound once, :mod:`mrgrpo.estimators.binding`, and the trainer receives the binding);
a checkpoint's estimator state that does not fit is refused when it is loaded."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

import mrgrpo.train.presets as presets
from mrgrpo.cli import app
from mrgrpo.errors import ConfigError
from mrgrpo.estimators.binding import bind
from mrgrpo.train.config import validate_config
from mrgrpo.train.job import run_train
from mrgrpo.train.trainer import ESTIMATOR_STATE_FILE, MultiRewardGRPOTrainer

from .conftest import tiny_config
from .test_trl_settings import Reward, dataset, grpo_config  # noqa: F401

COSTS = {"constraints": ["format", "length"], "limits": [0.1, 0.1]}
#: The mistakes, as (estimator, options, the message's words).
MISTAKES = {
    "ddca with weights": ("ddca", {}, "ddca does not use the weights of component(s)"),
    "a cost's weight": ("constrained_grpo", {"constraints": [1], "limits": [0.1]}, "does not use the weights of component(s) [1]"),
    "a bad value": ("corr_grpo", {"shrinkage": 2.0}, "shrinkage must be a number"),
    "an unknown option": ("constrained_grpo", {"constraintz": [1]}, "constraints=<required>"),
    "a missing option": ("constrained_grpo", {"limits": [0.1]}, "needs option(s) ['constraints']"),
    "an unknown role": ("ddca", {"correctness": "correctnes"}, "'correctnes' is not a component"),
}


def no_model(monkeypatch):
    monkeypatch.setattr(presets, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))


@pytest.mark.parametrize("name, options, message", list(MISTAKES.values()), ids=list(MISTAKES))
def test_the_trainer_refuses_before_building_anything(name, options, message, tmp_path):
    # model=None: GRPOTrainer would fail on it, so reaching the check proves it runs first
    # (grpo_config's reward_weights are [1, 0.5, 2]: ddca refuses them rather than drop them)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        MultiRewardGRPOTrainer(
            model=None, reward_funcs=[Reward(i) for i in range(3)], args=grpo_config(tmp_path),
            estimator=name, estimator_options={k: (["r1", "r2"] if v == COSTS["constraints"] else v) for k, v in options.items()},
        )


def test_the_trainer_names_grpoconfigs_weights_as_the_fix(tmp_path):
    with pytest.raises(ConfigError, match=r"set them to 1 \(or 0\) in GRPOConfig\(reward_weights\)"):
        MultiRewardGRPOTrainer(model=None, reward_funcs=[Reward(i) for i in range(3)], args=grpo_config(tmp_path), estimator="ddca")


def test_a_binding_for_other_components_is_refused(tmp_path):
    binding = bind("grpo", names=["a", "b", "c"])
    with pytest.raises(ConfigError, match="bound to components"):
        MultiRewardGRPOTrainer(model=None, reward_funcs=[Reward(i) for i in range(3)], args=grpo_config(tmp_path), binding=binding)


def one_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize("name, options, message", list(MISTAKES.values()), ids=list(MISTAKES))
def test_train_check_refuses_each_mistake(name, options, message, tmp_path, monkeypatch):
    no_model(monkeypatch)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tiny_config(estimator=name, estimator_options=options)))  # weights 1/0.5/0.5
    line = one_line(CliRunner().invoke(app, ["train", "-c", str(path), "--check"]))
    assert message in line and "inspect._empty" not in line


def test_train_refuses_before_the_model_loads_and_names_rewards_weights(tmp_path, monkeypatch):
    no_model(monkeypatch)
    with pytest.raises(ConfigError, match=r"ddca does not use the weights .* in rewards.weights"):
        run_train(validate_config(tiny_config(estimator="ddca")), out=tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


def fake_run(tmp_path, state) -> tuple:
    """A run directory whose checkpoint holds ``state`` for constrained_grpo with two constraints."""
    data = tiny_config(estimator="constrained_grpo", estimator_options=COSTS, max_steps=4, save_steps=2)
    data["rewards"]["weights"] = {"correctness": 1.0, "format": 1.0, "length": 1.0}
    config = validate_config(data)
    run = tmp_path / "run"
    checkpoint = run / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (run / "config.yaml").write_text(config.to_yaml())
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (checkpoint / ESTIMATOR_STATE_FILE).write_text(json.dumps({"estimator": "constrained_grpo", "state": state}))
    return config, run, checkpoint


ONE_MULTIPLIER = {"multipliers": [0.5], "steps": 2, "cost_mean": [0.1], "violation": [0.0]}


def test_a_state_that_does_not_fit_is_refused_on_resume_before_the_model_loads(tmp_path, monkeypatch):
    no_model(monkeypatch)
    config, run, checkpoint = fake_run(tmp_path, ONE_MULTIPLIER)
    message = "the saved estimator state does not fit this run: constrained_grpo: the state has 1 multipliers"
    with pytest.raises(ConfigError, match=message):
        run_train(config, resume=run, quiet=True)
    assert message in one_line(CliRunner().invoke(app, ["train", "--resume", str(run), "--check"]))
    assert message in one_line(CliRunner().invoke(app, ["train", "--resume", str(run)]))
    assert not (run / "resumes.jsonl").exists()  # nothing was started


def test_the_trainer_refuses_a_state_that_does_not_fit_when_it_loads_the_checkpoint(dataset, tmp_path):  # noqa: F811
    loaded = presets.load_model("tiny")
    args = grpo_config(tmp_path)
    args.reward_weights = None  # (a cost's weight is not used: [1, 0.5, 2] would be refused)
    trainer = MultiRewardGRPOTrainer(
        model=loaded.model, reward_funcs=[Reward(i) for i in range(3)], args=args,
        train_dataset=dataset, processing_class=loaded.tokenizer, estimator="constrained_grpo",
        estimator_options={"constraints": ["r1", "r2"], "limits": [0.1, 0.1]}, diagnostics=False,
    )
    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    (checkpoint / ESTIMATOR_STATE_FILE).write_text(json.dumps({"estimator": "constrained_grpo", "state": ONE_MULTIPLIER}))
    with pytest.raises(ConfigError, match="checkpoint-2/mrgrpo_estimator_state.json: the saved estimator state does not fit"):
        trainer._load_rng_state(str(checkpoint))
    two = {**ONE_MULTIPLIER, "multipliers": [0.5, 0.25]}
    (checkpoint / ESTIMATOR_STATE_FILE).write_text(json.dumps({"estimator": "constrained_grpo", "state": two}))
    trainer._load_rng_state(str(checkpoint))
    assert trainer.estimator_state == two and trainer.binding.state == two
