"""Statistics of a multi-component reward batch: what each estimator will make of it.

Pure functions of tensors, like the estimators. :func:`diagnose` returns a plain,
JSON-serializable dict (undefined quantities are ``None``, never NaN) that the trainer logs
every step and ``mrgrpo diagnose`` prints.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from mrgrpo.errors import ConfigError, InputError
from mrgrpo.estimators import available_estimators, get_estimator
from mrgrpo.estimators.binding import bind
from mrgrpo.estimators._checks import check_reward_ranges
from mrgrpo.estimators.groups import Groups, group_moments, make_groups
from mrgrpo.estimators.registry import as_reward_matrix, as_weights

#: Advantages closer than this count as the same value when counting distinct advantages.
DISTINCT_DECIMALS = 6


def diagnose(
    rewards: Any,
    group_ids: Any,
    weights: Any = None,
    reward_ranges: Any = None,
    names: Sequence[str] | None = None,
    *,
    estimators: Sequence[str] | None = None,
    estimator_options: Mapping[str, Mapping[str, Any]] | None = None,
    advantages: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Diagnostics of a reward batch ``rewards`` ``[N, K]`` grouped by ``group_ids`` ``[N]``.

    Returns a dict with:

    * ``components``: per component ``mean``, ``std`` (batch, ddof=1, NaN ignored),
      ``scored`` (fraction of rollouts scored) and ``saturation`` (``(mean − lo)/(hi − lo)``
      clipped to [0, 1]; ``None`` without ``reward_ranges``).
    * ``correlation``: ``[K][K]`` in-group Pearson correlation of the raw components, averaged
      over the groups where both components vary (``None`` where no group has both varying).
    * ``variance_share``: per component, ``Σ_m w_l w_m Cov_lm / Var(T)`` averaged over the
      groups whose weighted total ``T`` varies: how much of GRPO's denominator each component
      owns (shares sum to 1; a negative share means the component cancels others).
    * ``scale``: per estimator registered with a ``group_scale`` trait, the median over the
      varying groups of the factor by which it scales a group's centered weighted total at its
      defaults: GRPO's ``1/(std_g T + 1e-4)`` (ddof=1), CorrGRPO's ``1/sqrt(Σρ + 1e-6)``.
    * ``<estimator>``: the statistics of those scales its ``scale_diagnostics`` trait gives;
      ``corr_grpo``: ``denominator_below_one`` (fraction of varying groups whose
      ``sqrt(Σρ + eps) < 1``, i.e. whose centered total CorrGRPO amplifies) and
      ``max_amplification`` (largest ``1/sqrt(Σρ + eps)`` in the batch).
    * ``zero_variance_fraction``: fraction of groups whose total ``T`` is constant — up to the
      rounding of its weighted components at the input's precision, so components that cancel
      exactly count as constant (GRPO gives them zero advantage).
    * ``advantage_collapse``: ``distinct_reward_profiles`` (mean distinct reward rows per group)
      and, per estimator, the mean number of distinct advantage values per group (rounded to
      ``DISTINCT_DECIMALS``). Fewer advantages than profiles = GDPO's "advantage collapse".
      ``estimators`` limits which estimators are run for it (default: every registered one
      that needs no options beyond ``reward_ranges``); ``estimator_options`` gives the options
      to run an estimator with (``{"corr_grpo": {"shrinkage": "auto"}}``: the ones being
      trained, not the defaults; ``reward_ranges`` defaults to the argument; options that
      name components take entries of ``names`` or indices); ``advantages``
      (``{name: [N] tensor}``) are advantages already computed — a trainer passes the ones it
      trained on (which may also depend on state such as an EMA correlation) and the
      estimator is not re-run. Names in ``advantages`` are reported even if not in
      ``estimators``.

    NaN entries are mean-imputed in the in-group statistics (centered value 0), as in
    ``corr_grpo``.
    """
    values, _ = as_reward_matrix(rewards)
    # the precision the rewards came in (float32 for TRL's and verl's batches)
    unit = torch.finfo(values.dtype).eps / 2
    values = values.to(torch.float64)
    n, k = values.shape
    groups = make_groups(group_ids, n, device=values.device)
    w = as_weights(weights, k, values.device)
    ranges = check_reward_ranges(reward_ranges, k, "diagnose") if reward_ranges is not None else None
    if names is None:
        names = [f"r{i}" for i in range(k)]
    names = [str(name) for name in names]
    if len(names) != k:
        raise InputError(f"names has {len(names)} entries for {k} reward components")

    report: dict[str, Any] = {
        "num_rollouts": n,
        "num_groups": groups.num_groups,
        "names": names,
        "weights": w.tolist(),
        "components": _component_stats(values, names, ranges),
    }
    if n == 0:
        return report

    centered = groups.unrows(group_moments(values, groups).unscaled())  # [N, K] in the rewards' units
    report["correlation"] = _mean_group_correlation(centered, groups)

    weighted = centered * w
    total_centered = weighted.sum(dim=1)
    var_total = groups.sum(total_centered * total_centered)  # [num_groups], times (n_g - 1)
    # A total that varies by less than the rounding of its weighted components (a group whose
    # components cancel, up to the input's precision) is constant: GRPO gives it ~0 advantage,
    # and dividing by its rounding-noise variance would give meaningless shares (e.g. ±1e6).
    parts = groups.sum(weighted * weighted).sum(dim=1)
    varying = var_total > parts * (4 * k * unit) ** 2
    report["zero_variance_fraction"] = _float(1.0 - varying.to(torch.float64).mean())

    shares = groups.sum(weighted * total_centered.unsqueeze(1))  # [num_groups, K]
    shares = shares[varying] / var_total[varying].unsqueeze(1)
    mean_shares = shares.mean(dim=0).tolist() if shares.shape[0] else [None] * k
    report["variance_share"] = {name: _float(value) for name, value in zip(names, mean_shares)}

    # each estimator that declares how it scales a group's centered total (its group_scale
    # trait): the median over the varying groups, and its own statistics of them
    report["scale"] = {}
    for name in available_estimators():
        spec = get_estimator(name)
        if spec.group_scale is None:
            continue
        scales = spec.group_scale(weighted, groups)[varying]
        report["scale"][name] = _median(scales)
        if spec.scale_diagnostics is not None:
            report[name] = {key: _float(value) for key, value in spec.scale_diagnostics(scales).items()}
    report["advantage_collapse"] = _advantage_collapse(
        values, groups, w, ranges, estimators, estimator_options or {}, advantages or {}, names
    )
    return report


def _component_stats(values: Tensor, names: list[str], ranges: Tensor | None) -> dict[str, dict[str, Any]]:
    # All components at once, then one conversion to Python (a step's batch is small: per-call
    # overhead, not arithmetic, is what costs here).
    present = ~torch.isnan(values)
    count = present.sum(dim=0).to(values.dtype)
    filled = torch.where(present, values, torch.zeros_like(values))
    mean = filled.sum(dim=0) / count.clamp(min=1)
    spread = torch.where(present, values - mean, torch.zeros_like(values))
    std = ((spread * spread).sum(dim=0) / (count - 1).clamp(min=1)).sqrt()
    if ranges is not None:
        saturation = ((mean - ranges[:, 0]) / (ranges[:, 1] - ranges[:, 0])).clamp(0.0, 1.0)
    else:
        saturation = torch.full_like(mean, float("nan"))
    scored = count / max(values.shape[0], 1)
    table = torch.stack([count, mean, std, saturation, scored]).tolist()
    stats = {}
    for i, name in enumerate(names):
        n_i, mean_i, std_i, sat_i, scored_i = (column[i] for column in table)
        stats[name] = {
            "mean": _float(mean_i) if n_i > 0 else None,
            "std": _float(std_i) if n_i > 1 else None,
            "scored": _float(scored_i),
            "saturation": _float(sat_i) if n_i > 0 else None,
        }
    return stats


def _mean_group_correlation(centered: Tensor, groups: Groups) -> list[list[float | None]]:
    k = centered.shape[1]
    norm = groups.sum(centered * centered).sqrt()  # [num_groups, K]
    varies = norm > 0
    z = centered / groups.gather(torch.where(varies, norm, torch.ones_like(norm)))
    products = groups.sum((z.unsqueeze(2) * z.unsqueeze(1)).reshape(-1, k * k)).reshape(-1, k, k)
    defined = (varies.unsqueeze(2) & varies.unsqueeze(1)).to(torch.float64)
    count = defined.sum(dim=0)
    mean = ((products * defined).sum(dim=0) / count.clamp(min=1)).tolist()  # one transfer, not K² of them
    counts = count.tolist()
    return [[(_float(mean[i][j]) if counts[i][j] > 0 else None) for j in range(k)] for i in range(k)]


def _distinct_per_group(keys: Tensor, groups: Groups) -> float:
    """Mean over groups of the number of distinct rows of ``keys`` ``[N, D]`` in the group."""
    rows = torch.cat([groups.index.unsqueeze(1).to(keys.dtype), keys], dim=1)
    distinct = torch.unique(rows, dim=0)
    return distinct.shape[0] / max(groups.num_groups, 1)


def _advantage_collapse(
    values: Tensor,
    groups: Groups,
    weights: Tensor,
    ranges: Tensor | None,
    estimators: Sequence[str] | None,
    estimator_options: Mapping[str, Mapping[str, Any]],
    given: Mapping[str, Any],
    component_names: list[str] | None = None,
) -> dict[str, Any]:
    profiles = torch.where(torch.isnan(values), torch.full_like(values, float("inf")), values)
    out: dict[str, Any] = {"distinct_reward_profiles": _distinct_per_group(profiles, groups), "distinct_advantages": {}}
    scored = ~torch.isnan(values).all(dim=1)
    unknown = sorted(set(estimator_options) - set(available_estimators()))
    if unknown:
        raise ConfigError(f"estimator_options names unknown estimator(s) {unknown}; available: {', '.join(available_estimators())}")
    names = list(available_estimators() if estimators is None else estimators)
    names += [name for name in given if name not in names]
    for name in names:
        if name in given:
            advantages = torch.as_tensor(given[name]).detach().to(device=values.device, dtype=torch.float64).reshape(-1)
            if advantages.numel() != values.shape[0]:
                raise InputError(f"advantages[{name!r}] has {advantages.numel()} entries for {values.shape[0]} rollouts")
        else:
            spec = get_estimator(name)
            explicit = dict(estimator_options.get(name, {}))
            spec.check_options(explicit)
            if any(key not in explicit for key in spec.required):
                continue  # required options (e.g. roles) not given: nothing to report
            if spec.needs_ranges and "reward_ranges" not in explicit and ranges is None:
                continue  # needs ranges: nothing to report without them
            try:
                # (no dry step: the estimator runs on the batch right away)
                binding = bind(spec, explicit, names=component_names, num_components=values.shape[1], ranges=ranges,
                               weights=weights, dry_step=False)
                advantages = binding.advantages(values, groups.index).to(torch.float64)
            except ValueError:
                if explicit:
                    raise  # the caller's own options are wrong: say so
                continue  # weights it cannot use, a user estimator's own refusal: nothing to report
        advantages = torch.where(scored, advantages, torch.zeros_like(advantages))
        rounded = torch.round(advantages, decimals=DISTINCT_DECIMALS).unsqueeze(1)
        out["distinct_advantages"][name] = _distinct_per_group(rounded, groups)
    return out


def _median(x: Tensor) -> float | None:
    return _float(x.median()) if x.numel() else None


def _float(x: Any) -> float | None:
    if x is None:
        return None
    value = float(x)
    return value if math.isfinite(value) else None
