"""The estimator registry and the one public entry point, :func:`compute_advantages`.

Every estimator has the same signature::

    fn(rewards: Tensor[N, K] float32 | float64, groups: Groups, weights: Tensor[K] float64, *,
       **options) -> Tensor[N] float32 | float64

``rewards`` arrive validated (finite or NaN) in the dtype to compute in (float32 for float32,
float16 and bfloat16 inputs, float64 otherwise), ``groups`` built by :func:`make_groups`, and the
options are keyword-only parameters with defaults: their names are the estimator's options, so
an unknown option name is caught here, before any math runs.

An estimator registered with ``screens_rewards=True`` takes over the value check: it receives
the rewards checked for shape and dtype only, and must call :func:`check_reward_values` (same
errors, same messages) before it relies on them being finite or NaN-free, and give exact zeros
to rollouts whose every component is NaN. GRPO and Dr. GRPO do, because their first pass over
the rewards (the weighted total) already tells: a total that is finite everywhere, with no zero
weight, proves every reward finite, so the separate pass over the ``[N, K]`` matrix is skipped.

**Traits.** Each estimator declares, at registration, what the adapters (TRL, verl, the CLI)
need to know about it, so none of them keeps a table of names: how it combines components
(``combine``), whether it ends with a batch normalization (``batch_norm``), whether it needs
each component's range (``needs_ranges``), which options name components (``roles``), a check
of its option values that needs no data (``validate``), options to run it with in examples and
tests (``example_options``) and how GRPOConfig's / verl's std-scaling settings map onto it
(``scale_option``, ``unscaled``, ``trl_default``) and whether it uses the component weights
(``uses_weights``). :func:`validate_options` applies the option checks.

**State.** An estimator whose function has a keyword-only parameter ``state`` is *stateful*:
it is called as ``fn(rewards, groups, weights, *, state=..., **options)`` and returns
``(advantages [N], new_state)``. ``state=None`` is the first step; ``new_state`` is plain JSON
data (a dict of numbers, strings, lists and dicts; ``None`` when the options ask for no state).
The function is pure (the incoming state is not modified); the caller carries the state from
one training batch to the next (:func:`compute_advantages_with_state`), saves it with its
checkpoints and logs its numeric scalar leaves. :func:`compute_advantages` runs a stateful
estimator from ``state=None`` and returns the advantages only.

**Feedback.** A stateful estimator may also need something only the policy update can tell:
it declares a ``signal`` (one of :data:`SIGNALS`) and a ``feedback`` function,
``feedback(rewards, groups, weights, signal [N], state, **options) -> new_state``. A trainer
that can measure the signal computes the step's advantages from ``state`` as usual, discards the
state the estimator returns, and after the policy update hands the measured signal of the
step's rollouts (gathered over all processes, in the rewards' order) to
:func:`apply_feedback`, whose state the next step uses. Called without a trainer
(:func:`compute_advantages_with_state`, ``mrgrpo advantages``), such an estimator updates its
state from the limit its own docstring names (``ctwa``: the on-policy limit ``s = A``) and says
so in the state it returns.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from mrgrpo.errors import ConfigError, InputError, UnknownNameError
from mrgrpo.estimators.groups import Groups, make_groups

EstimatorFn = Callable[..., Tensor]


#: How an estimator folds the K components into one advantage, in GRPOConfig's terms
#: (``multi_objective_aggregation``): sum first, then normalize the total (GRPO); normalize
#: each component first, then sum (GDPO); anything else.
COMBINES = ("sum_then_normalize", "normalize_then_sum", "other")

#: Signature of an estimator's option check: ``validate(options, num_components)`` with the
#: options the caller gave (role values resolved to indices where names were known) and ``K``
#: (``None`` where it is not known yet); raises ``ValueError`` naming the problem and the fix.
OptionCheck = Callable[[dict[str, Any], "int | None"], None]

#: ``group_scale(weighted_centered, groups) -> [num_groups]``: from the group-centered weighted
#: components ``w_k (r_ik − mean_g r_k)`` ``[N, K]`` float64 (NaN entries 0), the factor by which
#: the estimator, at its defaults, scales each group's centered total (GRPO: ``1/(std_g T + eps)``).
GroupScale = Callable[[Tensor, Groups], Tensor]
#: ``scale_diagnostics(scales) -> {key: float | None}`` of the ``group_scale`` values of the
#: groups whose total varies (possibly none).
ScaleDiagnostics = Callable[[Tensor], "dict[str, float | None]"]

#: A keyword-only parameter without a default: a required option.
REQUIRED = inspect.Parameter.empty

#: Policy signals a trainer can measure for an estimator's ``feedback`` (``[N]``, one per rollout):
#: ``clipped_ratio_advantage``: ``W_it = Â_i·ρ_it·1[token t unclipped]`` over the response tokens,
#: ``Â_i`` the rollout's advantage as trained on, ``ρ_it = exp(clamp(log π_new − log π_old, −20,
#: 20))`` with ``π_new`` the policy after the step's update and ``π_old`` the sampling policy,
#: unclipped meaning ``ρ <= 1 + ε_high`` where ``Â >= 0`` and ``ρ >= 1 − ε_low`` where ``Â < 0``
#: (the PPO loss's clip test), aggregated per rollout as the estimator's option ``w_agg`` says
#: (:data:`SIGNAL_AGGREGATIONS`; default ``"mean"``: ``(1/|o_i|) Σ_t W_it``).
SIGNALS = ("clipped_ratio_advantage",)

#: The estimator options a signal reads (a trainer passes them when it measures the signal).
SIGNAL_OPTIONS = {"clipped_ratio_advantage": ("w_agg",)}

#: ``w_agg`` of ``clipped_ratio_advantage`` (the official CTWA ``compute_ctwa_stats``): ``"mean"``
#: ``Σ_t W_t / |o|``; ``"mean_unclipped"`` ``Σ_t W_t / (number of unclipped tokens + 1e-8)``;
#: ``"sum"`` ``Σ_t W_t``.
SIGNAL_AGGREGATIONS = ("mean", "mean_unclipped", "sum")

#: The ``eps`` of ``w_agg="mean_unclipped"`` (the official ``compute_ctwa_stats`` default).
UNCLIPPED_EPS = 1e-8


def clipped_ratio_parts(
    advantages: Tensor, old_logps: Tensor, new_logps: Tensor, mask: Tensor, clip_low: float, clip_high: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per rollout ``(Σ_t W_t, response tokens, unclipped response tokens)``, each ``[N]`` float64
    (see :data:`SIGNALS`): what :func:`aggregate_signal` turns into the signal. Sums, so rows
    that make up one rollout (a multi-turn session's outputs) add up. Inputs as
    :func:`clipped_ratio_advantage`."""
    m = mask.to(torch.float64)
    ratio = torch.exp(torch.clamp(new_logps.to(torch.float64) - old_logps.to(device=new_logps.device, dtype=torch.float64),
                                  -20.0, 20.0))
    a = advantages.to(device=ratio.device, dtype=torch.float64).reshape(-1, 1)
    unclipped = torch.where(a >= 0, ratio <= 1.0 + float(clip_high), ratio >= 1.0 - float(clip_low)).to(torch.float64) * m
    return (a * ratio * unclipped).sum(dim=1), m.sum(dim=1), unclipped.sum(dim=1)


def aggregate_signal(weighted: Tensor, tokens: Tensor, unclipped: Tensor, w_agg: str = "mean") -> Tensor:
    """The ``clipped_ratio_advantage`` signal ``[N]`` from :func:`clipped_ratio_parts` as
    ``w_agg`` says (:data:`SIGNAL_AGGREGATIONS`). ``"mean"`` of a rollout without response
    tokens is 0 (the source divides 0 by 0 and drops the rollout as non-finite)."""
    if w_agg == "mean":
        return weighted / tokens.clamp(min=1.0)
    if w_agg == "mean_unclipped":
        return weighted / (unclipped + UNCLIPPED_EPS)
    if w_agg == "sum":
        return weighted
    raise ConfigError(f"w_agg must be one of {list(SIGNAL_AGGREGATIONS)}, got {w_agg!r}")


def clipped_ratio_advantage(
    advantages: Tensor, old_logps: Tensor, new_logps: Tensor, mask: Tensor, clip_low: float, clip_high: float,
    w_agg: str = "mean",
) -> Tensor:
    """The ``clipped_ratio_advantage`` signal ``[N]`` (float64) as a trainer measures it (the
    official CTWA ``compute_ctwa_stats``): ``advantages`` ``[N]`` one per rollout, the per-token
    log-probabilities ``old_logps`` (sampling policy) and ``new_logps`` (after the update) and the
    response ``mask``, all ``[N, T]``; ``w_agg`` as :data:`SIGNAL_AGGREGATIONS`."""
    return aggregate_signal(*clipped_ratio_parts(advantages, old_logps, new_logps, mask, clip_low, clip_high), w_agg)


def signal_options(spec: "Estimator", options: dict[str, Any]) -> dict[str, Any]:
    """The options of ``spec``'s signal (:data:`SIGNAL_OPTIONS`) among a step's ``options``, with
    the estimator's defaults: the keyword arguments a trainer passes to the signal function."""
    names = SIGNAL_OPTIONS.get(spec.signal or "", ())
    return {k: options.get(k, spec.options.get(k)) for k in names if k in spec.options}


#: ``feedback(rewards, groups, weights, signal, state, **options) -> new_state`` (module docstring).
Feedback = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class Estimator:
    """A registered estimator: its name, function, options with their defaults, and traits.

    Attributes:
        name, fn, options, summary: as registered (``options`` maps each keyword-only
            parameter but ``state`` to its default; :data:`REQUIRED` marks a required one).
        screens_rewards: checks the reward values itself (module docstring).
        combine: one of :data:`COMBINES`.
        batch_norm: ends with a normalization over the batch's rollouts (at its defaults);
            an option named ``batch_norm`` turns it off where the estimator has one.
        needs_ranges: requires the ``reward_ranges`` option (``K`` pairs ``lo < hi``), which
            the adapters fill from the reward suite.
        roles: names of the options that name components (an index, a component name, or a
            list of them); the function always receives indices (:func:`resolve_roles`).
        validate: the estimator's own check of its option values (:data:`OptionCheck`).
        example_options: options it runs with on a batch of ``K >= 2`` components with rewards
            in ``[0, 1]`` (``reward_ranges`` excluded: callers give ``[(0, 1)] * K``); used by
            the tests over every estimator and by ``mrgrpo estimators``.
        scale_option: the option that GRPOConfig's ``scale_rewards`` (and verl's
            ``norm_adv_by_std_in_grpo=false``, as ``"none"``) set (grpo: ``"scale"``).
        unscaled: never divides by a std, so ``scale_rewards="none"`` and
            ``norm_adv_by_std_in_grpo=false`` agree with it (dr_grpo).
        trl_default: the GRPOConfig ``multi_objective_aggregation`` whose stock TRL advantages
            this estimator reproduces at its defaults: the one a trainer runs when no
            estimator is named (grpo for ``sum_then_normalize``, gdpo for ``normalize_then_sum``).
        uses_weights: combines the components with the weights ``w_k``; ``False`` (e.g. an
            estimator with fixed roles): the estimator is called without weights, and a run's
            weight other than 1 (or 0) is refused when it is bound.
        stateful: its function takes ``state`` and returns ``(advantages, new_state)``.
        group_scale: at its defaults, the factor by which it scales each group's centered
            weighted total (:data:`GroupScale`): :func:`mrgrpo.diagnose` reports its median over
            the varying groups as ``scale[name]``.
        scale_diagnostics: further statistics of those per-group scales
            (:data:`ScaleDiagnostics`), reported by :func:`mrgrpo.diagnose` as ``report[name]``.
        signal: the policy signal its ``feedback`` needs (one of :data:`SIGNALS`), or ``None``.
        feedback: the state update from that signal (:data:`Feedback`), or ``None``.
    """

    name: str
    fn: EstimatorFn
    options: dict[str, Any]
    summary: str
    screens_rewards: bool = False
    combine: str = "other"
    batch_norm: bool = False
    needs_ranges: bool = False
    roles: tuple[str, ...] = ()
    validate: OptionCheck | None = None
    example_options: dict[str, Any] = field(default_factory=dict)
    scale_option: str | None = None
    unscaled: bool = False
    trl_default: str | None = None
    uses_weights: bool = True
    stateful: bool = False
    group_scale: GroupScale | None = None
    scale_diagnostics: ScaleDiagnostics | None = None
    signal: str | None = None
    feedback: Feedback | None = None

    @property
    def required(self) -> list[str]:
        """Names of the options without a default."""
        return [k for k, v in self.options.items() if v is REQUIRED]

    def defaults(self) -> dict[str, Any]:
        """The options that have a default, with it."""
        return {k: v for k, v in self.options.items() if v is not REQUIRED}

    def traits(self) -> dict[str, Any]:
        """The traits as plain data (for listings and JSON)."""
        return {
            "combine": self.combine,
            "batch_norm": self.batch_norm,
            "needs_ranges": self.needs_ranges,
            "roles": list(self.roles),
            "stateful": self.stateful,
            "scale_option": self.scale_option,
            "unscaled": self.unscaled,
            "trl_default": self.trl_default,
            "uses_weights": self.uses_weights,
            "group_scale": self.group_scale is not None,
            "signal": self.signal,
            "required": self.required,
        }

    def check_options(self, options: dict[str, Any]) -> None:
        """Unknown option names raise :class:`~mrgrpo.errors.ConfigError` (a ``ValueError``)."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            known = ", ".join(
                f"{k}={'<required>' if v is REQUIRED else repr(v)}" for k, v in self.options.items()
            ) or "none"
            hint = " (state is carried by the trainer, not set as an option)" if "state" in unknown and self.stateful else ""
            raise ConfigError(
                f"estimator {self.name!r} has no option(s) {unknown}; its options (defaults) are: {known}{hint}"
            )


_REGISTRY: dict[str, Estimator] = {}


def register_estimator(
    name: str,
    *,
    overwrite: bool = False,
    screens_rewards: bool = False,
    combine: str = "other",
    batch_norm: bool = False,
    needs_ranges: bool = False,
    roles: tuple[str, ...] | list[str] = (),
    validate: OptionCheck | None = None,
    example_options: dict[str, Any] | None = None,
    scale_option: str | None = None,
    unscaled: bool = False,
    trl_default: str | None = None,
    uses_weights: bool = True,
    group_scale: GroupScale | None = None,
    scale_diagnostics: ScaleDiagnostics | None = None,
    signal: str | None = None,
    feedback: Feedback | None = None,
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator registering ``fn(rewards, groups, weights, *, **options)`` under ``name``.

    Options must be keyword-only parameters with defaults (``inspect.Parameter.empty`` marks a
    required option). Registering a different function under a taken name raises unless
    ``overwrite=True``. ``screens_rewards=True``: the estimator checks the reward values itself
    (see the module docstring); leave it False unless the estimator calls
    :func:`check_reward_values`. A keyword-only parameter ``state`` makes the estimator
    stateful (module docstring). The other keywords are its traits, see :class:`Estimator`;
    they are checked here (a role or ``scale_option`` that is not an option, a required
    option without ``example_options``, ``needs_ranges`` without a ``reward_ranges`` option).
    """

    def decorator(fn: EstimatorFn) -> EstimatorFn:
        params = list(inspect.signature(fn).parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) != 3:
            raise TypeError(
                f"estimator {name!r} must take (rewards, groups, weights, *, **options), "
                f"got positional parameters {[p.name for p in positional]}"
            )
        keyword = {p.name: p.default for p in params if p.kind == p.KEYWORD_ONLY}
        stateful = "state" in keyword
        if stateful and keyword["state"] is not None:
            raise TypeError(f"estimator {name!r}: its state parameter must default to None (the first step)")
        options = {k: v for k, v in keyword.items() if k != "state"}
        examples = dict(example_options or {})
        role_names = (roles,) if isinstance(roles, str) else tuple(roles)
        problems = []
        if combine not in COMBINES:
            problems.append(f"combine must be one of {list(COMBINES)}, got {combine!r}")
        if trl_default is not None and trl_default not in COMBINES[:2]:
            problems.append(f"trl_default must be one of {list(COMBINES[:2])} or None, got {trl_default!r}")
        if needs_ranges and "reward_ranges" not in options:
            problems.append("needs_ranges=True but it has no reward_ranges option")
        for role in role_names:
            if role not in options:
                problems.append(f"role {role!r} is not one of its options {sorted(options)}")
        if scale_option is not None and scale_option not in options:
            problems.append(f"scale_option {scale_option!r} is not one of its options {sorted(options)}")
        if validate is not None and not callable(validate):
            problems.append("validate must be a function (options, num_components) -> None")
        for trait, value in (("group_scale", group_scale), ("scale_diagnostics", scale_diagnostics)):
            if value is not None and not callable(value):
                problems.append(f"{trait} must be a function")
        if scale_diagnostics is not None and group_scale is None:
            problems.append("scale_diagnostics needs a group_scale")
        if (signal is None) != (feedback is None):
            problems.append("signal and feedback go together (the signal is what the feedback reads)")
        if signal is not None and signal not in SIGNALS:
            problems.append(f"signal must be one of {list(SIGNALS)}, got {signal!r}")
        if feedback is not None and not callable(feedback):
            problems.append("feedback must be a function")
        if feedback is not None and not stateful:
            problems.append("feedback needs a stateful estimator (a keyword-only state parameter)")
        unknown = sorted(set(examples) - set(options))
        if unknown:
            problems.append(f"example_options has unknown option(s) {unknown}")
        missing = [k for k, v in options.items() if v is REQUIRED and k not in examples]
        if missing:
            problems.append(f"required option(s) {missing} need a value in example_options")
        if problems:
            raise TypeError(f"estimator {name!r}: " + "; ".join(problems))
        existing = _REGISTRY.get(name)
        if existing is not None and existing.fn is not fn and not overwrite:
            raise ConfigError(f"an estimator named {name!r} is already registered; pass overwrite=True to replace it")
        if trl_default is not None:
            for other in _REGISTRY.values():
                if other.name != name and other.trl_default == trl_default and not overwrite:
                    raise ConfigError(
                        f"estimator {other.name!r} already reproduces TRL's {trl_default} (trl_default); "
                        "one estimator per setting"
                    )
        doc = inspect.getdoc(fn) or ""
        _REGISTRY[name] = Estimator(
            name, fn, options, doc.splitlines()[0] if doc else "", screens_rewards,
            combine=combine, batch_norm=batch_norm, needs_ranges=needs_ranges, roles=role_names,
            validate=validate, example_options=examples, scale_option=scale_option, unscaled=unscaled,
            trl_default=trl_default, uses_weights=uses_weights, stateful=stateful, group_scale=group_scale,
            scale_diagnostics=scale_diagnostics, signal=signal, feedback=feedback,
        )
        return fn

    return decorator


def available_estimators() -> list[str]:
    """Names of all registered estimators, sorted."""
    return sorted(_REGISTRY)


def get_estimator(name: str) -> Estimator:
    """The registered :class:`Estimator` called ``name``."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownNameError("estimator", name, available_estimators(), "register your own with @mrgrpo.register_estimator") from None


#: dtypes computed in float32 (exactly representable there); every other input in float64.
FLOAT32_COMPUTE = (torch.float32, torch.float16, torch.bfloat16)


def as_reward_matrix(rewards: Any) -> tuple[Tensor, torch.dtype]:
    """Validate ``rewards`` ``[N, K]``: the values to compute with, and the dtype to return in.

    Accepts a torch tensor (any device but ``meta``), a numpy array or nested lists. NaN = not
    scored; ±inf raises. float32, float16 and bfloat16 tensors are computed in float32 (their
    values are exact there); float64 tensors, integer tensors and lists in float64. Lists and
    integer inputs return float32.
    """
    values, out_dtype, _ = screen_rewards(rewards)
    return values, out_dtype


def screen_rewards(rewards: Any) -> tuple[Tensor, torch.dtype, bool]:
    """:func:`as_reward_matrix` plus whether any entry is NaN."""
    values, out_dtype = reward_tensor(rewards)
    return values, out_dtype, check_reward_values(values)


def reward_tensor(rewards: Any) -> tuple[Tensor, torch.dtype]:
    """The shape and dtype half of :func:`as_reward_matrix` (values not looked at): ``[N, K]``
    contiguous in the dtype to compute in, and the dtype to return in."""
    if isinstance(rewards, Tensor):
        if rewards.device.type == "meta":
            raise InputError(
                "rewards are on the meta device (shapes only, no values): pass a tensor with data (cpu or cuda)"
            )
        tensor = rewards.detach()
    elif isinstance(rewards, np.ndarray):
        if rewards.dtype.kind not in "biuf":
            raise InputError(f"rewards must be numeric, got a numpy array of dtype {rewards.dtype}")
        tensor = torch.from_numpy(np.ascontiguousarray(rewards))
    else:
        try:
            tensor = torch.tensor(rewards, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError) as error:
            raise InputError(
                f"rewards must be a [N, K] tensor, array or nested list of numbers (None is not "
                f"allowed: use float('nan') for an unscored component): {error}"
            ) from None
    if tensor.is_complex():
        raise InputError("rewards must be real numbers, got a complex tensor")
    is_array = isinstance(rewards, (Tensor, np.ndarray))
    out_dtype = tensor.dtype if is_array and tensor.is_floating_point() else torch.float32
    if tensor.dim() != 2:
        hint = " (for a single component use rewards[:, None])" if tensor.dim() == 1 else ""
        raise InputError(f"rewards must be 2-D [N rollouts, K components], got shape {tuple(tensor.shape)}{hint}")
    if tensor.shape[1] == 0:
        raise InputError("rewards has no components (K = 0): pass at least one reward column")
    compute = torch.float32 if tensor.dtype in FLOAT32_COMPUTE else torch.float64
    return tensor.to(compute).contiguous(), out_dtype


def check_reward_values(values: Tensor) -> bool:
    """Whether any reward is NaN (not scored); ±inf raises an :class:`InputError` naming the
    first one. One fused reduction decides "no NaN and no ±inf" in the common case."""
    # The sum is finite unless some entry is NaN or ±inf (or the sum overflows).
    if not values.numel() or math.isfinite(values.sum().item()):
        return False
    infinite = torch.isinf(values)
    if bool(infinite.any()):
        row, col = (int(i) for i in infinite.nonzero()[0])
        raise InputError(
            f"rewards contain {int(infinite.sum())} infinite value(s) (first at row {row}, component {col}): "
            "clip them to a finite range, or use NaN to mark a component as not scored"
        )
    return bool(torch.isnan(values).any())


def zero_unscored(advantages: Tensor, values: Tensor) -> Tensor:
    """``advantages`` with exact zeros on the rollouts whose every component is NaN."""
    return torch.where(scored_rows(values), advantages, torch.zeros_like(advantages))


def as_weights(weights: Any, num_components: int, device: torch.device) -> Tensor:
    """``[K]`` float64 weights (default all 1); wrong length or non-finite values raise."""
    if weights is None:
        return torch.ones(num_components, dtype=torch.float64, device=device)
    if isinstance(weights, Tensor):
        w = weights.detach().to(device="cpu", dtype=torch.float64)
    else:
        w = torch.as_tensor(np.asarray(weights, dtype=np.float64))
    if w.dim() != 1 or w.numel() != num_components:
        raise ConfigError(
            f"weights must have one entry per reward component ({num_components}), got shape {tuple(w.shape)}"
        )
    # (K numbers: checked in Python, cheaper than a tensor reduction)
    if not all(math.isfinite(v) for v in w.tolist()):
        raise ConfigError(f"weights must be finite, got {w.tolist()}")
    return w.to(device)


def compute_advantages(
    rewards: Any,
    group_ids: Any,
    estimator: str = "grpo",
    weights: Any = None,
    **options: Any,
) -> Tensor:
    """One advantage per rollout from a multi-component reward batch.

    Args:
        rewards: ``[N, K]`` torch tensor (any device; the result stays there), numpy array or
            nested lists. NaN = component not scored for that rollout; ±inf is an error.
        group_ids: ``[N]`` group id per rollout (rollouts of one prompt share an id): ints, an
            integer tensor, or any hashables such as strings. Groups may differ in size and
            need not be contiguous. A :class:`Groups` from :func:`make_groups` is used as it
            is (build it once where every batch has the same grouping).
        estimator: a registered name, see :func:`available_estimators`.
        weights: ``[K]`` component weights, default all 1.
        **options: the estimator's options (see its docstring); unknown names raise. Options
            that name components (the estimator's ``roles``) take indices here (names need
            the component names: :func:`validate_options`).

    Returns:
        ``[N]`` advantages, finite, in the input's float dtype (float32 for lists and integer
        input), on the input's device. float64 inputs are computed in float64; float32,
        float16 and bfloat16 inputs in float32 with shifted two-pass moments (within 1e-6 of
        the float64 result, relative to the largest advantage); values too large or too small
        for the squares are rescaled internally by powers of two, so every finite input gives
        exact, finite results. A rollout whose components are all NaN gets exactly 0 and is
        left out of every batch statistic. A stateful estimator runs from its first-step
        state (see :func:`compute_advantages_with_state` to carry it).

    Raises:
        ValueError: bad shapes, ±inf, wrong-length weights, unknown estimator or option, an
            invalid option value (a :class:`~mrgrpo.errors.ConfigError`), or advantages that
            do not fit the returned dtype (an :class:`~mrgrpo.errors.InputError` naming the
            overflow); the message names the problem and the fix.
    """
    advantages, _ = _compute(rewards, group_ids, estimator, weights, options, None)
    return advantages


def compute_advantages_with_state(
    rewards: Any,
    group_ids: Any,
    estimator: str = "grpo",
    weights: Any = None,
    *,
    state: dict[str, Any] | None = None,
    **options: Any,
) -> tuple[Tensor, dict[str, Any] | None]:
    """:func:`compute_advantages` carrying a stateful estimator's state across batches.

    ``state``: what the previous training batch returned (``None`` on the first). Returns
    ``(advantages [N], new_state)``: ``new_state`` is plain JSON data for a stateful estimator
    (``None`` when its options ask for no state), and ``None`` for a stateless one. Pure: the
    same inputs give the same outputs, and ``state`` is not modified. A trainer stores
    ``new_state`` after a training batch and saves it with its checkpoints; an evaluation
    batch passes the stored state and drops what comes back.
    """
    return _compute(rewards, group_ids, estimator, weights, options, state)


def _compute(
    rewards: Any, group_ids: Any, estimator: str, weights: Any, options: dict[str, Any], state: Any
) -> tuple[Tensor, dict[str, Any] | None]:
    spec = get_estimator(estimator)
    spec.check_options(options)
    if state is not None and not isinstance(state, dict):
        raise ConfigError(f"{estimator}: state must be None or the dict a previous step returned, got {type(state).__name__}")
    if state is not None and not spec.stateful:
        raise ConfigError(f"estimator {estimator!r} carries no state; pass state=None")
    values, out_dtype = reward_tensor(rewards)
    options = validate_options(spec, options, values.shape[1])
    # (an estimator that screens its own rewards zeroes the unscored rows itself)
    has_nan = False if spec.screens_rewards else check_reward_values(values)
    groups = make_groups(group_ids, values.shape[0], device=values.device)
    w = as_weights(weights, values.shape[1], values.device)
    return compute_checked(spec, values, out_dtype, has_nan, groups, w, fits_float32(w), options, state)


def compute_checked(
    spec: Estimator,
    values: Tensor,
    out_dtype: torch.dtype,
    has_nan: bool,
    groups: Groups,
    weights: Tensor,
    weights_fit_float32: bool,
    options: dict[str, Any],
    state: dict[str, Any] | None,
) -> tuple[Tensor, dict[str, Any] | None]:
    """The part of :func:`compute_advantages_with_state` after its argument checks, for a
    caller that made them once and keeps the results (the trainer: every step has the same
    estimator, options and weights): ``values``/``out_dtype`` from :func:`reward_tensor`,
    ``has_nan`` from :func:`check_reward_values` (``False`` for an estimator that
    ``screens_rewards``), ``groups`` from :func:`make_groups`, ``weights`` from
    :func:`as_weights` and ``weights_fit_float32`` = ``fits_float32(weights)``, ``options``
    from :func:`validate_options` for ``values``' K. Same result as the checked call."""
    estimator = spec.name
    w = weights
    if values.dtype == torch.float32 and not weights_fit_float32:
        values = values.to(torch.float64)
    if values.shape[0] == 0:
        return torch.zeros(0, dtype=out_dtype, device=values.device), state
    new_state = None
    if spec.stateful:
        result = spec.fn(values, groups, w, state=state, **options)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise RuntimeError(f"stateful estimator {estimator!r} must return (advantages, new_state); this is a bug in the estimator")
        advantages, new_state = result
        _check_state(new_state, estimator)
    else:
        advantages = spec.fn(values, groups, w, **options)
    if has_nan:
        advantages = zero_unscored(advantages, values)
    return check_output(advantages, out_dtype, estimator), new_state


def apply_feedback(
    spec: Estimator,
    values: Tensor,
    groups: Groups,
    weights: Tensor,
    options: dict[str, Any],
    state: dict[str, Any] | None,
    signal: Any,
) -> dict[str, Any] | None:
    """The state after a policy update, for an estimator with a ``feedback``: ``state`` is the
    one the step's advantages were computed from, ``values``/``groups``/``weights``/``options``
    those of that step (as :func:`compute_checked` took them), ``signal`` ``[N]`` the measured
    :attr:`Estimator.signal` of its rollouts in the same order. The signal must be finite
    (an :class:`~mrgrpo.errors.InputError` otherwise); the new state is checked as a step's."""
    if spec.feedback is None:
        raise ConfigError(f"estimator {spec.name!r} takes no feedback from the policy update")
    s = torch.as_tensor(signal).detach().to(device=values.device, dtype=torch.float64).reshape(-1)
    if s.numel() != values.shape[0]:
        raise InputError(
            f"{spec.name}: the policy signal has {s.numel()} entries but the step had {values.shape[0]} rollouts"
        )
    if not bool(torch.isfinite(s).all()):
        raise InputError(f"{spec.name}: the policy signal has non-finite entries: check the policy's log-probabilities")
    new_state = spec.feedback(values, groups, weights, s, state, **options)
    _check_state(new_state, spec.name)
    return new_state


def _check_state(state: Any, estimator: str) -> None:
    """A returned state must be ``None`` or a dict that strict JSON can hold."""
    if state is None:
        return
    if not isinstance(state, dict):
        raise RuntimeError(f"estimator {estimator!r} returned a state of type {type(state).__name__}, not a dict; this is a bug in the estimator")
    try:
        json.dumps(state, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise RuntimeError(
            f"estimator {estimator!r} returned a state that is not plain JSON data ({error}); this is a bug in the estimator"
        ) from None


def validate_options(
    estimator: str | Estimator,
    options: dict[str, Any],
    num_components: int | None = None,
    component_names: list[str] | tuple[str, ...] | None = None,
    *,
    partial: bool = False,
) -> dict[str, Any]:
    """Check an estimator's options without data; return them with roles resolved to indices.

    Checks, in order: the option names; that every required option is given; that ``roles``
    name components (an index ``0 <= i < K``, or a name in ``component_names``; names need
    ``component_names``); ``reward_ranges`` where the estimator ``needs_ranges`` (present,
    ``K`` pairs with ``lo < hi``, finite); then the estimator's own ``validate``. ``K``
    (``num_components``) may be ``None`` where it is not known yet: checks that need it wait.
    This is what every entry point runs where the estimator is chosen (the trainer's
    construction, ``mrgrpo train --check``, the verl launcher), so a bad value fails there.
    ``partial=True``: the components are not known yet (a config read before its reward suite
    is built): role names stay names and a missing ``reward_ranges`` is allowed (the caller
    fills it from the suite later and checks again).

    Raises:
        ConfigError: one line naming the option, the problem and the fix.
    """
    spec = estimator if isinstance(estimator, Estimator) else get_estimator(estimator)
    spec.check_options(options)
    if component_names is not None:
        component_names = [str(n) for n in component_names]
        if num_components is None:
            num_components = len(component_names)
    missing = [k for k in spec.required if k not in options]
    if missing:
        example = ", ".join(f"{k}={spec.example_options[k]!r}" for k in missing if k in spec.example_options)
        raise ConfigError(
            f"{spec.name} needs option(s) {missing}" + (f", e.g. {example}" if example else "")
        )
    resolved = resolve_roles(spec, options, num_components, component_names, partial=partial)
    if spec.needs_ranges and not (partial and resolved.get("reward_ranges") is None):
        from mrgrpo.estimators._checks import check_reward_ranges

        ranges = resolved.get("reward_ranges")
        k = num_components
        if k is None and ranges is not None:
            try:
                k = len(ranges)
            except TypeError:
                k = -1
        try:
            check_reward_ranges(ranges, k if k is not None else "K", spec.name)
        except ValueError as error:
            raise ConfigError(str(error)) from None
    if spec.validate is not None:
        try:
            spec.validate(resolved, num_components)
        except ConfigError:
            raise
        except (ValueError, TypeError) as error:
            raise ConfigError(str(error)) from None
    return resolved


def resolve_roles(
    spec: Estimator,
    options: dict[str, Any],
    num_components: int | None = None,
    component_names: list[str] | None = None,
    *,
    partial: bool = False,
) -> dict[str, Any]:
    """``options`` with each role option's component names replaced by indices (a single
    value stays single, a list stays a list); indices checked ``0 <= i < K`` when ``K`` is known.
    ``partial``: names stay names when ``component_names`` is not known."""
    out = dict(options)
    for role in spec.roles:
        value = out.get(role)
        if value is None:
            continue
        many = isinstance(value, (list, tuple))
        items = list(value) if many else [value]
        indices = []
        for item in items:
            if isinstance(item, bool) or not isinstance(item, (int, str)):
                raise ConfigError(
                    f"{spec.name}: {role} must name a component by index or name"
                    + (" (or a list of them)" if many else "") + f", got {item!r}"
                )
            if isinstance(item, str):
                if component_names is None and partial:
                    indices.append(item)
                    continue
                if component_names is None:
                    raise ConfigError(
                        f"{spec.name}: {role}={item!r} names a component, but the component names are not "
                        "known here: give its 0-based index instead"
                    )
                if item not in component_names:
                    raise ConfigError(f"{spec.name}: {role}={item!r} is not a component; the components are {component_names}")
                item = component_names.index(item)
            if item < 0 or (num_components is not None and item >= num_components):
                bound = f"0..{num_components - 1}" if num_components else ">= 0"
                raise ConfigError(f"{spec.name}: {role}={item} is not a component index ({bound})")
            indices.append(item)
        if len(set(indices)) != len(indices):
            raise ConfigError(f"{spec.name}: {role} names a component twice: {items}")
        out[role] = indices if many else indices[0]
    return out


def trl_default_estimator(aggregation: str) -> str:
    """The estimator that reproduces stock TRL's advantages for ``multi_objective_aggregation``
    (its ``trl_default`` trait)."""
    for spec in _REGISTRY.values():
        if spec.trl_default == aggregation:
            return spec.name
    raise ConfigError(f"no registered estimator reproduces TRL's multi_objective_aggregation={aggregation!r}")


def fits_float32(weights: Tensor) -> bool:
    """Weights whose nonzero magnitudes keep float32 products exact enough: within 2^±60."""
    nonzero = [abs(v) for v in weights.tolist() if v != 0]
    return not nonzero or (max(nonzero) <= 2.0**60 and min(nonzero) >= 2.0**-60)


def check_output(advantages: Tensor, out_dtype: torch.dtype, estimator: str) -> Tensor:
    """``advantages`` cast to ``out_dtype``, checked finite there (one fused reduction)."""
    if advantages.numel() == 0:
        return advantages.to(out_dtype)
    low, high = (float(v) for v in torch.aminmax(advantages))
    if math.isnan(low) or math.isnan(high):
        raise RuntimeError(f"estimator {estimator!r} produced non-finite advantages; this is a bug in the estimator")
    largest = max(abs(low), abs(high))
    limit = torch.finfo(out_dtype).max
    if largest > limit:
        raise InputError(
            f"{estimator} advantages overflow {str(out_dtype).removeprefix('torch.')} (largest |advantage| "
            f"{largest:.4g} > {limit:.4g}): pass the rewards in a wider dtype (e.g. rewards.double()), or rescale them"
        )
    return advantages.to(out_dtype)


def scored_rows(rewards: Tensor) -> Tensor:
    """``[N]`` bool: the rollout has at least one scored component."""
    return ~torch.isnan(rewards).all(dim=1)


__all__ = [
    "COMBINES",
    "REQUIRED",
    "Estimator",
    "Groups",
    "as_reward_matrix",
    "SIGNALS",
    "SIGNAL_AGGREGATIONS",
    "SIGNAL_OPTIONS",
    "aggregate_signal",
    "clipped_ratio_parts",
    "signal_options",
    "clipped_ratio_advantage",
    "apply_feedback",
    "as_weights",
    "available_estimators",
    "check_reward_values",
    "compute_advantages",
    "compute_advantages_with_state",
    "get_estimator",
    "register_estimator",
    "resolve_roles",
    "scored_rows",
    "trl_default_estimator",
    "validate_options",
]
