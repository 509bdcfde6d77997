"""verl: every estimator mistake fails before Ray starts (the launcher) or when a checkpoint is
loaded (verl's resume), with one line: the estimator is bound to ``algorithm`` once
(:func:`mrgrpo.integrations.verl.binding.bind_settings`)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("verl.trainer.main_ppo", reason="verl is not installed (optional extra mrgrpo[verl])")

from mrgrpo.errors import ConfigError  # noqa: E402
from mrgrpo.integrations.verl import launch  # noqa: E402
from mrgrpo.integrations.verl.state import STATE, STATE_FILE  # noqa: E402

from .test_verl_estimators import _trainer_config, legacy_checkpoints  # noqa: E402,F401
from .test_verl_launch import example  # noqa: E402

COSTS = ["+algorithm.mrgrpo.options.constraints=[format,length]", "+algorithm.mrgrpo.options.limits=[0.1,0.1]"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        # the example's suite is math: correctness 1, format 0.5, length 0.5
        (["algorithm.adv_estimator=mrgrpo_ddca", "algorithm.mrgrpo.weights=[1,0.5,0.5]"],
         r"ddca does not use the weights of component\(s\) \[1, 2\] .* in algorithm.mrgrpo.weights"),
        (["algorithm.adv_estimator=mrgrpo_constrained_grpo", *COSTS],
         r"constrained_grpo does not use the weights of component\(s\) \[1, 2\]"),
        (["algorithm.adv_estimator=mrgrpo_constrained_grpo", "+algorithm.mrgrpo.options.constraintz=[1]"],
         "constraints=<required>"),
        (["algorithm.adv_estimator=mrgrpo_ddca", "+algorithm.mrgrpo.options.length=size"], "'size' is not a component"),
        (["algorithm.mrgrpo.singleton_groups=score"], "would be mixed into mrgrpo_gdpo's own batch normalization"),
    ],
)
def test_the_launcher_refuses_before_ray_starts(overrides, message):
    with pytest.raises(ConfigError, match=message):
        launch.prepare(example(*overrides))


def test_ddca_runs_without_the_suites_default_weights():
    launch.prepare(example("algorithm.adv_estimator=mrgrpo_ddca"))  # weights: null = the suite's, not a setting


def checkpoint(tmp_path, multipliers):
    """verl's checkpoint layout: global_step_2 with the tracker file, and mrgrpo's state beside it."""
    folder = tmp_path / "ckpt" / "global_step_2"
    folder.mkdir(parents=True)
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2")
    state = {"multipliers": multipliers, "steps": 2, "cost_mean": [0.1] * len(multipliers), "violation": [0.0] * len(multipliers)}
    (folder / STATE_FILE).write_text(json.dumps({"estimator": "constrained_grpo", "state": state}))
    return folder


def resumed(tmp_path, *overrides):
    return example(
        "algorithm.adv_estimator=mrgrpo_constrained_grpo", *COSTS, "algorithm.mrgrpo.weights=[1,1,1]",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}", *overrides,
    )


def test_the_launcher_refuses_a_state_verl_would_resume_with_that_does_not_fit(tmp_path):
    checkpoint(tmp_path, [0.5])  # one multiplier for two constraints
    with pytest.raises(ConfigError, match="global_step_2/mrgrpo_estimator_state.json: the saved estimator state does not fit"):
        launch.prepare(resumed(tmp_path))
    launch.prepare(resumed(tmp_path, "trainer.resume_mode=disable"))  # a fresh start reads no state


def test_the_launcher_accepts_a_state_that_fits(tmp_path):
    checkpoint(tmp_path, [0.5, 0.25])
    launch.prepare(resumed(tmp_path))


def test_verls_resume_refuses_a_state_that_does_not_fit_when_it_loads_it(tmp_path, legacy_checkpoints):  # noqa: F811
    STATE.reset()
    try:
        checkpoint(tmp_path, [0.5])
        trainer = legacy_checkpoints.__new__(legacy_checkpoints)  # verl's __init__ starts GPU workers
        extra = {"constraints": ["format", "length"], "limits": [0.1, 0.1]}
        trainer.config = _trainer_config("constrained_grpo", extra, tmp_path)
        trainer.config.algorithm.mrgrpo.weights = [1.0, 1.0, 1.0]
        with pytest.raises(ConfigError, match="the saved estimator state does not fit this run: constrained_grpo: the state has 1"):
            trainer._load_checkpoint()
    finally:
        STATE.reset()
