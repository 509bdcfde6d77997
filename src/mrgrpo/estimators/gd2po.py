"""GD²PO: GDPO with rollouts whose components pull in opposite directions filtered out (arXiv 2606.16771)."""

from __future__ import annotations

import torch
from torch import Tensor

from mrgrpo.estimators._multi import choice_option, ddof_option, eps_option, flat_zscores, given, number_option
from mrgrpo.estimators.groups import Groups, batch_standardize
from mrgrpo.estimators.registry import register_estimator

MODES = ("hard", "snr")
#: A contribution counts as positive above this, negative below its negative (official value).
SIGN_EPS = 1e-8
#: Added to ``Σ_k |u_ik|`` in the agreement ratio.
RATIO_EPS = 1e-8


def conflict_filter(contributions: Tensor, mode: str, tau: float) -> tuple[Tensor, Tensor]:
    """``(summed, dropped)`` ``[N]`` from the weighted z-scores ``u_ik = w_k z_ik`` ``[N, K]``:
    ``S_i = Σ_k u_ik``, and whether rollout i is dropped (it conflicts, some ``u_ik > 1e-8`` and
    some ``< −1e-8``, and in ``snr`` mode also ``|S_i| / (Σ_k |u_ik| + 1e-8) < tau``)."""
    summed = contributions.sum(dim=1)
    conflict = (contributions > SIGN_EPS).any(dim=1) & (contributions < -SIGN_EPS).any(dim=1)
    if mode == "hard":
        return summed, conflict
    agreement = summed.abs() / (contributions.abs().sum(dim=1) + RATIO_EPS)
    return summed, conflict & (agreement < tau)


def _validate(options: dict, num_components: int | None) -> None:
    given(options, {
        "mode": lambda v: choice_option(v, "mode", MODES, "gd2po"),
        "tau": lambda v: number_option(v, "tau", "gd2po"),
        "eps": lambda v: eps_option(v, "gd2po"),
        "ddof": lambda v: ddof_option(v, "gd2po"),
    })


@register_estimator("gd2po", combine="normalize_then_sum", batch_norm=True, validate=_validate)
def gd2po(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    mode: str = "snr",
    tau: float = 0.8,
    eps: float = 1e-6,
    ddof: int = 1,
) -> Tensor:
    """GD²PO advantage: GDPO's weighted z-scores, conflicting rollouts dropped, kept ones scaled
    by their group's keep ratio, then whitened over the kept rollouts.

    GD²PO (arXiv 2606.16771; code github Qwen-Applications/GD2PO): a rollout that one
    component rewards and another punishes sends contradictory gradient signal; dropping it
    (``hard``), or only when the components nearly cancel (``snr``), keeps the update on the
    rollouts whose objectives agree. Scaling by the keep ratio keeps a group with many dropped
    rollouts from being over-weighted by the whitening.

    With ``u_ik = w_k (r_ik − mean_g r_k)/(std_g r_k + eps)`` and ``S_i = Σ_k u_ik``: rollout i
    conflicts when some ``u_ik > 1e-8`` and some ``u_ik < −1e-8``; ``mode="hard"`` drops every
    conflicting rollout, ``mode="snr"`` only those with ``|S_i| / (Σ_k |u_ik| + 1e-8) < tau``.
    ``V_i = S_i · kept_g / n_g`` for kept rollouts (``n_g`` the group's scored rollouts), 0 for
    dropped ones; ``A = (V − mean_kept V)/(std_kept V + eps)`` on the kept rollouts, 0 elsewhere.

    Args:
        rewards: ``[N, K]`` float32 or float64; NaN = not scored (ignored per component, its
            ``u`` is 0).
        groups: the grouping (groups of any size, in any order).
        weights: ``[K]`` ``w_k`` (the official code sums unweighted: weights 1). The conflict
            test and the ratio use the weighted ``u_ik``, so a zero-weight component never
            causes a drop and a negative weight (a cost) flips its direction.
        mode: ``"snr"`` (default) or ``"hard"``.
        tau: the agreement threshold of ``snr``, clamped to [0, 1]; 0.8 as in every official
            training script (the code's own fallback is 0.2).
        eps: added to the group stds and to the final std; 1e-6 as the official group z-scores.
        ddof: of both stds; 1 (unbiased, as the official code) by default.

    Returns:
        ``[N]`` float64 (the registry rounds it to the input's dtype: the z-scores and the
        conflict test are computed in float64 for float32 inputs too). Fewer than two kept rollouts (or all kept values equal)
        give zeros. A group of one contributes 0 before the whitening (the official code gives
        it mean 0, std 1, i.e. its raw rewards), and the whitening is per rollout (the official
        code whitens per token, ``(x − mean)·rsqrt(var + 1e-8)``, which weights long responses
        more).
    """
    choice_option(mode, "mode", MODES, "gd2po")
    tau = min(max(number_option(tau, "tau", "gd2po"), 0.0), 1.0)
    eps = eps_option(eps, "gd2po")
    ddof = ddof_option(ddof, "gd2po")
    # In float64 whatever the input: the sign test at 1e-8 is below float32's resolution of a
    # z-score (a value at its group's mean would get |z| ~ 1e-7 and count as a direction).
    rewards = rewards.to(torch.float64)
    contributions = flat_zscores(rewards, groups, eps, ddof) * weights
    summed, dropped = conflict_filter(contributions, mode, tau)
    scored = ~torch.isnan(rewards).all(dim=1)
    kept = scored & ~dropped
    counts = groups.sum(torch.stack([kept, scored], dim=1).to(rewards.dtype))
    ratio = counts[:, 0] / counts[:, 1].clamp(min=1)
    values = torch.where(kept, summed * groups.gather(ratio), torch.zeros_like(summed))
    return batch_standardize(values, kept, ddof, eps)
