"""SAW: component weights from each component's coefficient of variation over the batch (arXiv 2606.07705)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mrgrpo.errors import ConfigError
from mrgrpo.estimators._multi import batch_mean_std, choice_option, ddof_option, eps_option, given, number_option
from mrgrpo.estimators.gdpo import summed_zscores
from mrgrpo.estimators.groups import Groups, column_extremes, column_sums64, minus_columns, pow2_scale
from mrgrpo.estimators.grpo import grpo
from mrgrpo.estimators.registry import register_estimator

MODES = ("grpo", "gdpo")


def cv_weights(rewards: Tensor, reward_mins: Tensor | None, delta: float) -> Tensor:
    """``ω_k = K · CV_k / (Σ_l CV_l + delta)`` ``[K]`` float64, with ``r̃_k = r_k − min_k`` and
    ``CV_k = std_batch(r̃_k) / (|mean_batch(r̃_k)| + delta)`` (unbiased std over the scored
    entries; a component with fewer than two has CV 0); all 1 when every CV is 0.
    ``reward_mins`` ``None``: each component's batch minimum."""
    k = rewards.shape[1]
    cv = _cv_fast(rewards, reward_mins, delta)
    if cv is None:
        cv = _cv_general(rewards, reward_mins, delta)
    total = cv.sum()
    if float(total) == 0.0:
        return torch.ones(k, dtype=torch.float64, device=rewards.device)
    return k * cv / (total + delta)


def _cv_fast(rewards: Tensor, reward_mins: Tensor | None, delta: float) -> Tensor | None:
    """The CVs in a few passes over the matrix in its own dtype (sums in float64), for batches
    without NaN whose magnitudes are within ``2^±60`` (else ``None``). The std does not depend
    on the shift, and ``mean(r̃) = mean(r) − min``."""
    n = rewards.shape[0]
    if n < 2:
        return None
    sums = column_sums64(rewards)
    if not bool(torch.isfinite(sums).all()):  # NaN (or an overflow)
        return None
    low, high = column_extremes(rewards)
    largest = float(torch.maximum(low.abs(), high.abs()).max())
    if largest > 2.0**60 or (0 < largest < 2.0**-60):
        return None
    mean = sums / n
    centered = minus_columns(rewards, mean.to(rewards.dtype))
    # Σ(x − m)² from the values centered on the rounded mean m' (exact: Σc'² − (Σc')²/n)
    first = column_sums64(centered)
    second = column_sums64(centered.mul_(centered))  # (in place: a second [N, K] costs more)
    var = ((second - first * first / n) / (n - 1)).clamp(min=0.0)
    mins = low.to(torch.float64) if reward_mins is None else reward_mins
    return var.sqrt() / ((mean - mins).abs() + delta)


def _cv_general(rewards: Tensor, reward_mins: Tensor | None, delta: float) -> Tensor:
    """The CVs with NaN entries skipped and any finite magnitude (float64, rescaled columns)."""
    values = rewards.to(torch.float64)
    present = ~torch.isnan(values)
    if reward_mins is None:
        reward_mins = torch.where(present, values, torch.full_like(values, float("inf"))).amin(dim=0)
        reward_mins = torch.where(torch.isfinite(reward_mins), reward_mins, torch.zeros_like(reward_mins))
    shifted = values - reward_mins
    # Columns whose squares would overflow or underflow are multiplied by a power of two first
    # (exact); the CV std/(|mean| + delta) is then taken in those units, with delta scaled alike.
    magnitude = torch.where(present, shifted.abs(), torch.zeros_like(shifted)).amax(dim=0)
    factors = pow2_scale(magnitude)
    extreme = (magnitude > 2.0**500) | ((magnitude > 0) & (magnitude < 2.0**-500))
    factor = torch.where(extreme, factors[0] * factors[1], torch.ones_like(magnitude))
    mean, std = batch_mean_std(shifted * factor, ddof=1)
    return torch.where(present.any(dim=0), std / (mean.abs() + delta * factor), torch.zeros_like(std))


def _mins_option(reward_mins: Any, k: int) -> Tensor | None:
    if reward_mins is None:
        return None
    try:
        mins = torch.as_tensor(reward_mins, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise ConfigError(f"saw: reward_mins must be {k} numbers (each component's minimum), got {reward_mins!r}") from None
    if mins.shape != (k,) or not bool(torch.isfinite(mins).all()):
        raise ConfigError(
            f"saw: reward_mins must be {k} finite numbers, one per component (e.g. the lower ends of the "
            f"reward ranges), got {reward_mins!r}"
        )
    return mins


def _validate(options: dict, num_components: int | None) -> None:
    given(options, {
        "mode": lambda v: choice_option(v, "mode", MODES, "saw"),
        "delta": lambda v: number_option(v, "delta", "saw", low=0.0),
        "eps": lambda v: eps_option(v, "saw"),
        "ddof": lambda v: ddof_option(v, "saw"),
    })
    if options.get("reward_mins") is not None:
        k = num_components if num_components is not None else _length(options["reward_mins"])
        _mins_option(options["reward_mins"], k)


def _length(value: Any) -> int:
    try:
        return len(value)
    except TypeError:
        return -1


# (the traits are those of the default mode, "grpo"; mode="gdpo" normalizes then sums, then
# normalizes over the batch)
@register_estimator("saw", combine="sum_then_normalize", validate=_validate)
def saw(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    mode: str = "grpo",
    reward_mins: Any = None,
    delta: float = 1e-8,
    eps: float = 1e-4,
    ddof: int = 1,
) -> Tensor:
    """SAW advantage: components weighted by their batch coefficient of variation, then GRPO or GDPO.

    ``mode="grpo"`` sums then normalizes in the group; ``mode="gdpo"`` normalizes each
    component, sums, then normalizes over the batch.

    SAW (arXiv 2606.07705; code github Zhaolutuan/SAW): a component whose values barely move
    relative to their level (a saturated format reward) carries little signal; weighting by the
    CV over the whole batch moves weight to the components that still discriminate.

    ``r̃_k = r_k − min_k``; ``CV_k = std_batch(r̃_k)/(|mean_batch(r̃_k)| + delta)`` (unbiased);
    ``ω_k = K · CV_k / (Σ_l CV_l + delta)`` (all 1 if Σ CV = 0).
    ``mode="grpo"``: ``T_i = Σ_k ω_k w_k r_ik`` (unshifted rewards), then GRPO's group z-score
    ``(T − mean_g T)/(std_g T + eps)``. ``mode="gdpo"``: ``S_i = Σ_k ω_k w_k z_ik`` with GDPO's
    per-component z-scores, then ``(S − mean S)/(std S + eps)`` over the scored rollouts.

    Args:
        rewards: ``[N, K]`` float32 or float64; NaN = not scored (left out of the batch CV and
            of the group statistics).
        groups: the grouping (groups of any size, in any order).
        weights: ``[K]`` base weights ``w_k`` (the official code has none: weights 1).
        mode: ``"grpo"`` (default, the official ``grpo-h``) or ``"gdpo"`` (``gdpo-h``).
        reward_mins: ``K`` theoretical minima to shift by; default each component's batch
            minimum (then the CV is of ``r − min_batch r``).
        delta: in the CV's and the weights' denominators, 1e-8 as the official code.
        eps: added to every std (group, and the batch std of ``mode="gdpo"``); 1e-4 as
            ``grpo``; the official code uses 1e-6 in its group z-scores.
        ddof: of the group (and batch) stds; the CV's std is always unbiased.

    Returns:
        ``[N]`` in the computing dtype. ``reward_mins=[-3, 0], eps=1e-6`` on two rewards
        reproduces the official code, which is hard-wired to two rewards with a +3 shift of
        ToolRL's correctness (in groups of two or more; the official code gives a group of one
        mean 0 and std 1, i.e. its raw total, where mrgrpo gives 0; and its ``gdpo-h`` whitens
        per token, ``rsqrt(var + 1e-8)``, where this whitens per rollout with ``std + eps``).
    """
    choice_option(mode, "mode", MODES, "saw")
    mins = _mins_option(reward_mins, rewards.shape[1])
    delta = number_option(delta, "delta", "saw", low=0.0)
    eps = eps_option(eps, "saw")
    ddof = ddof_option(ddof, "saw")
    if mins is not None:
        mins = mins.to(rewards.device)
    coefficients = cv_weights(rewards, mins, delta) * weights
    if mode == "grpo":
        return grpo(rewards, groups, coefficients, eps=eps, ddof=ddof)
    return summed_zscores(rewards, groups, coefficients, eps, ddof, batch_norm=True)
