import pytest

from mrgrpo.experiments import testbed
from mrgrpo.experiments.testbed import parse_answer


def test_parse_answer_prefers_the_tag():
    assert parse_answer("3 + 4 = 7. <answer>7</answer>") == 7
    assert parse_answer("3 - 9 = -6.") == -6
    assert parse_answer("no number") is None


def test_components_and_scale():
    suite = testbed.testbed_suite(scales={"low": 100})
    assert suite.names == ["correct", "format", "close", "low"]
    assert suite.reward_ranges[3] == (0.0, 100.0)
    completions = ["<answer>7</answer>", "4", "nothing"]
    answers = ["7", "7", "7"]
    values = {c.name: c(None, completions, answer=answers) for c in suite.components}
    assert values["correct"] == [1.0, 0.0, 0.0]
    assert values["format"] == [1.0, 0.0, 0.0]
    # close = 1 - |pred - ref| / 9: 1 for 7, 1 - 3/9 for 4, 0 without a number
    assert values["close"] == pytest.approx([1.0, 6 / 9, 0.0])
    # low = 100 * (18 - pred) / 27: answering lower than the reference earns more (the conflict)
    assert values["low"] == pytest.approx([100 * 11 / 27, 100 * 14 / 27, 0.0])


def test_unknown_scale_is_an_error():
    with pytest.raises(ValueError, match="unknown component"):
        testbed.testbed_suite(scales={"speed": 2})
