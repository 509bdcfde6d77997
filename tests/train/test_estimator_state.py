"""Estimator state carried across steps (corr_grpo's EMA correlation) is checkpointed and resumed."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mrgrpo

from mrgrpo.train.config import ConfigError, validate_config
from mrgrpo.train.job import run_train
from mrgrpo.train.trainer import ESTIMATOR_STATE_FILE

from .conftest import tiny_config
from .test_job import CrashAt


def _state(checkpoint):
    record = json.loads((checkpoint / ESTIMATOR_STATE_FILE).read_text())
    assert record["estimator"] == "corr_grpo"
    return record["state"]


def test_correlation_ema_state_is_checkpointed_and_resumed(tmp_path):
    config = validate_config(tiny_config(estimator="corr_grpo", correlation_ema=0.8, max_steps=4, save_steps=2))
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_train(config, out=run, extra_callbacks=[CrashAt(3)], quiet=True)
    saved = _state(run / "checkpoint-2")
    assert saved["steps"] >= 2 and saved["decay"] == 0.8

    run_train(config, resume=run, quiet=True)
    straight = run_train(config, out=tmp_path / "straight", quiet=True)
    resumed, reference = _state(run / "checkpoint-4"), _state(straight.run_dir / "checkpoint-4")
    assert resumed["steps"] == reference["steps"] > saved["steps"]  # continued, not restarted
    assert np.allclose(resumed["correlation"], reference["correlation"])


@pytest.mark.parametrize(
    "changes,message",
    [
        (dict(estimator="gdpo", correlation_ema=0.9), "correlation_ema needs estimator"),
        (dict(estimator="corr_grpo", correlation_ema=0.9, estimator_options={"pooling": "group"}), "sets"),
        (dict(estimator="corr_grpo", correlation_ema=1.5), "correlation_ema"),
    ],
)
def test_correlation_ema_config_errors(changes, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(tiny_config(**changes))


#: Stateful estimators other than the correlation EMA (covered above), with their example options.
OTHER_STATEFUL = [
    n for n in mrgrpo.available_estimators()
    if mrgrpo.get_estimator(n).stateful and "correlation_ema" not in mrgrpo.get_estimator(n).options
]


@pytest.mark.parametrize("name", OTHER_STATEFUL)
def test_every_stateful_estimators_state_is_checkpointed_resumed_and_logged(name, tmp_path):
    spec = mrgrpo.get_estimator(name)
    data = tiny_config(estimator=name, estimator_options=dict(spec.example_options), max_steps=4, save_steps=2)
    named = []  # the components the roles name weigh 1 (they enter through their role)
    for role in spec.roles:
        value = spec.example_options.get(role)
        named += value if isinstance(value, list) else [] if value is None else [value]
    components = ["correctness", "format", "length"]
    data["rewards"]["weights"] = {c: (1.0 if i in named else w) for i, (c, w) in enumerate(zip(components, [1.0, 0.5, 0.5]))}
    config = validate_config(data)
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_train(config, out=run, extra_callbacks=[CrashAt(3)], quiet=True)
    record = json.loads((run / "checkpoint-2" / ESTIMATOR_STATE_FILE).read_text())
    assert record["estimator"] == name and record["state"]
    run_train(config, resume=run, quiet=True)
    straight = run_train(config, out=tmp_path / "straight", quiet=True)
    resumed = json.loads((run / "checkpoint-4" / ESTIMATOR_STATE_FILE).read_text())["state"]
    reference = json.loads((straight.run_dir / "checkpoint-4" / ESTIMATOR_STATE_FILE).read_text())["state"]
    assert resumed["steps"] == reference["steps"] == 4 if "steps" in resumed else True  # continued, not restarted
    assert json.dumps(resumed) == json.dumps(reference)  # the same state as an uninterrupted run
    # the state's numeric entries are logged every step (metrics.jsonl), resumed steps included
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [l for l in lines if "mrgrpo/advantages/mean" in l]
    assert len(steps) == 4 and all(any(k.startswith("mrgrpo/state/") for k in l) for l in steps)
