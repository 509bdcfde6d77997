"""SmolLM2-135M-Instruct end to end (slow: ~1-2 minutes on 2 cores): the real demo path."""

from __future__ import annotations

import json

import pytest

from mrgrpo.train.config import load_config
from mrgrpo.train.job import run_train


@pytest.mark.slow
def test_smollm2_two_steps(tmp_path):
    config = load_config(None, ["max_steps=2", "save_steps=2", "max_wall_seconds=null"])
    result = run_train(config, out=tmp_path / "run", quiet=True)
    assert result.steps == 2
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert 0.0 <= records[-1]["mrgrpo/rewards/format"] <= 1.0
    assert (result.run_dir / "checkpoint-2" / "model.safetensors").is_file()
