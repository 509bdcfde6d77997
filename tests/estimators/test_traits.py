"""Estimators carry their own traits, option checks and state; the adapters keep no name tables.

Every test here runs over ``mrgrpo.available_estimators()``, so an estimator added later is
covered without editing this file: its registered ``example_options`` (and ``[(0, 1)] * K`` for
one that ``needs_ranges``) are what it runs with.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import mrgrpo
from mrgrpo.errors import ConfigError
from mrgrpo.estimators import registry
from mrgrpo.estimators.registry import COMBINES, compute_advantages_with_state, validate_options

SRC = Path(mrgrpo.__file__).resolve().parent
K = 3


def example(name: str, k: int = K) -> dict:
    """The options an estimator runs with in these tests: its registered example, plus ranges."""
    spec = mrgrpo.get_estimator(name)
    options = dict(spec.example_options)
    if spec.needs_ranges:
        options["reward_ranges"] = [(0.0, 1.0)] * k
    return options


def batch(seed: int = 0, groups: int = 5, size: int = 4, k: int = K):
    rng = np.random.default_rng(seed)
    rewards = rng.integers(0, 5, size=(groups * size, k)) / 4.0
    ids = rng.permutation(np.repeat(np.arange(groups), size))
    return torch.from_numpy(rewards), torch.from_numpy(ids)


@pytest.mark.parametrize("name", mrgrpo.available_estimators())
def test_every_estimator_declares_coherent_traits_and_runs_with_its_example(name):
    spec = mrgrpo.get_estimator(name)
    assert spec.combine in COMBINES
    assert set(spec.roles) <= set(spec.options)
    assert not spec.needs_ranges or "reward_ranges" in spec.options
    assert set(spec.required) <= set(spec.example_options)
    json.dumps(spec.traits())  # plain data, as `mrgrpo estimators --json` prints it
    rewards, ids = batch()
    options = validate_options(name, example(name), K)
    advantages = mrgrpo.compute_advantages(rewards, ids, name, **options)
    assert advantages.shape == (rewards.shape[0],) and torch.isfinite(advantages).all()
    assert advantages.abs().sum() > 0


@pytest.mark.parametrize("name", mrgrpo.available_estimators())
def test_the_state_protocol_state_in_state_out_plain_json(name):
    spec = mrgrpo.get_estimator(name)
    rewards, ids = batch(1)
    options = example(name)
    if "correlation_ema" in spec.options:
        options["correlation_ema"] = 0.5
    first, state = compute_advantages_with_state(rewards, ids, name, **options)
    torch.testing.assert_close(first, mrgrpo.compute_advantages(rewards, ids, name, **options))
    if not spec.stateful:
        assert state is None
        with pytest.raises(ConfigError, match="carries no state"):
            compute_advantages_with_state(rewards, ids, name, state={}, **options)
        return
    assert isinstance(state, dict)
    assert json.loads(json.dumps(state, allow_nan=False)) == state  # plain JSON data
    frozen = json.dumps(state)
    rewards2, ids2 = batch(2)
    a1, s1 = compute_advantages_with_state(rewards2, ids2, name, state=state, **options)
    a2, s2 = compute_advantages_with_state(rewards2, ids2, name, state=json.loads(frozen), **options)
    assert json.dumps(state) == frozen  # the incoming state is not modified
    assert torch.equal(a1, a2) and s1 == s2  # pure: the same inputs give the same outputs
    assert s1 != state  # the state moved
    with pytest.raises(ConfigError, match="state is carried by the trainer"):
        mrgrpo.compute_advantages(rewards, ids, name, state=state, **options)


@pytest.mark.parametrize(
    "name,options,message",
    [
        ("corr_grpo", {"shrinkage": 2.0}, "shrinkage must be a number in \\[0, 1\\]"),
        ("corr_grpo", {"pooling": "token"}, "pooling must be one of"),
        ("corr_grpo", {"correlation_ema": 1.0}, "correlation_ema must be None or a decay"),
        ("corr_grpo", {"correlation_ema": 0.9, "pooling": "batch"}, "correlation_ema sets \\['pooling'\\] itself"),
        ("grpo", {"scale": "token"}, "scale must be one of"),
        ("gdpo", {"ddof": -1}, "ddof must be"),
        ("sa_mrpo", {}, "needs reward_ranges"),
        ("sa_mrpo", {"reward_ranges": [(0, 1)] * 2}, "3 pairs"),
        ("sa_mrpo", {"reward_ranges": [(1, 0)] * 3}, "hi > lo"),
        ("sa_mrpo", {"reward_ranges": [(0, 1)] * 3, "gamma": -1}, "gamma"),
        ("sa_corr_grpo", {"reward_ranges": [(0, 1)] * 3, "shrinkage": -0.5}, "shrinkage"),
        ("grpo", {"gamma": 1.0}, "has no option"),
    ],
)
def test_option_values_are_checked_without_data(name, options, message):
    with pytest.raises(ConfigError, match=message):
        validate_options(name, options, K)
    rewards, ids = batch()
    with pytest.raises(ConfigError, match=message):  # and compute_advantages runs the same check
        mrgrpo.compute_advantages(rewards, ids, name, **options)


def test_a_partial_check_waits_for_what_it_cannot_know():
    # a config read before its suite is built: no K, no names, ranges filled from the suite later
    validate_options("sa_mrpo", {"gamma": 1.0}, partial=True)
    validate_options("sa_mrpo", {"reward_ranges": [(0, 1)] * 5}, partial=True)  # any K
    with pytest.raises(ConfigError, match="hi > lo"):
        validate_options("sa_mrpo", {"reward_ranges": [(0, 1), (2, 2)]}, partial=True)
    with pytest.raises(ConfigError, match="shrinkage"):
        validate_options("corr_grpo", {"shrinkage": 2.0}, partial=True)


def _with_role_estimator(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    seen = []

    @mrgrpo.register_estimator("test_picks", roles=("target", "others"), example_options={"target": 0})
    def picks(rewards, groups, weights, *, target, others=None):
        seen.append((target, others))
        return rewards[:, target] - rewards[:, target].mean()

    return seen


def test_roles_name_components_by_index_or_name_and_arrive_as_indices(monkeypatch):
    seen = _with_role_estimator(monkeypatch)
    names = ["correct", "format", "length"]
    assert validate_options("test_picks", {"target": "length", "others": ["format", 0]}, component_names=names) == {
        "target": 2, "others": [1, 0],
    }
    with pytest.raises(ConfigError, match="'size' is not a component; the components are"):
        validate_options("test_picks", {"target": "size"}, component_names=names)
    with pytest.raises(ConfigError, match="target=3 is not a component index \\(0..2\\)"):
        validate_options("test_picks", {"target": 3}, 3)
    with pytest.raises(ConfigError, match="names a component twice"):
        validate_options("test_picks", {"target": 0, "others": [1, "format"]}, component_names=names)
    with pytest.raises(ConfigError, match="needs option\\(s\\) \\['target'\\], e.g. target=0"):
        validate_options("test_picks", {}, 3)
    rewards, ids = batch()
    with pytest.raises(ConfigError, match="give its 0-based index"):  # no names in compute_advantages
        mrgrpo.compute_advantages(rewards, ids, "test_picks", target="length")
    mrgrpo.compute_advantages(rewards, ids, "test_picks", target=2)
    assert seen[-1] == (2, None)


def test_registration_refuses_incoherent_traits(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    def fn(rewards, groups, weights, *, level):
        return rewards[:, 0]

    for traits, message in [
        ({"combine": "average"}, "combine must be one of"),
        ({"roles": ("missing",)}, "role 'missing' is not one of its options"),
        ({"needs_ranges": True}, "no reward_ranges option"),
        ({"scale_option": "scale"}, "scale_option 'scale' is not one of its options"),
        ({}, "required option\\(s\\) \\['level'\\] need a value in example_options"),
        ({"example_options": {"level": 1, "other": 2}}, "unknown option\\(s\\) \\['other'\\]"),
        ({"example_options": {"level": 1}, "trl_default": "sum_then_normalize"}, "already reproduces TRL's"),
    ]:
        with pytest.raises((TypeError, ValueError), match=message):
            mrgrpo.register_estimator("test_incoherent", **traits)(fn)

    def stateful(rewards, groups, weights, *, state={}):  # noqa: B006 - the mistake under test
        return rewards[:, 0], state

    with pytest.raises(TypeError, match="state parameter must default to None"):
        mrgrpo.register_estimator("test_bad_state")(stateful)


def test_a_stateful_estimator_must_return_plain_json(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @mrgrpo.register_estimator("test_tensor_state")
    def tensor_state(rewards, groups, weights, *, state=None):
        return rewards[:, 0], {"sum": rewards.sum()}  # a tensor: not JSON

    rewards, ids = batch()
    with pytest.raises(RuntimeError, match="not plain JSON data"):
        compute_advantages_with_state(rewards, ids, "test_tensor_state")


def test_the_trl_defaults_are_traits():
    assert registry.trl_default_estimator("sum_then_normalize") == "grpo"
    assert registry.trl_default_estimator("normalize_then_sum") == "gdpo"


def _string_literals(path: Path) -> set[str]:
    """String constants of a module, docstrings excluded (messages and keys count)."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.add(node.value)
    return found


#: The modules an estimator travels through (diagnostics.py names grpo and corr_grpo for the
#: scales it reports, train/config.py the default estimator: values, not tables).
ADAPTERS = [SRC / "train" / "trainer.py", *sorted((SRC / "integrations" / "verl").glob("*.py"))]


@pytest.mark.parametrize("path", ADAPTERS, ids=lambda p: str(p.relative_to(SRC)))
def test_the_adapters_keep_no_table_of_estimator_names(path):
    """Adding an estimator touches its module, docs page and tests: no adapter names one."""
    names = set(mrgrpo.available_estimators())
    named = {s for s in _string_literals(path) for n in names if s == n or s == f"mrgrpo_{n}"}
    assert not named, f"{path.name} names estimators {sorted(named)}: read the registry's traits instead"
