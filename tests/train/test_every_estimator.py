"""Every registered estimator on the TRL paths: MultiRewardGRPOTrainer, ``mrgrpo train`` (and the
engine of ``mrgrpo compare``), each compared with the core function on the same rewards.

Parametrized over ``mrgrpo.available_estimators()`` with each estimator's registered
``example_options``, so an estimator added later is covered with no edit here. Option values are
checked at construction (before GRPOTrainer builds anything), in ``mrgrpo train --check`` and in
``run_train`` before the model loads; a user's own ``@mrgrpo.register_estimator`` runs on TRL with
no other change.
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from typer.testing import CliRunner

import mrgrpo
from mrgrpo.errors import ConfigError
from mrgrpo.estimators import registry
from mrgrpo.train.config import validate_config
from mrgrpo.train.job import run_train
from mrgrpo.train.trainer import MultiRewardGRPOTrainer

from .conftest import estimator_config
from .test_trl_settings import GENERATIONS, STEPS, WEIGHTS, Reward, dataset, grpo_config, train  # noqa: F401

ESTIMATORS = mrgrpo.available_estimators()


def role_indices(spec) -> list[int]:
    named = []
    for role in spec.roles:
        value = spec.example_options.get(role)
        named += value if isinstance(value, list) else [] if value is None else [value]
    return named


def weights_for(spec, weights=WEIGHTS) -> list[float]:
    """The component weights, with 1 on the components the estimator's roles name (a role's
    component enters through its role: e.g. a cost through its multiplier)."""
    out = list(weights)
    for index in role_indices(spec):
        out[index] = 1.0
    return out


def options_for(spec, k: int) -> dict:
    options = dict(spec.example_options)
    if spec.needs_ranges:
        options["reward_ranges"] = [(0.0, 3.0)] * k
    return options


def replay(name, rewards_per_step, weights, options, group_size=GENERATIONS, signals=None):
    """What the core function gives on the same reward batches, carrying any state; an estimator
    with a feedback moves its state with the policy ``signals`` the trainer measured (one per step)."""
    spec = mrgrpo.get_estimator(name)
    state, out = None, []
    for step, rewards in enumerate(rewards_per_step):
        groups = torch.arange(rewards.shape[0]) // group_size
        advantages, new_state = mrgrpo.compute_advantages_with_state(rewards.double(), groups, name, weights, state=state, **options)
        if spec.feedback is not None:
            k = rewards.shape[1]
            w = registry.as_weights(weights, k, torch.device("cpu"))
            resolved = registry.validate_options(spec, options, k)
            new_state = registry.apply_feedback(
                spec, rewards.double(), registry.make_groups(groups, rewards.shape[0]), w, resolved, state, signals[step]
            )
        state = new_state
        out.append(advantages)
    return out, state


@pytest.fixture
def signals(monkeypatch):
    """The policy signals the trainer hands to an estimator's feedback, in order."""
    from mrgrpo.train import trainer as trainer_module

    seen = []
    original = trainer_module.apply_feedback

    def recording(spec, values, groups, weights, options, state, signal):
        seen.append(torch.as_tensor(signal).detach().double().clone())
        return original(spec, values, groups, weights, options, state, signal)

    monkeypatch.setattr(trainer_module, "apply_feedback", recording)
    return seen


@pytest.mark.parametrize("name", ESTIMATORS)
def test_every_estimator_trains_with_the_core_functions_advantages(name, dataset, tmp_path, signals):  # noqa: F811
    spec = mrgrpo.get_estimator(name)
    weights = weights_for(spec)
    args = grpo_config(tmp_path)
    args.reward_weights = weights if spec.uses_weights else None  # (one without weights refuses them)
    options = options_for(spec, 3)
    trainer = train(MultiRewardGRPOTrainer, dataset, args, estimator=name, estimator_options=options, diagnostics=False)
    used = weights if spec.uses_weights else None
    expected, state = replay(name, trainer.seen_rewards, used, options, signals=signals)
    assert len(signals) == (STEPS if spec.feedback is not None else 0)
    for step in range(STEPS):
        # TRL shuffles a generation batch before the loss sees it: compare as multisets
        torch.testing.assert_close(
            trainer.seen_advantages[step].sort().values, expected[step].float().sort().values, rtol=1e-5, atol=1e-5
        )
    if spec.feedback is not None:  # (float32 rewards in the trainer, float64 here)
        assert json.dumps(sorted(trainer.estimator_state)) == json.dumps(sorted(state))
        torch.testing.assert_close(torch.tensor(trainer.estimator_state["log_weights"]), torch.tensor(state["log_weights"]), atol=1e-6, rtol=0)
    else:
        assert trainer.estimator_state == state
    logged = [e for e in trainer.state.log_history if "loss" in e]
    if spec.stateful and state is not None:
        keys = {k for e in logged for k in e if k.startswith("mrgrpo/state/")}
        assert keys and all(any(k in e for k in keys) for e in logged)  # logged every step
        numeric = {f"mrgrpo/state/{k}" for k, v in state.items() if isinstance(v, (int, float))}
        assert numeric <= keys


def test_stateful_estimators_log_their_state_every_step(dataset, tmp_path):  # noqa: F811
    # (the EMA correlation: its step count and decay are the numeric entries)
    trainer = train(
        MultiRewardGRPOTrainer, dataset, grpo_config(tmp_path), estimator="corr_grpo", correlation_ema=0.5, diagnostics=False
    )
    logged = [e for e in trainer.state.log_history if "loss" in e]
    assert [e["mrgrpo/state/steps"] for e in logged] == [1.0, 2.0]
    assert all(e["mrgrpo/state/decay"] == 0.5 for e in logged)
    expected, state = replay("corr_grpo", trainer.seen_rewards, WEIGHTS, {"correlation_ema": 0.5})
    carried = trainer.correlation_state  # the old attribute still reads the state
    assert carried is trainer.estimator_state and carried["steps"] == state["steps"] == 2
    # (the trainer computes in float32, as its rewards come; the replay in float64)
    torch.testing.assert_close(torch.tensor(carried["correlation"]), torch.tensor(state["correlation"]), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(
    "name,options,message",
    [
        ("corr_grpo", {"shrinkage": 2.0}, "shrinkage must be a number in \\[0, 1\\]"),
        ("sa_mrpo", {"reward_ranges": [(0, 1)] * 2}, "reward_ranges must be 3 pairs"),
        ("sa_mrpo", {"reward_ranges": [(1, 0)] * 3}, "hi > lo"),
        ("sa_mrpo", {}, "needs reward_ranges"),  # reward functions without a `range`
        ("grpo", {"scale": "grup"}, "scale must be one of"),
        ("corr_grpo", {"correlation": [[1.0]], "pooling": "batch"}, "correlation must be a finite \\[K, K\\]"),
    ],
)
def test_a_bad_option_value_fails_at_construction_before_anything_is_built(name, options, message, tmp_path):
    # model=None: GRPOTrainer would fail on it, so reaching the check proves it runs first
    with pytest.raises(ConfigError, match=message):
        MultiRewardGRPOTrainer(
            model=None, reward_funcs=[Reward(i) for i in range(3)], args=grpo_config(tmp_path),
            estimator=name, estimator_options=options,
        )


def test_roles_take_the_reward_functions_names_at_construction(monkeypatch, tmp_path):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @mrgrpo.register_estimator("test_one_component", roles=("target",), example_options={"target": 0})
    def one(rewards, groups, weights, *, target):
        return rewards[:, target]

    with pytest.raises(ConfigError, match="'r7' is not a component; the components are \\['r0', 'r1', 'r2'\\]"):
        MultiRewardGRPOTrainer(
            model=None, reward_funcs=[Reward(i) for i in range(3)], args=grpo_config(tmp_path),
            estimator="test_one_component", estimator_options={"target": "r7"},
        )


def test_a_users_own_estimator_runs_on_trl_with_no_other_change(monkeypatch, dataset, tmp_path):  # noqa: F811
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @mrgrpo.register_estimator("test_user_total_rank", roles=("focus",), example_options={"focus": 0})
    def total_rank(rewards, groups, weights, *, focus, scale: float = 1.0):
        """A user's estimator: the focused component centered in its group, times scale."""
        return mrgrpo.compute_advantages(rewards[:, [focus]], groups, "dr_grpo") * scale

    trainer = train(
        MultiRewardGRPOTrainer, dataset, grpo_config(tmp_path), estimator="test_user_total_rank",
        estimator_options={"focus": "r2", "scale": 2.0}, diagnostics=False,
    )
    assert trainer.estimator_options == {"focus": 2, "scale": 2.0}  # the name resolved to its index
    for step in range(STEPS):
        rewards = trainer.seen_rewards[step].double()
        groups = torch.arange(rewards.shape[0]) // GENERATIONS
        want = 2.0 * mrgrpo.compute_advantages(rewards[:, [2]], groups, "dr_grpo")
        torch.testing.assert_close(trainer.seen_advantages[step].sort().values, want.float().sort().values, rtol=1e-5, atol=1e-5)


# ---- mrgrpo train (the engine of mrgrpo compare) --------------------------------------------------


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _job_config(name: str, **changes):
    data = estimator_config(name, max_steps=2, save_steps=2, **changes)
    names = list(data["rewards"]["weights"])  # the tiny preset's suite (math), in its order
    return data, names, [data["rewards"]["weights"][n] for n in names]


@pytest.mark.parametrize("name", ESTIMATORS)
def test_mrgrpo_train_runs_every_estimator_and_logs_the_core_functions_advantages(name, tmp_path, signals):
    spec = mrgrpo.get_estimator(name)
    data, names, weights = _job_config(name)
    config = validate_config(data)
    result = run_train(config, out=tmp_path / "run", quiet=True)
    assert result.steps == 2
    rollouts = _jsonl(tmp_path / "run" / "rollouts.jsonl")
    metrics = [m for m in _jsonl(tmp_path / "run" / "metrics.jsonl") if "mrgrpo/advantages/mean" in m]
    batches = []
    for step in (1, 2):
        rows = [r for r in rollouts if r["step"] == step]
        batches.append(torch.tensor([[float("nan") if r[n] is None else r[n] for n in names] for r in rows], dtype=torch.float64))
    options = dict(config.estimator_options)
    if spec.needs_ranges:
        from mrgrpo.rewards import get_suite

        options["reward_ranges"] = get_suite("math", **config.rewards.options).reward_ranges
    expected, state = replay(name, batches, weights if spec.uses_weights else None, options, signals=signals)
    for advantages, logged in zip(expected, metrics):
        a = advantages.float().double()
        assert logged["mrgrpo/advantages/mean"] == pytest.approx(float(a.mean()), abs=1e-5)
        assert logged["mrgrpo/advantages/abs_mean"] == pytest.approx(float(a.abs().mean()), abs=1e-5)
        assert logged["mrgrpo/advantages/min"] == pytest.approx(float(a.min()), abs=1e-5)
        assert logged["mrgrpo/advantages/max"] == pytest.approx(float(a.max()), abs=1e-5)
    saved = tmp_path / "run" / "checkpoint-2" / "mrgrpo_estimator_state.json"
    assert saved.is_file() == (state is not None)
    if state is not None and spec.feedback is not None:  # (float32 rewards in the run, float64 here)
        record = json.loads(saved.read_text())
        assert record["estimator"] == name and record["state"]["signal"] == "policy"
        torch.testing.assert_close(torch.tensor(record["state"]["log_weights"]), torch.tensor(state["log_weights"]), atol=1e-6, rtol=0)
    elif state is not None:
        assert json.loads(saved.read_text()) == {"estimator": name, "state": state}


@pytest.mark.parametrize("name", ESTIMATORS)
def test_mrgrpo_compare_accepts_every_estimator_with_its_example_options(name):
    """compare's label syntax -> the train config compare runs (option values checked there)."""
    from mrgrpo.experiments.compare import estimator_spec

    spec = mrgrpo.get_estimator(name)
    label = name + (f"({';'.join(f'{k}={json.dumps(v)}' for k, v in spec.example_options.items())})" if spec.example_options else "")
    parsed, options = estimator_spec(label)
    assert (parsed, options) == (name, spec.example_options)
    data, _, _ = _job_config(name)
    validate_config({**data, "estimator_options": options})


def test_a_bad_value_fails_in_train_check_and_before_the_model_loads(tmp_path, monkeypatch):
    from mrgrpo.cli import app

    path = tmp_path / "config.yaml"
    for options, message in [
        ({"shrinkage": 2.0}, "shrinkage must be a number in [0, 1]"),
        ({"pooling": "token"}, "pooling must be one of"),
    ]:
        path.write_text(yaml.safe_dump({"model": "tiny", "estimator": "corr_grpo", "estimator_options": options}))
        result = CliRunner().invoke(app, ["train", "-c", str(path), "--check"])
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
    # what only the suite knows (its number of components) fails in run_train before any model loads
    import mrgrpo.train.presets as presets

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr(presets, "load_model", no_model)
    data, _, _ = _job_config("sa_mrpo")
    data["estimator_options"] = {"reward_ranges": [[0, 1], [0, 1]]}
    with pytest.raises(ConfigError, match="reward_ranges must be 3 pairs"):
        run_train(validate_config(data), out=tmp_path / "run", quiet=True)
    data["estimator_options"] = {"reward_ranges": [[0, 1], [1, 1], [0, 1]]}
    with pytest.raises(ConfigError, match="hi > lo"):
        run_train(validate_config(data), out=tmp_path / "run2", quiet=True)
