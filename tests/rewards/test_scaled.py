"""The `scaled` suite: a base suite with some components' values and ranges multiplied."""

import subprocess
import sys

import pytest

from mrgrpo.errors import ConfigError, UnknownNameError
from mrgrpo.rewards import available_suites, get_suite
from mrgrpo.rewards.scaled import scaled_suite

ROW = {"answer": ["7", "7", "7"], "task": ["", "", ""], "task_config": ["", "", ""], "task_entry": ["", "", ""]}
REPLIES = ["7", "3 + 4 = 7\n<answer>7</answer>", "3 + 4 = 8\n<answer>8</answer>"]


def _scores(suite):
    return {c.name: c([""] * len(REPLIES), REPLIES, **ROW) for c in suite.components}


def test_a_train_config_finds_it_without_the_experiments_layer():
    code = ("import sys; from mrgrpo.rewards import available_suites; assert 'scaled' in available_suites(); "
            "assert not any(m.startswith('mrgrpo.experiments') for m in sys.modules), 'experiments imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_values_and_ranges_of_the_named_components_are_multiplied_weights_unchanged():
    base = get_suite("math", length_thresholds=[0, 32])
    scaled = scaled_suite(base="math", scales={"length": 10}, length_thresholds=[0, 32])
    assert "scaled" in available_suites() and scaled.name == "scaled"
    assert scaled.names == base.names and scaled.weights == base.weights
    assert dict(zip(scaled.names, scaled.reward_ranges)) == {"correctness": (0.0, 1.0), "format": (0.0, 1.0), "length": (0.0, 10.0)}
    plain, ten = _scores(base), _scores(scaled)
    assert ten["length"] == pytest.approx([10 * v for v in plain["length"]])
    assert ten["correctness"] == plain["correctness"] == [0.0, 1.0, 0.0]
    assert ten["format"] == plain["format"] == [0.0, 1.0, 1.0]


def test_the_brevity_bonus_pulls_against_the_task():
    # the headline config's conflict, by construction: a bare number (no tags, so no format and
    # no correctness) earns more brevity than the correct tagged reply, 10x over its range
    from mrgrpo.train.presets import load_tokenizer

    suite = scaled_suite(base="math", scales={"length": 10}, length_thresholds=[0, 32], tokenizer=load_tokenizer("smollm2"))
    scores = _scores(suite)
    assert scores["length"][0] > scores["length"][1] + 2  # more than the whole weighted range of the other two
    weighted = [sum(w * scores[n][i] for n, w in zip(suite.names, suite.weights)) for i in range(len(REPLIES))]
    assert weighted[0] > weighted[1]  # GRPO's weighted total ranks the bare number first


def test_mistakes_are_one_line_config_errors():
    with pytest.raises(ConfigError, match=r"scales: unknown component\(s\) \['speed'\]"):
        scaled_suite(base="math", scales={"speed": 2})
    with pytest.raises(ConfigError, match="scales.length must be > 0"):
        scaled_suite(base="math", scales={"length": 0})
    with pytest.raises(UnknownNameError, match="nope"):
        scaled_suite(base="nope", scales={})


def test_none_stays_none():
    from mrgrpo.rewards.base import RewardComponent, RewardSuite, register_suite

    @register_suite("_test_partial")
    def partial() -> RewardSuite:
        return RewardSuite("_test_partial", (RewardComponent("a", (0.0, 1.0), lambda p, c, **k: [None, 0.5]),), (1.0,))

    (component,) = scaled_suite(base="_test_partial", scales={"a": 4}).components
    assert component(["", ""], ["x", "y"]) == [None, 2.0] and component.range == (0.0, 4.0)
