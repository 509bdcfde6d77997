"""RewardComponent, RewardSuite, conditioned rewards and the suite registry."""

import math

import pytest

from mrgrpo.rewards import base
from mrgrpo.rewards.base import (
    RewardComponent,
    RewardSuite,
    available_suites,
    completion_text,
    conditioned,
    get_suite,
    register_suite,
)


def constant(name, values, range_=(0.0, 1.0)):
    return RewardComponent(name, range_, lambda prompts, completions, **kw: list(values))


# ----------------------------------------------------------------------------- completion_text


def test_completion_text_reads_plain_and_conversational_completions():
    assert completion_text("<answer>4</answer>") == "<answer>4</answer>"
    assert completion_text([{"role": "assistant", "content": "<answer>4</answer>"}]) == "<answer>4</answer>"
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]) == "ab"
    assert completion_text({"role": "assistant", "content": None}) == ""
    with pytest.raises(TypeError):
        completion_text(3)


# ----------------------------------------------------------------------------- RewardComponent


def test_a_component_is_a_trl_reward_function_named_after_itself():
    component = constant("format", [1.0, 0.0])
    assert component.__name__ == "format"
    assert component(["p", "p"], ["a", "b"], answer=["x", "y"], trainer_state=None) == [1.0, 0.0]


def test_none_and_nan_mean_not_scored():
    assert constant("c", [None, math.nan, 0.5])([0] * 3, [0] * 3) == [None, None, 0.5]


def test_a_value_outside_the_declared_range_raises_with_the_component_name():
    with pytest.raises(ValueError, match="'length'.*1.5.*outside"):
        constant("length", [0.2, 1.5])([0, 0], [0, 0])


def test_a_component_must_return_one_value_per_completion():
    with pytest.raises(ValueError, match="'c' returned 1 values for 2"):
        constant("c", [1.0])([0, 0], [0, 0])


@pytest.mark.parametrize("bad", [(1.0, 1.0), (1.0, 0.0), (0.0, math.inf), (math.nan, 1.0)])
def test_a_range_must_be_finite_and_increasing(bad):
    with pytest.raises(ValueError, match="range"):
        constant("c", [], bad)


# ----------------------------------------------------------------------------- RewardSuite


def test_a_suite_keeps_order_default_weights_and_reward_ranges():
    suite = RewardSuite("s", (constant("a", []), constant("b", [], (-1.0, 3.0))))
    assert suite.names == ["a", "b"]
    assert suite.weights == (1.0, 1.0)
    assert suite.reward_ranges == [(0.0, 1.0), (-1.0, 3.0)]


def test_a_suite_rejects_duplicates_empty_and_mismatched_weights():
    with pytest.raises(ValueError, match="duplicate"):
        RewardSuite("s", (constant("a", []), constant("a", [])))
    with pytest.raises(ValueError, match="no components"):
        RewardSuite("s", ())
    with pytest.raises(ValueError, match="1 weights for 2"):
        RewardSuite("s", (constant("a", []), constant("b", [])), (1.0,))


def test_select_and_with_weights():
    suite = RewardSuite("s", (constant("a", []), constant("b", []), constant("c", [])), (1.0, 2.0, 3.0))
    picked = suite.select(["c", "a"])
    assert picked.names == ["c", "a"] and picked.weights == (3.0, 1.0)
    assert suite.select(["b"], weights=[0.5]).weights == (0.5,)
    assert suite.with_weights({"b": 0.0}).weights == (1.0, 0.0, 3.0)
    assert suite.with_weights([4, 5, 6]).weights == (4.0, 5.0, 6.0)
    with pytest.raises(ValueError, match="no component"):
        suite.select(["z"])
    with pytest.raises(ValueError, match="no component"):
        suite.with_weights({"z": 1.0})


# ----------------------------------------------------------------------------- conditioned


def test_conditioned_grants_the_component_only_where_the_condition_reaches_the_threshold():
    length = constant("length", [0.9, 0.9, 0.9, None, 0.7])
    correct = constant("correctness", [1.0, 0.99, 0.0, 1.0, None])
    gated = conditioned(length, on=correct, threshold=1.0)
    assert gated.name == "length_if_correctness"
    assert gated.range == length.range
    # granted | below threshold -> lower bound | failed -> lower bound | unscored -> None | gate unscored -> None
    assert gated([0] * 5, [0] * 5) == [0.9, 0.0, 0.0, None, None]


def test_conditioned_falls_back_to_the_component_lower_bound_and_accepts_a_name():
    penalty = constant("penalty", [2.0, 2.0], (-1.0, 2.0))
    gate = constant("gate", [0.5, 0.4])
    gated = conditioned(penalty, on=gate, threshold=0.5, name="penalty")
    assert gated.name == "penalty"
    assert gated([0, 0], [0, 0]) == [2.0, -1.0]


# ----------------------------------------------------------------------------- registry


def test_builtin_suites_are_found_by_name():
    assert {"math", "tool_call"} <= set(available_suites())
    assert get_suite("math").name == "math"
    assert get_suite("tool_call").name == "tool_call"
    with pytest.raises(ValueError, match="unknown reward suite 'nope'"):
        get_suite("nope")


def test_registering_a_second_factory_under_a_taken_name_raises(monkeypatch):
    monkeypatch.setattr(base, "_SUITES", dict(base._SUITES))

    @register_suite("test_only")
    def factory(scale: float = 1.0):
        return RewardSuite("test_only", (constant("a", []),), (scale,))

    assert register_suite("test_only")(factory) is factory  # re-registering the same factory is fine
    assert get_suite("test_only", scale=2.0).weights == (2.0,)
    with pytest.raises(ValueError, match="already registered"):
        register_suite("test_only")(lambda: None)


def test_suites_declare_the_columns_they_read_and_the_suites_they_forward_to(monkeypatch):
    from mrgrpo.errors import UnknownNameError
    from mrgrpo.rewards import base, suite_info, suites_with_option

    assert suite_info("math").columns == ("answer",) and suite_info("agent").columns == ("suite", "user_task", "injections")
    sa = suite_info("code_sa_mrpo")  # takes **options and forwards them to `code`: code's options are its own
    assert sa.forwards == ("code",) and not sa.open_ended
    assert set(suite_info("code").option_names) <= set(sa.option_names)
    assert "length_thresholds" in suite_info("math").option_names and suites_with_option("length_thresholds") == ["math"]
    with pytest.raises(UnknownNameError, match="rewards.suite: unknown reward suite 'nope'"):
        suite_info("nope", where="rewards.suite")
    monkeypatch.setattr(base, "_SUITES", dict(base._SUITES))
    monkeypatch.setattr(base, "_DECLARED", dict(base._DECLARED))

    @register_suite("test_open", columns=("x",))
    def open_suite(tokenizer=None, **options):
        return get_suite("math")

    info = suite_info("test_open")
    assert info.open_ended and info.takes_tokenizer and info.columns == ("x",) and info.option_names == ("tokenizer",)
