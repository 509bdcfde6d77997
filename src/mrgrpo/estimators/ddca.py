"""DDCA: decoupled accuracy and conditional length advantages, scaled by the pass rate (arXiv 2602.02099)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mrgrpo.errors import ConfigError
from mrgrpo.estimators._multi import check_unused_weights, component_index, given, number_option
from mrgrpo.estimators.groups import Groups, group_moments
from mrgrpo.estimators.registry import register_estimator

#: The official code's floor on the stds and its eps (both 1e-8): ``std → max(std, 1e-8) + 1e-8``.
FLOOR = 1e-8
#: Bound on the length z-score before the sigmoid (as the official code).
Z_CLIP = 20.0


def floored_zscores(x: Tensor, groups: Groups) -> Tensor:
    """Population z-scores of one column ``x`` ``[N]`` (NaN = left out, gets 0) within each group,
    with the std floored: ``(x − mean_g x)/(max(std_g x, 1e-8) + 1e-8)``; exact zeros for a
    constant group."""
    moments = group_moments(x.unsqueeze(1), groups)
    std = moments.std(0)
    if moments.scale is not None:
        std = std / moments.scale
    denominator = std.clamp(min=FLOOR) + FLOOR
    return groups.per_row(moments.unscaled() / groups.spread(denominator))


def _validate(options: dict, num_components: int | None) -> None:
    given(options, {"beta": lambda v: number_option(v, "beta", "ddca")})
    correctness, length = options.get("correctness", 0), options.get("length", 1)
    if isinstance(correctness, int) and correctness == length:
        raise ConfigError(f"ddca: correctness and length name the same component ({correctness}): give two different ones")


@register_estimator(
    "ddca", combine="other", roles=("correctness", "length"), validate=_validate, uses_weights=False,
    example_options={"correctness": 0, "length": 2},
)
def ddca(
    rewards: Tensor,
    groups: Groups,
    weights: Tensor,
    *,
    correctness: Any = 0,
    length: Any = 1,
    beta: float = 0.2,
) -> Tensor:
    """DDCA advantage ``A_i = A_acc,i + beta · A_len,i``.

    Dynamic Decoupled Conditional Advantage, DDCA (arXiv 2602.02099; code github alphadl/DDCA):
    accuracy and length are normalized separately, and length only among the correct answers,
    so a length penalty never makes a wrong answer look better than a right one; the length
    term is scaled by the group's pass rate, so hard prompts (few correct) are judged on
    accuracy and easy ones also on brevity.

    Per group g of G rollouts (those whose correctness is scored), with ``c_i = 1`` if the
    correctness component is ``> 0.5`` (else 0) and ``n = Σ c_i``:

    * ``A_acc,i = (c_i − mean_g c)/(max(std_g c, 1e-8) + 1e-8)`` (population std);
    * among the n correct rollouts: ``z_i`` = population z-score of the raw length with the same
      floor, ``s_i = sigmoid(clip(z_i, −20, 20))``, ``A_len,i = −(s_i − mean s) · n/G``;
      ``A_len,i = 0`` for the others. Shorter correct answers gain.

    Args:
        rewards: ``[N, K]`` float32 or float64. Only the two role columns are read; the others
            are ignored.
        groups: the grouping (groups of any size, in any order).
        weights: not used (trait ``uses_weights=False``: the adapters pass none): each must be
            1 (the default) or 0 (a :class:`ConfigError` otherwise: the length term's weight
            is ``beta``).
        correctness: the correctness component, default 0: its index, or (where the component
            names are known: the trainers, the CLI, ``validate_options(..., component_names=)``)
            its name, which the registry resolves to the index before this runs.
        length: the length component (raw lengths, e.g. tokens), index or name; default 1.
        beta: the length term's coefficient, default 0.2; ``beta = 0`` is the accuracy z-score.

    Returns:
        ``[N]`` in the computing dtype. NaN: a rollout whose correctness is NaN is left out of
        its group (not counted in G) and gets 0; a correct rollout whose length is NaN counts in
        n but is left out of the length statistics and gets ``A_len = 0``. A group of one gets
        0; a group with every answer right (or wrong) gets ``A_acc = 0``. Same as the official
        ``advantage_dca_grpo(use_dynamic=True)`` on each group (its eps 1e-8).
    """
    k = rewards.shape[1]
    acc_col = component_index(correctness, k, "correctness", "ddca")
    len_col = component_index(length, k, "length", "ddca")
    if acc_col == len_col:
        raise ConfigError(f"ddca: correctness and length name the same component ({acc_col}): give two different ones")
    beta = number_option(beta, "beta", "ddca")
    check_unused_weights(weights, range(k), "ddca", "ddca's advantage does not use weights (the length term's weight is beta)")
    score, lengths = rewards[:, acc_col], rewards[:, len_col]
    scored = ~torch.isnan(score)
    correct = scored & (score > 0.5)
    mask = torch.where(scored, correct.to(rewards.dtype), torch.full_like(score, float("nan")))
    advantages = floored_zscores(mask, groups)
    if beta == 0:
        return advantages
    timed = correct & ~torch.isnan(lengths)
    z = floored_zscores(torch.where(timed, lengths, torch.full_like(lengths, float("nan"))), groups)
    s = torch.where(timed, torch.sigmoid(z.clamp(-Z_CLIP, Z_CLIP)), torch.zeros_like(z))
    per_group = groups.sum(torch.stack([s, timed.to(s.dtype), correct.to(s.dtype), scored.to(s.dtype)], dim=1))
    mean_s = per_group[:, 0] / per_group[:, 1].clamp(min=1)
    pass_rate = per_group[:, 2] / per_group[:, 3].clamp(min=1)
    length_advantage = -(s - groups.gather(mean_s)) * groups.gather(pass_rate)
    return advantages + beta * torch.where(timed, length_advantage, torch.zeros_like(length_advantage))
