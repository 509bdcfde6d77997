"""mrgrpo.integrations.verl_reward: verl's custom_reward_function (no verl needed)."""

import math

import pytest

from mrgrpo.integrations import verl_reward
from mrgrpo.rewards import get_suite


def test_compute_score_returns_weighted_total_and_every_component():
    out = verl_reward.compute_score("src", "<answer>7</answer>", "7", {"task": ""})
    suite = get_suite("math")
    assert set(out) == {"score", *suite.names}
    # correct, well formatted, short: 1*1 + 0.5*1 + 0.5*1
    assert out == {"score": 2.0, "correctness": 1.0, "format": 1.0, "length": 1.0}
    wrong = verl_reward.compute_score("src", "it is 8", "7", {"task": ""})
    assert wrong["correctness"] == 0.0 and wrong["format"] == 0.0
    assert wrong["score"] == pytest.approx(0.5 * wrong["length"])


def test_settings_from_reward_kwargs_and_environment(monkeypatch):
    out = verl_reward.compute_score("s", "<answer>7</answer>", "7", None, weights={"format": 2.0})
    assert out["score"] == pytest.approx(1.0 + 2.0 + 0.5)
    monkeypatch.setenv("MRGRPO_VERL_WEIGHTS", "[0, 0, 1]")
    assert verl_reward.compute_score("s", "<answer>7</answer>", "7")["score"] == 1.0
    monkeypatch.setenv("MRGRPO_VERL_SUITE", "nope")
    with pytest.raises(ValueError, match="unknown reward suite"):
        verl_reward.compute_score("s", "x", "7")


def test_batch_form_matches_single_and_ignores_verl_extra_keys():
    sols = ["<answer>3</answer>", "<answer>4</answer>", "no"]
    infos = [{"task": "", "num_turns": 1, "rollout_reward_scores": {}}] * 3
    batch = verl_reward.compute_score_batch(["s"] * 3, sols, ["3", "3", "3"], infos)
    single = [verl_reward.compute_score("s", s, "3", i) for s, i in zip(sols, infos)]
    assert batch == single
    assert [b["correctness"] for b in batch] == [1.0, 0.0, 0.0]
    assert all(not math.isnan(v) for b in batch for v in b.values())
