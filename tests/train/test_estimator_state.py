"""Estimator state carried across steps (corr_grpo's EMA correlation) is checkpointed and resumed."""

from __future__ import annotations

import json

import numpy as np
import pytest

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
