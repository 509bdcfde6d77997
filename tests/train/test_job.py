"""End-to-end tiny runs: every estimator writes all run files; resume and Ctrl-C keep one history."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from transformers import TrainerCallback

from mrgrpo.estimators import available_estimators
from mrgrpo.train.config import ConfigError, validate_config
from mrgrpo.train.job import run_train

from .conftest import tiny_config

RUN_FILES = [
    "config.yaml",
    "grpo_config.json",
    "metrics.jsonl",
    "diagnostics.jsonl",
    "rollouts.jsonl",
    "report.md",
    "rewards.png",
    "reward_total.png",
    "advantages.png",
    "correlation.png",
]


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("estimator", available_estimators())
def test_tiny_run_writes_all_files(estimator, tmp_path):
    config = validate_config(tiny_config(estimator=estimator, max_steps=2, save_steps=2))
    result = run_train(config, out=tmp_path / "run", quiet=True)
    run = result.run_dir
    assert result.steps == 2 and result.stop_reason == "max_steps reached"
    for name in RUN_FILES:
        assert (run / name).is_file(), name
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert (run / "checkpoint-2" / "trainer_state.json").is_file()
    assert _steps(run / "metrics.jsonl") == [1, 2]
    record = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    for key in ("mrgrpo/rewards/correctness", "mrgrpo/rewards/format", "mrgrpo/rewards/length",
                "mrgrpo/reward_total", "mrgrpo/advantages/std", "mrgrpo/diag/zero_variance_fraction", "loss"):
        assert key in record, key
    diag = json.loads((run / "diagnostics.jsonl").read_text().splitlines()[0])
    assert diag["names"] == ["correctness", "format", "length"] and "correlation" in diag
    report = (run / "report.md").read_text()
    assert estimator in report and "rewards.png" in report


class CrashAt(TrainerCallback):
    """Simulates a crash after step ``step`` was logged (before any later checkpoint)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.global_step == self.step and logs and "loss" in logs:
            raise RuntimeError("simulated crash")


def test_resume_after_crash_continues_the_same_run(tmp_path):
    config = validate_config(tiny_config(max_steps=4, save_steps=2))
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_train(config, out=run, extra_callbacks=[CrashAt(3)], quiet=True)
    assert _steps(run / "metrics.jsonl") == [1, 2, 3]
    assert (run / "checkpoint-2").is_dir() and not (run / "checkpoint-4").exists()
    with pytest.raises(ConfigError, match="--resume"):  # a fresh run must not overwrite it
        run_train(config, out=run, quiet=True)

    result = run_train(config, resume=run, quiet=True)
    assert result.steps == 4
    assert _steps(run / "metrics.jsonl") == [1, 2, 3, 4]  # step 3 logged again, once
    assert _steps(run / "diagnostics.jsonl") == [1, 2, 3, 4]
    state = json.loads((run / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4

    # Same optimizer, RNG and data order: an uninterrupted run logs the same losses.
    straight = run_train(config, out=tmp_path / "straight", quiet=True)
    ours = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    ref = [json.loads(l) for l in (straight.run_dir / "metrics.jsonl").read_text().splitlines()]
    for a, b in zip(ours, ref):
        assert a["mrgrpo/reward_total"] == pytest.approx(b["mrgrpo/reward_total"])
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)


class SigintAt(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_saves_a_checkpoint_and_stops_cleanly(tmp_path):
    config = validate_config(tiny_config(max_steps=10, save_steps=5))
    result = run_train(config, out=tmp_path / "run", extra_callbacks=[SigintAt(1)], quiet=True)
    assert result.steps == 2 and "interrupted" in result.stop_reason
    assert (result.run_dir / "checkpoint-2").is_dir()
    assert (result.run_dir / "report.md").is_file()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_wall_clock_stop(tmp_path):
    config = validate_config(tiny_config(max_steps=1000, save_steps=500, max_wall_seconds=1.0))
    result = run_train(config, out=tmp_path / "run", quiet=True)
    assert result.steps < 1000 and "wall-clock" in result.stop_reason
    assert (result.run_dir / f"checkpoint-{result.steps}").is_dir()
