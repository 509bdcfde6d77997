"""Binding an estimator to a run (mrgrpo.estimators.binding): one validated, immutable object.

Parametrized over the registry where a check holds for every estimator, so an estimator
registered later, a user's included, is covered with no edit here.
"""

from __future__ import annotations

import pytest
import torch

import mrgrpo
from mrgrpo.errors import ConfigError, UnknownNameError
from mrgrpo.estimators import registry
from mrgrpo.estimators.binding import Binding, Host, bind

NAMES = ["correct", "format", "length"]


def example(name):
    """The registered example options, and ranges for one that needs them."""
    spec = mrgrpo.get_estimator(name)
    ranges = [(0.0, 1.0)] * len(NAMES) if spec.needs_ranges else None
    return spec, dict(spec.example_options), ranges


@pytest.mark.parametrize("name", mrgrpo.available_estimators())
def test_every_estimator_binds_and_computes_what_the_core_computes(name):
    spec, options, ranges = example(name)
    binding = bind(spec, options, names=NAMES, ranges=ranges)
    assert isinstance(binding, Binding) and binding.name == name and binding.num_components == 3
    rewards = torch.rand(8, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    groups = torch.arange(8) // 4
    if ranges is not None:
        options["reward_ranges"] = ranges
    expected = mrgrpo.compute_advantages_with_state(rewards, groups, name, **options)
    got = binding.compute(rewards, groups)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1]


@pytest.mark.parametrize("name", mrgrpo.available_estimators())
def test_a_binding_is_immutable(name):
    spec, options, ranges = example(name)
    binding = bind(spec, options, names=NAMES, ranges=ranges)
    with pytest.raises(AttributeError):
        binding.options = {}
    with pytest.raises(TypeError):
        binding.options["x"] = 1
    copy = binding.call_options()
    copy["x"] = 1  # a caller's copy, not the binding's
    assert "x" not in binding.options


@pytest.mark.parametrize("name", mrgrpo.available_estimators())
def test_an_unknown_option_is_refused_with_the_registrys_words(name):
    spec, options, ranges = example(name)
    with pytest.raises(ConfigError, match="has no option\\(s\\) \\['no_such_option'\\]") as caught:
        bind(spec, {**options, "no_such_option": 1}, names=NAMES, ranges=ranges)
    assert "inspect._empty" not in str(caught.value)
    if spec.required:
        assert "<required>" in str(caught.value)


def test_an_unknown_estimator_is_refused():
    with pytest.raises(UnknownNameError, match="unknown estimator 'grop'"):
        bind("grop")


@pytest.mark.parametrize(
    "name,options,weights,message",
    [
        ("ddca", {}, [1.0, 0.5, 0.5], r"ddca does not use the weights of component\(s\) \[1, 2\]"),
        ("constrained_grpo", {"constraints": ["length"], "limits": [0.1]}, [1.0, 1.0, 2.0],
         r"constrained_grpo does not use the weights of component\(s\) \[2\]"),
        ("grpo", {}, [1.0, 0.5], "2 weights for 3 reward components"),
        ("grpo", {}, [1.0, float("nan"), 1.0], "weights must be finite"),
    ],
)
def test_weights_an_estimator_cannot_use_are_refused(name, options, weights, message):
    with pytest.raises(ConfigError, match=message):
        bind(name, options, names=NAMES, weights=weights, host=Host(weights_from="rewards.weights"))


def test_ddca_accepts_weights_of_one_and_zero_and_a_suites_default_weights():
    assert bind("ddca", {}, names=NAMES, weights=[1.0, 0.0, 1.0]).estimator_weights is None
    # a suite's defaults are not a setting: an estimator that does not use weights runs without them
    assert bind("ddca", {}, names=NAMES, weights=[1.0, 0.5, 0.5], default_weights=True).weights is None
    with pytest.raises(ConfigError, match="in rewards.weights"):  # the message names the setting
        bind("ddca", {}, names=NAMES, weights=[1.0, 0.5, 0.5], host=Host(weights_from="rewards.weights"))


def test_ranges_are_filled_for_an_estimator_that_needs_them_and_refused_when_missing():
    binding = bind("sa_mrpo", {}, names=NAMES, ranges=[(0, 1), (0, 1), (0, 10)])
    assert binding.options["reward_ranges"] == [(0.0, 1.0), (0.0, 1.0), (0.0, 10.0)]
    assert "reward_ranges" not in bind("grpo", {}, names=NAMES, ranges=[(0, 1)] * 3).options
    with pytest.raises(ConfigError, match="needs reward_ranges.*give --ranges"):
        bind("sa_mrpo", {}, names=NAMES, host=Host(ranges_fix="give --ranges lo:hi per component"))
    with pytest.raises(ConfigError, match="reward_ranges has 2 entries for 3 components"):
        bind("sa_mrpo", {}, names=NAMES, ranges=[(0, 1)] * 2)


def test_roles_are_resolved_by_name():
    binding = bind("ddca", {"correctness": "correct", "length": "length"}, names=NAMES)
    assert binding.options == {"correctness": 0, "length": 2}
    with pytest.raises(ConfigError, match="'size' is not a component"):
        bind("ddca", {"length": "size"}, names=NAMES)


def test_a_resumed_state_that_does_not_fit_is_refused_at_bind():
    options = {"constraints": ["format", "length"], "limits": [0.1, 0.1]}
    binding = bind("constrained_grpo", options, names=NAMES)
    _, state = binding.compute(torch.rand(8, 3, dtype=torch.float64), torch.arange(8) // 4)
    resumed = bind("constrained_grpo", options, names=NAMES, state=state)
    assert resumed.initial_state() == state and resumed.initial_state() is not resumed.state
    one = {**state, "multipliers": state["multipliers"][:1]}
    with pytest.raises(ConfigError, match="ck/x.json: the saved estimator state does not fit this run: .*1 multipliers"):
        bind("constrained_grpo", options, names=NAMES, state=one, state_from="ck/x.json")
    with pytest.raises(ConfigError, match="carries no state"):
        bind("grpo", {}, names=NAMES, state=state)
    with pytest.raises(ConfigError, match="state is for 3 components"):
        ema = bind("corr_grpo", {}, names=NAMES, correlation_ema=0.5)
        _, smoothed = ema.compute(torch.rand(8, 3, dtype=torch.float64), torch.arange(8) // 4)
        bind("corr_grpo", {}, names=NAMES[:2], correlation_ema=0.5, state=smoothed)


def test_host_settings_are_mapped_or_refused_never_replaced():
    trl = Host("trl", scale="batch")
    assert bind("grpo", {}, names=NAMES, host=trl).options == {"scale": "batch"}
    assert bind(None, {}, names=NAMES, host=Host("trl", aggregation="normalize_then_sum")).name == "gdpo"
    with pytest.raises(ConfigError, match="contradicts estimator_options scale='none'"):
        bind("grpo", {"scale": "none"}, names=NAMES, host=trl)
    verl = Host("verl", scale="none", eps=1e-6, prefix="mrgrpo_")
    assert bind("gdpo", {}, names=NAMES, host=Host("verl", eps=1e-6)).options == {"eps": 1e-6}
    with pytest.raises(ConfigError, match="has no meaning for mrgrpo_gdpo"):
        bind("gdpo", {}, names=NAMES, host=verl)
    assert bind("gdpo", {}, names=NAMES, host=Host("verl", normalization="token")).options == {"batch_norm": False}


def test_a_partial_binding_checks_values_without_the_components():
    bind("sa_mrpo", {"gamma": 1.0}, partial=True)  # ranges come with the suite
    bind("ddca", {"correctness": "correct"}, partial=True)  # names resolved with the suite
    with pytest.raises(ConfigError, match="shrinkage must be a number"):
        bind("corr_grpo", {"shrinkage": 2.0}, partial=True)


def test_a_users_estimator_is_bound_with_its_own_checks_run_by_the_dry_step():
    @mrgrpo.register_estimator("test_binding_user", roles=("focus",))
    def user(rewards, groups, weights, *, focus=0, scale=1.0, state=None):
        if not scale > 0:
            raise ValueError("test_binding_user: scale must be > 0")
        if state is not None and len(state["seen"]) != rewards.shape[1]:
            raise ValueError("test_binding_user: the state is for another number of components")
        return rewards[:, focus] * scale, {"seen": [1.0] * rewards.shape[1]}

    try:
        binding = bind("test_binding_user", {"focus": "length"}, names=NAMES)
        assert binding.options == {"focus": 2} and binding.spec.stateful
        with pytest.raises(ConfigError, match="scale must be > 0"):
            bind("test_binding_user", {"scale": -1.0}, names=NAMES)
        with pytest.raises(ConfigError, match="does not fit this run: .*another number of components"):
            bind("test_binding_user", {}, names=NAMES, state={"seen": [1.0]})
    finally:
        registry._REGISTRY.pop("test_binding_user", None)
