"""SmolLM2-135M-Instruct end to end (slow: ~1-2 minutes on 2 cores): the real demo path."""

from __future__ import annotations

import json

import pytest

from mrgrpo.train.config import load_config
from mrgrpo.train.job import run_train


@pytest.mark.slow
@pytest.mark.newest  # the newest-versions environment's make test: the preset trains there
def test_smollm2_two_steps(tmp_path):
    config = load_config(None, ["max_steps=2", "save_steps=2", "max_wall_seconds=null"])
    result = run_train(config, out=tmp_path / "run", quiet=True)
    assert result.steps == 2
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert 0.0 <= records[-1]["mrgrpo/rewards/format"] <= 1.0
    assert (result.run_dir / "checkpoint-2" / "model.safetensors").is_file()


@pytest.mark.slow
def test_a_shipped_smollm2_config_trains_from_an_empty_directory(tmp_path):
    # what a pip user runs: `mrgrpo train -c smollm2_code ...` in a directory holding nothing
    # (the config is the shipped one, the model the preset; a step shortened to stay a test)
    import subprocess
    import sys

    command = [sys.executable, "-m", "mrgrpo.cli", "train", "-c", "smollm2_code", "--out", "run",
               "--set", "max_steps=1", "--set", "save_steps=1", "--set", "trainer.max_completion_length=24",
               "--set", "trainer.gradient_accumulation_steps=4"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "precision: " in done.stderr  # the bf16 decision is logged once
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1]
    assert 0.0 <= records[-1]["mrgrpo/rewards/syntax"] <= 1.0
    assert (tmp_path / "run" / "checkpoint-1" / "model.safetensors").is_file()
