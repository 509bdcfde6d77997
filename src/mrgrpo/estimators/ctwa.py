"""CTWA: scalarization weights that adapt from the policy update (arXiv 2602.06869).

CTWA is not an advantage formula but a rule that moves the weights ``w_k`` of the components
from what the policy update did. The step's advantages come from a base estimator on
``T_i = Σ_k w_k r_ik`` with the *current* weights; after the policy update the trainer measures,
per rollout, the **policy signal** ``s_i = mean_t Â_i·ρ_it·1[token t unclipped]`` (``ρ`` against
the policy after the update, the clip test as in the PPO loss); the covariance of each raw
component with ``s`` inside the groups says which objectives the update actually pushed, and
the log-weights of the objectives pushed less than their target rise::

    v_k     = mean over groups of ≥ 2 rollouts of cov_g(r_k, s)     (or the correlation)
    ema_k   = v_k on the first update, else (1 − τ)·ema_k + τ·v_k
    deficit = max(target_k − ema_k, 0), 0 where mean_batch r_k >= obj_target_k (the gate)
    log w_k ← log w_k + lr·deficit_k                                 (never renormalized)

The weights a step uses are those before its own update: step t's signal moves step t+1's
weights. The state (log-weights, EMA) is the registry's state protocol; the signal reaches the
state through the estimator's ``feedback`` (:func:`ctwa_feedback`), which trainers call after
the update (:func:`mrgrpo.estimators.registry.apply_feedback`). Without a trainer (one rollout
file, :func:`mrgrpo.compute_advantages_with_state`) there is no policy update to measure: the
estimator then takes the on-policy limit ``ρ = 1``, every token unclipped, where ``s = Â``, and
records ``"signal": "on_policy_limit"`` in the state it returns.

Source: the official code, github yining610/ctwa (``CovarianceRayPPOTrainer`` in
``verl/trainer/ppo/ray_trainer_covariance.py``, ``compute_ctwa_stats`` in
``verl/workers/actor/core_algos.py``, defaults from ``ppo_trainer_multiobjective.yaml``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from mrgrpo.errors import ConfigError, InputError
from mrgrpo.estimators._checks import check_bool
from mrgrpo.estimators._multi import choice_option, given, number_option
from mrgrpo.estimators.groups import Groups, column_sums64, group_moments, has_nan
from mrgrpo.estimators.grpo import grpo
from mrgrpo.estimators.registry import SIGNAL_AGGREGATIONS, register_estimator

NAME = "ctwa"
BASES = ("reinforce_pp", "grpo")
#: The signal CTWA asks the trainer for (see :data:`mrgrpo.estimators.registry.SIGNALS`).
SIGNAL = "clipped_ratio_advantage"
#: The source's defaults for its three objectives, accuracy first (``ppo_trainer_multiobjective.yaml``:
#: ``cov_targets [0.1, 0.05, 0.05]``, ``obj_targets [1.0, 0.95, 0.95]``): the first component's
#: value and the others' (the options' ``None``, for any K).
DEFAULT_COV_TARGETS = (0.1, 0.05)
DEFAULT_OBJ_TARGETS = (1.0, 0.95)
#: A rollout whose ``|s|`` exceeds this many times the batch's median ``|s|`` is left out.
OUTLIER_FACTOR = 100.0
#: A group's correlation counts where ``std(r_k)·std(s)`` exceeds this (the source's ``eps``).
CORR_EPS = 1e-8
#: ``reinforce_pp`` whitens by ``sqrt(var + WHITEN_EPS)`` (verl's ``masked_whiten``).
WHITEN_EPS = 1e-8
#: ``grpo`` base: the group z-score's eps (verl's GRPO, which the source runs on).
GRPO_EPS = 1e-6
#: Initial weights are clamped to at least this before the logarithm (as the source).
WEIGHT_FLOOR = 1e-8


def per_component(value: Any, k: int | None, option: str) -> list[float] | None:
    """A number (for every component) or one number per component, as ``k`` floats; ``None``:
    the official config's (:data:`DEFAULT_COV_TARGETS`, :data:`DEFAULT_OBJ_TARGETS`: its first
    value for component 0, its second for the others). ``k=None``: check the values only."""
    if value is None:
        first, rest = DEFAULT_COV_TARGETS if option == "cov_targets" else DEFAULT_OBJ_TARGETS
        return None if k is None else [first] + [rest] * (k - 1)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = number_option(value, option, NAME)
        return None if k is None else [number] * k
    if isinstance(value, Tensor):
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f"{NAME}: {option} must be a number or one number per component, got {value!r}")
    numbers = [number_option(v, option, NAME) for v in value]
    if k is not None and len(numbers) != k:
        raise ConfigError(
            f"{NAME}: {option} has {len(numbers)} entries but there are {k} components: "
            "give one number for all, or one per component"
        )
    return numbers


def _validate(options: dict, num_components: int | None) -> None:
    given(options, {
        "base": lambda v: choice_option(v, "base", BASES, NAME),
        "cov_targets": lambda v: per_component(v, num_components, "cov_targets"),
        "obj_targets": lambda v: per_component(v, num_components, "obj_targets"),
        "use_corr_target": lambda v: check_bool(v, "use_corr_target", NAME),
        "gate_by_obj_targets": lambda v: check_bool(v, "gate_by_obj_targets", NAME),
        "ema_tau": lambda v: number_option(v, "ema_tau", NAME, low=0.0, high=1.0),
        "lr": lambda v: number_option(v, "lr", NAME, low=0.0),
        "global_metrics": lambda v: check_bool(v, "global_metrics", NAME),
        "w_agg": lambda v: choice_option(v, "w_agg", SIGNAL_AGGREGATIONS, NAME),
    })


def initial_log_weights(weights: Tensor) -> list[float]:
    """``log max(w_k / Σ w, 1e-8)`` (float64): the run's weights normalized to sum to 1 (the
    source requires that they do), floored as the source floors them. Weights must be ``>= 0``
    with at least one ``> 0`` (a :class:`ConfigError`)."""
    values = [float(v) for v in weights.tolist()]
    if any(v < 0 for v in values) or not any(v > 0 for v in values):
        raise ConfigError(f"{NAME}: weights must be >= 0 with at least one > 0 (they start the log-weights), got {values}")
    total = math.fsum(values)
    return [math.log(max(v / total, WEIGHT_FLOOR)) for v in values]


def base_advantages(rewards: Tensor, groups: Groups, weights: Tensor, base: str) -> Tensor:
    """The step's advantages ``[N]`` from ``T_i = Σ_k w_k r_ik`` (NaN entries 0; a rollout with
    every component NaN gets 0 and is left out of the statistics).

    ``reinforce_pp`` (the official script's ``adv_estimator``): ``(T − mean)/sqrt(var + 1e-8)``
    over the scored rollouts, ``var`` unbiased (verl's ``masked_whiten``, per rollout here);
    ``grpo``: the group z-score ``(T − mean_g T)/(std_g T + 1e-6)`` (unbiased; verl's eps)."""
    if base == "grpo":
        return grpo(rewards, groups, weights.to(torch.float64), eps=GRPO_EPS)
    w = weights.to(rewards.dtype)
    if not has_nan(rewards):  # every rollout scored: no masks
        total = (rewards @ w).to(torch.float64)
        if total.numel() < 2:
            return torch.zeros_like(total).to(rewards.dtype)
        centered = total - total.mean()
        var = centered.square().sum() / (total.numel() - 1)
        return (centered / torch.sqrt(var + WHITEN_EPS)).to(rewards.dtype)
    present = ~torch.isnan(rewards)
    total = torch.where(present, rewards, torch.zeros_like(rewards)) @ w
    scored = present.any(dim=1)
    kept = total[scored].to(torch.float64)
    out = torch.zeros(total.shape[0], dtype=torch.float64, device=total.device)
    if kept.numel():
        mean = kept.mean()
        var = ((kept - mean) ** 2).sum() / (kept.numel() - 1) if kept.numel() > 1 else kept.new_zeros(())
        out[scored] = (kept - mean) / torch.sqrt(var + WHITEN_EPS)
    return out.to(rewards.dtype)


def signal_statistics(rewards: Tensor, groups: Groups, signal: Tensor, global_metrics: bool = False) -> dict[str, Any]:
    """The source's per-component statistics of one batch (``compute_ctwa_stats``), in float64:

    * rollouts with a non-finite ``s``, or ``|s| > 100·median|s|`` (median over the finite
      ``|s|``, numpy's: the mean of the two middle values for an even count; no cut when it
      is 0), are left out;
    * per group and component, over the kept rollouts that scored it (at least two): the
      population covariance ``mean((r − r̄)(s − s̄))`` and correlation ``cov/(std_r·std_s)``
      (population stds; counted only where ``std_r·std_s > 1e-8``);
    * ``cov`` averaged over those groups, ``corr`` over the groups where it counted (0 where
      none did); ``objective_mean`` the batch mean of each raw component over its scored
      entries (all rollouts; NaN where none);
    * ``global_metrics=True`` (the source's pooled mode): the same groups' centred products
      pooled instead of averaged, ``cov = Σ (r − r̄_g)(s − s̄_g) / n`` and
      ``corr = cov / (sqrt(Σ (r − r̄_g)²/n) · sqrt(Σ (s − s̄_g)²/n))`` (0 where that product is
      ``<= 1e-8``), ``n`` the rows of those groups, per component.

    Returns plain floats and lists: ``cov``, ``corr``, ``objective_mean`` ``[K]``, ``kept``,
    ``groups`` (the number of groups of at least two kept rollouts)."""
    s = signal.to(device=rewards.device, dtype=torch.float64)
    kept = _kept(s)
    if not global_metrics and bool(kept.all()) and not has_nan(rewards):
        fast = _dense_statistics(rewards, groups, s)
        if fast is not None:
            return fast
    r = rewards.to(torch.float64)
    present = ~torch.isnan(r) & kept.unsqueeze(1)  # [N, K]
    weight = present.to(torch.float64)
    u = torch.where(present, r, torch.zeros_like(r))
    v = torch.where(kept, s, torch.zeros_like(s)).unsqueeze(1) * weight  # s on the rows entering k
    count = groups.sum(weight)  # [G, K]
    safe = count.clamp(min=1.0)
    u_mean, v_mean = groups.sum(u) / safe, groups.sum(v) / safe
    du = (u - groups.gather(u_mean)) * weight
    dv = (v - groups.gather(v_mean)) * weight
    cov = groups.sum(du * dv) / safe
    std_u = (groups.sum(du * du) / safe).sqrt()
    std_v = (groups.sum(dv * dv) / safe).sqrt()
    enough = count >= 2
    denominator = std_u * std_v
    valid = enough & (denominator > CORR_EPS)
    corr = torch.where(valid, cov / torch.where(valid, denominator, torch.ones_like(denominator)), torch.zeros_like(cov))
    if global_metrics:
        pooled = enough.to(torch.float64)
        rows = (count * pooled).sum(dim=0)  # [K]
        per_row = rows.clamp(min=1.0)
        cov_mean = (groups.sum(du * dv) * pooled).sum(dim=0) / per_row
        spread = ((groups.sum(du * du) * pooled).sum(dim=0) / per_row).sqrt() * (
            (groups.sum(dv * dv) * pooled).sum(dim=0) / per_row).sqrt()
        counted = (rows > 0) & (spread > CORR_EPS)
        corr_mean = torch.where(counted, cov_mean / torch.where(counted, spread, torch.ones_like(spread)),
                                torch.zeros_like(cov_mean))
    else:
        groups_k = enough.sum(dim=0).to(torch.float64)
        cov_mean = torch.where(enough, cov, torch.zeros_like(cov)).sum(dim=0) / groups_k.clamp(min=1.0)
        corr_count = valid.sum(dim=0).to(torch.float64)
        corr_mean = corr.sum(dim=0) / corr_count.clamp(min=1.0)
    scored = ~torch.isnan(r)
    scored_count = scored.sum(dim=0)
    objective = torch.where(scored, r, torch.zeros_like(r)).sum(dim=0) / scored_count.clamp(min=1)
    return {
        "cov": cov_mean.tolist(),
        "corr": corr_mean.tolist(),
        "objective_mean": [float(x) if c else math.nan for x, c in zip(objective.tolist(), scored_count.tolist())],
        "kept": int(kept.sum()),
        "groups": int(enough.any(dim=1).sum()),
    }


def _kept(s: Tensor) -> Tensor:
    """``[N]`` bool: finite and ``|s| <= 100·median|s|`` (median over the finite ``|s|``; no cut
    where it is 0). The median is only selected where it can matter: when at least
    ``m//2 + 1`` of the ``m`` finite ``|s|`` are ``>= max|s| / 100`` (with a margin for rounding),
    both middle values are, so the median is, and nothing is cut."""
    magnitude = s.abs()
    finite = torch.isfinite(s)
    values = magnitude if bool(finite.all()) else magnitude[finite]
    m = values.numel()
    if m == 0:
        return finite
    largest = float(values.max())
    if largest == 0.0:
        return finite  # (median 0: no cut)
    bound = largest / OUTLIER_FACTOR * (1.0 + 1e-12)
    if int((values >= bound).sum()) >= m // 2 + 1:
        return finite
    median = _median(values)
    return finite & (magnitude <= OUTLIER_FACTOR * median) if median > 0 else finite


def _median(values: Tensor) -> float:
    """numpy's median of a 1-D tensor (the mean of the two middle values for an even count; 0
    for none), by selection instead of a sort."""
    m = values.numel()
    if m == 0:
        return 0.0
    upper = float(values.kthvalue(m // 2 + 1).values)
    return upper if m % 2 else (float(values.kthvalue(m // 2).values) + upper) / 2


def _dense_statistics(r: Tensor, groups: Groups, s: Tensor) -> dict[str, Any] | None:
    """:func:`signal_statistics` where every rollout is kept and scored every component (the
    common case), per-group averaged: the rows entering each component are the same, so the
    signal is centred once (one column) and the components' within-group moments come from the
    estimators' grouped two-pass moments (:func:`~mrgrpo.estimators.groups.group_moments`) in
    the rewards' dtype (float32 rewards: float32, as gdpo's z-scores; the source's statistics
    are numpy float32 too), the per-group statistics then in float64. ``None`` where those
    moments had to be rescaled (extreme magnitudes): the general path."""
    moments_r = group_moments(r, groups)
    moments_s = group_moments(s.to(r.dtype).unsqueeze(1), groups)
    if moments_r.scale is not None or moments_s.scale is not None:
        return None
    # per-group sums as [K, G] (the columns' statistics along the last axis; one transpose of the
    # [G, K] block layout's few numbers, none for the index layout's)
    cross = _per_column(groups, groups.total(moments_r.centered * moments_s.centered))  # Σ (r − r̄)(s − s̄)
    squares_r = _per_column(groups, moments_r.sum_sq)
    squares_s = _per_column(groups, moments_s.sum_sq)  # [1, G]
    sizes = groups.sizes.to(torch.float64)  # [G]: every row kept and scored
    enough = sizes >= 2
    share = torch.where(enough, 1.0 / sizes.clamp(min=1.0), torch.zeros_like(sizes))  # 1/n over the groups that count
    cov_mean = (cross @ share) / max(int(enough.sum()), 1)
    # corr = cov / (std_r·std_s) = Σ cross / (sqrt(Σ squares_r)·sqrt(Σ squares_s)); counted where std_r·std_s > eps
    spread = squares_r.sqrt() * squares_s.sqrt()
    valid = enough & (spread * share > CORR_EPS)
    corr = torch.where(valid, cross / torch.where(valid, spread, torch.ones_like(spread)), torch.zeros_like(cross))
    corr_mean = corr.sum(dim=1) / valid.sum(dim=1).to(torch.float64).clamp(min=1.0)
    objective = column_sums64(r) / r.shape[0]
    return {
        "cov": cov_mean.tolist(),
        "corr": corr_mean.tolist(),
        "objective_mean": objective.tolist(),
        "kept": r.shape[0],
        "groups": int(enough.sum()),
    }


def _per_column(groups: Groups, per_group: Tensor) -> Tensor:
    """A per-group layout statistic as ``[C, num_groups]`` float64."""
    flat = per_group.squeeze(1).T if groups.block_size is not None else per_group
    return flat.to(torch.float64)


def update_state(
    log_weights: list[float], ema: list[float] | None, statistics: dict[str, Any], cov_targets: list[float],
    obj_targets: list[float], use_corr_target: bool, gate_by_obj_targets: bool, ema_tau: float, lr: float,
) -> tuple[list[float], list[float], list[float]]:
    """One CTWA update (the source's ``_ctwa_update_weights_from_metrics``), pure:
    ``v`` = ``statistics["corr"]`` or ``["cov"]``; ``ema = v`` on the first update (``ema is
    None``), else ``(1 − τ)·ema + τ·v``; ``deficit_k = max(target_k − ema_k, 0)``, set to 0 when
    ``gate_by_obj_targets`` and the batch mean of component k is ``>= obj_target_k``;
    ``log w_k + lr·deficit_k``. Returns ``(log_weights, ema, deficit)``."""
    v = statistics["corr" if use_corr_target else "cov"]
    new_ema = list(v) if ema is None else [(1.0 - ema_tau) * e + ema_tau * x for e, x in zip(ema, v)]
    deficit = []
    for k, (target, value) in enumerate(zip(cov_targets, new_ema)):
        mean = statistics["objective_mean"][k]
        gated = gate_by_obj_targets and not math.isnan(mean) and mean >= obj_targets[k]
        deficit.append(0.0 if gated else max(target - value, 0.0))
    return [lw + lr * d for lw, d in zip(log_weights, deficit)], new_ema, deficit


def _incoming(state: Any, weights: Tensor) -> tuple[list[float], list[float] | None, int]:
    """The log-weights, EMA and update count of the incoming state (the run's weights, no
    EMA and 0 for ``None``)."""
    k = weights.numel()
    if state is None:
        return initial_log_weights(weights), None, 0
    log_weights = state.get("log_weights") if isinstance(state, dict) else None
    ema = state.get("ema") if isinstance(state, dict) else None
    if not isinstance(log_weights, list) or len(log_weights) != k or not (ema is None or (isinstance(ema, list) and len(ema) == k)):
        raise ConfigError(
            f"{NAME}: the state does not hold {k} log-weights and an EMA of {k} values (or none): keep the "
            "components of the run that saved it, or start without its state"
        )
    numbers = [number_option(v, "state log_weights", NAME) for v in log_weights]
    smoothed = None if ema is None else [number_option(v, "state ema", NAME) for v in ema]
    return numbers, smoothed, int(state.get("steps", 0))


def _state(log_weights: list[float], ema: list[float] | None, steps: int, statistics: dict[str, Any] | None,
           deficit: list[float] | None, signal: str) -> dict[str, Any]:
    keys = [str(k) for k in range(len(log_weights))]
    out: dict[str, Any] = {
        "log_weights": log_weights,
        "ema": ema,
        "steps": steps,
        "signal": signal,
        "weight": dict(zip(keys, (math.exp(v) for v in log_weights))),
    }
    if ema is not None:
        out["ema_value"] = dict(zip(keys, ema))
    if deficit is not None:
        out["deficit"] = dict(zip(keys, deficit))
    if statistics is not None:
        out["cov"] = dict(zip(keys, statistics["cov"]))
        out["corr"] = dict(zip(keys, statistics["corr"]))
        out["kept"] = statistics["kept"]
        out["groups"] = statistics["groups"]
    return out


def _options(k: int, base: Any, cov_targets: Any, obj_targets: Any, use_corr_target: Any, gate_by_obj_targets: Any,
             ema_tau: Any, lr: Any, global_metrics: Any = False,
             w_agg: Any = "mean") -> tuple[str, list[float], list[float], bool, bool, float, float]:
    check_bool(global_metrics, "global_metrics", NAME)
    choice_option(w_agg, "w_agg", SIGNAL_AGGREGATIONS, NAME)
    return (
        choice_option(base, "base", BASES, NAME),
        per_component(cov_targets, k, "cov_targets"),  # type: ignore[return-value]
        per_component(obj_targets, k, "obj_targets"),  # type: ignore[return-value]
        check_bool(use_corr_target, "use_corr_target", NAME),
        check_bool(gate_by_obj_targets, "gate_by_obj_targets", NAME),
        number_option(ema_tau, "ema_tau", NAME, low=0.0, high=1.0),
        number_option(lr, "lr", NAME, low=0.0),
    )


def ctwa_feedback(
    rewards: Tensor, groups: Groups, weights: Tensor, signal: Tensor, state: dict[str, Any] | None, *,
    base: str = "reinforce_pp", cov_targets: Any = None, obj_targets: Any = None,
    use_corr_target: bool = False, gate_by_obj_targets: bool = True, ema_tau: float = 0.1, lr: float = 0.02,
    global_metrics: bool = False, w_agg: str = "mean", source: str = "policy",
) -> dict[str, Any]:
    """The state after one policy update: ``state`` is the one the step's advantages were
    computed from (``None``: the first step), ``signal`` ``[N]`` the per-rollout policy signal
    ``s`` of that step's rollouts (same order as ``rewards``). Pure. ``source`` is recorded as
    the state's ``"signal"`` (``"policy"``, or ``"on_policy_limit"`` where ``s = A``). ``w_agg``
    says how the trainer aggregated ``s`` over a rollout's tokens (it reads the option when it
    measures; :data:`mrgrpo.estimators.registry.SIGNAL_OPTIONS`): checked here, not applied."""
    k = rewards.shape[1]
    _, cov_t, obj_t, use_corr, gate, tau, step = _options(
        k, base, cov_targets, obj_targets, use_corr_target, gate_by_obj_targets, ema_tau, lr, global_metrics, w_agg)
    if signal.dim() != 1 or signal.shape[0] != rewards.shape[0]:
        raise InputError(f"{NAME}: the policy signal must be [N] = [{rewards.shape[0]}], got shape {tuple(signal.shape)}")
    log_weights, ema, steps = _incoming(state, weights)
    statistics = signal_statistics(rewards, groups, signal, global_metrics)
    log_weights, ema, deficit = update_state(log_weights, ema, statistics, cov_t, obj_t, use_corr, gate, tau, step)
    return _state(log_weights, ema, steps + 1, statistics, deficit, source)


@register_estimator(
    NAME, combine="other", batch_norm=True, validate=_validate,
    example_options={"cov_targets": 0.05, "gate_by_obj_targets": False},
    signal=SIGNAL, feedback=ctwa_feedback,
)
def ctwa(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    base: str = "reinforce_pp",
    cov_targets: Any = None,
    obj_targets: Any = None,
    use_corr_target: bool = False,
    gate_by_obj_targets: bool = True,
    ema_tau: float = 0.1,
    lr: float = 0.02,
    global_metrics: bool = False,
    w_agg: str = "mean",
    state: dict[str, Any] | None = None,
) -> tuple[Tensor, dict[str, Any]]:
    """CTWA: the base advantage of ``Σ_k w_k r_ik`` with weights that adapt from the policy update.

    CTWA (arXiv 2602.06869; official code github yining610/ctwa): the step's advantages are the
    ``base`` estimator's on ``T_i = Σ_k w_k r_ik`` with ``w_k = exp(log w_k)`` of the incoming
    state; after the policy update, the per-rollout signal ``s_i`` (mean over response tokens
    of ``Â_i·ρ_it·1[unclipped]``) moves the log-weights (:func:`ctwa_feedback`, module
    docstring). Called without a trainer, the signal is the on-policy limit ``s = A`` (the
    returned state says ``"signal": "on_policy_limit"``).

    Args:
        rewards: ``[N, K]`` float32 or float64, NaN = not scored: 0 in ``T``, left out of that
            component's statistics (a rollout with none scored gets 0).
        groups: the grouping (for ``base="grpo"`` and the per-group statistics).
        weights: ``[K]`` the initial weights, ``>= 0`` with one ``> 0``, normalized to sum to 1
            (the source requires that they do) and floored at 1e-8 before the logarithm.
        base: ``"reinforce_pp"`` (the official script's: ``(T − mean)/sqrt(var + 1e-8)`` over
            the batch, unbiased ``var``) or ``"grpo"`` (``(T − mean_g)/(std_g + 1e-6)``).
        cov_targets: the target of each component's covariance (or correlation) with ``s``: a
            number or K numbers; ``None`` (default): the official config's, 0.1 for component 0
            and 0.05 for the others (``[0.1, 0.05, 0.05]`` for its three objectives, accuracy first).
        obj_targets: a component whose batch mean reaches its target gets no increase (with
            ``gate_by_obj_targets``): a number or K numbers; ``None`` (default): the official
            config's, 1.0 for component 0 and 0.95 for the others.
        use_corr_target: track the correlation instead of the covariance (default false).
        gate_by_obj_targets: apply the ``obj_targets`` gate (default true).
        ema_tau: the EMA's τ in ``[0, 1]`` (default 0.1; the first statistic initializes it).
        lr: the log-weights' step ``>= 0`` (default 0.02).
        global_metrics: pool the groups' centred products instead of averaging each group's
            covariance and correlation (:func:`signal_statistics`; default false, the
            official config's).
        w_agg: how a trainer aggregates the signal over a rollout's response tokens
            (``"mean"``, the official config's; ``"mean_unclipped"``; ``"sum"``:
            :data:`mrgrpo.estimators.registry.SIGNAL_AGGREGATIONS`). The on-policy limit here
            takes ``s = Â`` whatever it is (a rollout file carries no token counts; with
            ``"sum"`` a trainer's signal scales with the response length).
        state: ``None`` (the first step) or the dict a previous step (or its feedback) returned.

    Returns:
        ``(advantages [N], new_state)``: the advantages from the incoming weights, and the
        state after the on-policy-limit update: ``{"log_weights": [K], "ema": [K], "steps": t,
        "signal": "on_policy_limit", "weight": {"<k>": w_k}, "ema_value", "deficit", "cov",
        "corr": {"<k>": ...}, "kept", "groups"}`` (the weights and statistics for logging). A
        trainer that measures ``s`` discards this state and calls :func:`ctwa_feedback` with
        the incoming one.
    """
    k = rewards.shape[1]
    base_name, *_ = _options(k, base, cov_targets, obj_targets, use_corr_target, gate_by_obj_targets, ema_tau, lr,
                             global_metrics, w_agg)
    log_weights, _, _ = _incoming(state, weights)
    current = torch.tensor([math.exp(v) for v in log_weights], dtype=torch.float64, device=rewards.device)
    advantages = base_advantages(rewards, groups, current, base_name)
    new_state = ctwa_feedback(
        rewards, groups, weights, advantages, state, base=base, cov_targets=cov_targets, obj_targets=obj_targets,
        use_corr_target=use_corr_target, gate_by_obj_targets=gate_by_obj_targets, ema_tau=ema_tau, lr=lr,
        global_metrics=global_metrics, w_agg=w_agg, source="on_policy_limit",
    )
    return advantages, new_state


__all__ = ["base_advantages", "ctwa", "ctwa_feedback", "signal_statistics", "update_state"]
