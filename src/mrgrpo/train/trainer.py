"""``MultiRewardGRPOTrainer``: TRL's GRPOTrainer with advantages from any mrgrpo estimator.

TRL computes advantages inline in ``_generate_and_score_completions`` (no hook). This
subclass keeps the gathered reward matrix from ``_calculate_rewards`` (``[B_global, K]``, NaN =
unscored), recomputes the advantages with :func:`mrgrpo.compute_advantages` over the whole
gathered generation batch (groups = consecutive blocks of ``num_generations`` rollouts of one
prompt), writes this process's slice into the batch the loss reads, and logs what was used.
Everything else (generation, vLLM, the loss, DeepSpeed/multi-GPU) is TRL's, unchanged. The TRL
internals this relies on are named and checked, at construction, in
:mod:`mrgrpo.train.trl_compat`.

A trainer that already subclasses ``GRPOTrainer`` adopts mrgrpo with :class:`MultiRewardMixin`
(``class MyTrainer(MultiRewardMixin, MyGRPOTrainer)``), keeping its own base class.

GRPOConfig's advantage settings are mapped, never ignored (:func:`resolve_estimator`, from the
estimators' registered traits): ``scale_rewards`` becomes grpo's ``scale`` option,
``multi_objective_aggregation="normalize_then_sum"`` selects ``gdpo`` when no estimator is
named, and a setting that contradicts the chosen estimator is a
:class:`~mrgrpo.errors.ConfigError`.

Logged every step (``mrgrpo/`` prefix, averaged over a logging interval like TRL's metrics):
``rewards/<name>`` component means, ``reward_total`` (weighted sum with our weights),
``advantages/{mean,std,abs_mean,min,max,frac_zero}``, ``seconds`` (time in mrgrpo code),
``state/...`` (a stateful estimator's numeric state entries, e.g. Lagrange multipliers), and
``diag/...`` scalars from :func:`mrgrpo.diagnose` on the main process.

**Feedback from the policy update.** An estimator with a ``feedback`` (``ctwa``; see
:mod:`mrgrpo.estimators.registry`) needs a per-rollout policy signal measured after the update.
For such an estimator the trainer keeps each training generation batch's rows (this process's
share), its gathered rewards and the state its advantages were computed from; once every
micro-step that trains on the batch has run and the optimizer has stepped (a callback's
``on_step_end``, before the checkpoint is saved), it runs one extra no-grad forward pass of the
updated policy over those rows, computes ``s_i = mean_t Â_i·ρ_it·1[unclipped]`` over the loss
mask (:data:`~mrgrpo.estimators.registry.SIGNALS`; ``ρ`` against the sampling policy's
log-probabilities: TRL's ``old_per_token_logps`` where TRL computes them, else those of the
loss's own forward passes, captured row by row before the optimizer steps; the clip test with GRPOConfig's
``epsilon``/``epsilon_high``), gathers ``s`` over all processes in the rewards' order and hands it
to :func:`~mrgrpo.estimators.registry.apply_feedback`, whose state the next generation batch
uses and the checkpoint saves. Its cost (both forward passes and the update) is logged once per
generation batch as ``mrgrpo/feedback_seconds``.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mrgrpo.diagnostics import diagnose
from mrgrpo.errors import ConfigError, InputError
from mrgrpo.estimators import get_estimator
from mrgrpo.estimators.binding import Binding, apply_host, bind
from mrgrpo.estimators.groups import Groups, make_groups
from mrgrpo.estimators.registry import (
    apply_feedback,
    as_weights,
    check_reward_values,
    clipped_ratio_advantage,
    compute_checked,
    fits_float32,
    reward_tensor,
    signal_options,
)
from mrgrpo.rewards.base import RewardSuite
from mrgrpo.train import trl_compat
from mrgrpo.train.host import ESTIMATOR_STATE_FILE, check_given_binding, read_estimator_state, trl_host
from mrgrpo.train.shared_prefix import PromptSharingMixin

GRPOTrainer, _ = trl_compat.import_grpo()
#: Key of the row index a feedback estimator's training batch carries through TRL's shuffle and split.
ROW_KEY = "mrgrpo_row"
from transformers import TrainerCallback  # noqa: E402  (after the check that TRL, and so transformers, is installed)


def flatten_scalars(data: Any, prefix: str) -> dict[str, float]:
    """Numeric leaves of a nested dict as ``prefix/a/b`` keys (lists and ``None`` skipped)."""
    out: dict[str, float] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(flatten_scalars(value, f"{prefix}/{key}"))
    elif isinstance(data, bool):
        out[prefix] = float(data)
    elif isinstance(data, (int, float)):
        out[prefix] = float(data)
    return out


def reward_means(values: np.ndarray, weights: np.ndarray) -> tuple[list[float], float]:
    """Per-component means of ``values`` ``[N, K]`` (float64) over its scored entries (NaN =
    unscored; NaN for a component with none) and the mean weighted total over the rollouts with
    at least one scored component (NaN entries count 0; NaN when there is none).

    A step's batch is tiny, so the cost is the number of numpy calls, not the arithmetic: a
    batch without NaN (one column sum tells) takes three; the general path gives the same
    numbers on it (the same reductions over the same arrays)."""
    n = values.shape[0]
    if n and values.flags.c_contiguous:
        sums = values.sum(axis=0).tolist()
        if not any(math.isnan(x) for x in sums):  # no NaN entry (a NaN propagates to its sum)
            return [x / n for x in sums], float((values @ weights).sum()) / n
    present = ~np.isnan(values)
    filled = np.where(present, values, 0.0)
    count = present.sum(axis=0)
    scored = present.any(axis=1)
    means = (filled.sum(axis=0) / np.maximum(count, 1)).tolist()
    totals = filled[scored] @ weights
    return (
        [mean if c else float("nan") for c, mean in zip(count.tolist(), means)],
        float(totals.mean()) if totals.size else float("nan"),
    )


#: ``frac_zero`` counts an advantage as zero below this fraction of the batch's largest ``|a|``
#: (at least of 1): an estimator computing in float32 (TRL's rewards are float32) that
#: batch-whitens leaves ~1e-8 where a constant group's rollouts get 0, which must still count.
ZERO_ADVANTAGE_TOLERANCE = 1e-6


def advantage_stats(advantages: np.ndarray, listed: list[float] | None = None) -> tuple[float, ...]:
    """``(mean, std (ddof=1; 0 for one rollout), abs_mean, min, max, frac_zero)`` of a float64
    ``[N]`` array (NaN for every entry when ``N = 0``); ``frac_zero``: the share with ``|a| <=``
    :data:`ZERO_ADVANTAGE_TOLERANCE` ``· max(1, max |a|)``; ``listed``: its ``tolist()``, when
    the caller has it. The same numbers as numpy's ``mean``/``std``/..., in fewer numpy calls
    (the reductions numpy's own run, each once)."""
    a = advantages
    n = a.size
    if not n:
        return (float("nan"),) * 6
    listed = a.tolist() if listed is None else listed
    mean = float(a.sum()) / n
    if n > 1:
        deviation = a - mean
        std = math.sqrt(float((deviation * deviation).sum()) / (n - 1))
    else:
        std = 0.0
    low, high = float(a.min()), float(a.max())
    tolerance = ZERO_ADVANTAGE_TOLERANCE * max(1.0, -low, high)
    zero = sum(1 for x in listed if -tolerance <= x <= tolerance)
    return mean, std, float(np.abs(a).sum()) / n, low, high, zero / n


def resolve_estimator(args: Any, estimator: str | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The estimator and options implied by ``estimator``/``options`` and GRPOConfig ``args``
    (:func:`mrgrpo.estimators.binding.apply_host`, from the estimators' registered traits):

    * ``estimator=None`` (a drop-in for GRPOTrainer): the estimator whose ``trl_default`` is
      the config's aggregation (``gdpo`` for ``normalize_then_sum``, else ``grpo``), so the
      advantages equal stock TRL's for the same config;
    * ``scale_rewards`` ``"batch"``/``"none"`` becomes the estimator's ``scale_option``
      (grpo's ``scale``); ``"none"`` also agrees with an ``unscaled`` estimator (``dr_grpo``);
      every other estimator scales its own way, so a non-default ``scale_rewards`` with one is
      rejected (TRL itself ignores it under ``normalize_then_sum``);
    * ``multi_objective_aggregation`` other than the estimator's ``combine`` is rejected.

    A contradiction raises :class:`ConfigError`. The trainer binds with the same mapping
    (:func:`mrgrpo.estimators.binding.bind`); this shows its outcome without the components.
    """
    host = trl_host(args)
    spec = get_estimator(estimator if estimator is not None else host.default_estimator())
    return spec.name, apply_host(spec, dict(options), host)


def reward_func_names(reward_funcs: Any) -> list[str] | None:
    """The component names TRL will give ``reward_funcs`` (a function's ``__name__``, a model's
    last path part), known before GRPOTrainer is built; ``None`` if there are none."""
    if reward_funcs is None:
        return None
    funcs = reward_funcs if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    names = []
    for func in funcs:
        if isinstance(func, str):
            names.append(func.split("/")[-1])
        elif getattr(getattr(func, "config", None), "_name_or_path", None):
            names.append(str(func.config._name_or_path).split("/")[-1])
        else:
            names.append(str(getattr(func, "__name__", type(func).__name__)))
    return names


class MultiRewardMixin:
    """Advantages from a registered mrgrpo estimator, for any ``trl.GRPOTrainer`` subclass.

    Put it first among the bases: ``class MyTrainer(MultiRewardMixin, MyGRPOTrainer)``; the
    keyword arguments below are taken off, everything else goes to your trainer unchanged.
    :class:`MultiRewardGRPOTrainer` is ``MultiRewardMixin`` on ``trl.GRPOTrainer``.

    Args:
        suite: a :class:`~mrgrpo.rewards.RewardSuite`; its components become the reward
            functions and its weights and ranges the estimator's. Alternatively pass TRL's
            ``reward_funcs`` (weights from ``args.reward_weights``, ranges from each function's
            ``range`` attribute when present).
        estimator: a name from :func:`mrgrpo.available_estimators`; ``None`` (default): what
            the GRPOConfig asks for (``gdpo`` for ``normalize_then_sum``, else ``grpo`` with
            ``scale`` = ``scale_rewards``), i.e. stock TRL's advantages. See
            :func:`resolve_estimator` for how GRPOConfig settings map and which are rejected.
        estimator_options: the estimator's keyword options; ``reward_ranges`` defaults to the
            suite's (or the reward functions' ``range``) for estimators that need them.
        diagnostics: run :func:`mrgrpo.diagnose` on the main process (its advantage-collapse
            figure counts the advantages actually trained on, with the real options and state).
        diagnostics_every: run it every N training batches (1 = every one; the per-step
            ``mrgrpo/rewards``, ``reward_total`` and ``advantages`` metrics are always logged).
        correlation_ema: with an estimator that has the option of that name (``corr_grpo``,
            ``sa_corr_grpo``), smooth the batch-pooled correlation across training steps with
            this EMA decay: the same as ``estimator_options={"correlation_ema": decay}``.
        binding: an estimator already bound to this run's components and weights
            (:func:`mrgrpo.estimators.binding.bind`, as ``mrgrpo train`` does before the model
            loads), instead of ``estimator``/``estimator_options``/``correlation_ema``.

    The estimator is bound to the run at construction (:func:`mrgrpo.estimators.binding.bind`:
    option values, roles, ranges, weights it cannot use, GRPOConfig settings), before
    GRPOTrainer builds anything: a mistake raises :class:`~mrgrpo.errors.ConfigError`; a saved
    state that does not fit is refused when the checkpoint is loaded. Options that name components (an estimator's
    ``roles``) take the suite's component names or indices. A stateful estimator's state
    (:func:`mrgrpo.compute_advantages_with_state`) moves with every training batch (evaluation
    batches use it and leave it), is saved in every checkpoint
    (``mrgrpo_estimator_state.json``), restored on resume, and its numeric entries are logged
    every step as ``mrgrpo/state/...``.
        **kwargs: everything ``trl.GRPOTrainer`` takes (``model``, ``args``, ``train_dataset``,
            ``processing_class``, ``callbacks``, ...).
    """

    def __init__(
        self,
        *args: Any,
        suite: RewardSuite | None = None,
        estimator: str | None = None,
        estimator_options: dict[str, Any] | None = None,
        diagnostics: bool = True,
        diagnostics_every: int = 1,
        correlation_ema: float | None = None,
        binding: Binding | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(diagnostics_every, bool) or not isinstance(diagnostics_every, int) or diagnostics_every < 1:
            raise ConfigError(f"diagnostics_every must be an int >= 1, got {diagnostics_every!r}")
        trl_compat.check_trainer_class(type(self))
        grpo_args = kwargs.get("args", args[2] if len(args) > 2 else None)  # (model, reward_funcs, args)
        if suite is not None:
            if kwargs.get("reward_funcs") is not None:
                raise ConfigError("pass either suite= or reward_funcs=, not both")
            if args:
                raise TypeError("with suite=, pass the other GRPOTrainer arguments by keyword")
            names: list[str] | None = suite.names
            ranges: list[tuple[float, float]] | None = suite.reward_ranges
            weights, weights_from = list(suite.weights), "the suite's weights (suite.with_weights({...}))"
            given = getattr(grpo_args, "reward_weights", None)
            if given is not None and [float(w) for w in given] != [float(w) for w in suite.weights]:
                raise ConfigError(
                    f"GRPOConfig(reward_weights={list(given)}) contradicts the suite's weights {list(suite.weights)}: "
                    "set weights with suite.with_weights({...}) and leave reward_weights unset"
                )
        else:
            funcs = kwargs.get("reward_funcs", args[1] if len(args) > 1 else None)
            names = reward_func_names(funcs)
            found = [getattr(f, "range", None) for f in (funcs if isinstance(funcs, (list, tuple)) else [funcs])]
            ranges = [tuple(r) for r in found] if funcs is not None and all(r is not None for r in found) else None
            weights, weights_from = getattr(grpo_args, "reward_weights", None), "GRPOConfig(reward_weights)"
        host = trl_host(grpo_args, weights_from)
        # Every setting is checked here, once, before GRPOTrainer builds anything (one ConfigError).
        if binding is None:
            binding = bind(estimator, estimator_options, names=names, ranges=ranges, weights=weights, host=host,
                           correlation_ema=correlation_ema)
        else:
            check_given_binding(binding, host, names, weights, estimator, estimator_options, correlation_ema)
        self.binding: Binding = binding
        self.correlation_ema = correlation_ema if correlation_ema is not None else binding.options.get("correlation_ema")
        self.estimator_state: dict[str, Any] | None = binding.initial_state()  # carried across steps
        if suite is not None:
            kwargs["reward_funcs"] = list(suite.components)
            if grpo_args is not None:
                grpo_args.reward_weights = list(suite.weights)  # so TRL's own `reward` log agrees
        super().__init__(*args, **kwargs)
        trl_compat.check_trainer(self)
        if suite is not None:
            self.reward_weights = torch.tensor(suite.weights, dtype=torch.float32)
            self.reward_names: list[str] = suite.names
        else:
            self.reward_names = list(self.reward_func_names)
        self.reward_ranges = ranges
        self.estimator = binding.name
        self.estimator_options = binding.call_options()
        # Bound once: every step has the same estimator, options, weights and metric names,
        # so a step runs only the checks that look at its data (compute_checked).
        self._spec = binding.spec
        self._num_components = len(self.reward_names)
        self._weights_cache: dict[torch.device, tuple[Any, torch.Tensor, torch.Tensor, bool, np.ndarray]] = {}
        self._reward_metric_keys = [f"mrgrpo/rewards/{name}" for name in self.reward_names]
        self._advantage_metric_keys = [
            f"mrgrpo/advantages/{key}" for key in ("mean", "std", "abs_mean", "min", "max", "frac_zero")
        ]
        self.run_diagnostics = diagnostics
        self.diagnostics_every = diagnostics_every
        self._diagnostics_batches = 0  # training batches seen, for diagnostics_every
        self._groups_cache: dict[tuple[int, str, torch.device], Groups] = {}
        self.mrgrpo_seconds = 0.0  # total time spent in mrgrpo's advantage + diagnostics code
        self.last_diagnostics: dict[str, Any] | None = None
        self.last_advantages: torch.Tensor | None = None  # gathered, as handed to the loss
        self.last_rewards: torch.Tensor | None = None  # gathered [B_global, K] of the last train batch
        self._gathered_rewards: torch.Tensor | None = None
        # A feedback estimator's pending batch (see the module docstring), and its signal's last value.
        self._pending_feedback: dict[str, Any] | None = None
        self._feedback_step: dict[str, Any] | None = None
        self._capture_logps: tuple[torch.Tensor, torch.Tensor] | None = None
        self.last_policy_signal: torch.Tensor | None = None
        if self._spec.feedback is not None:
            self.add_callback(_FeedbackCallback(self))

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # noqa: ANN001, ANN202
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._gathered_rewards = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        training = self.model.training
        if training and self._pending_feedback is not None:
            # (generation and optimizer steps misaligned: the previous batch's signal is measured
            # now, with the policy after the optimizer steps taken so far)
            self.apply_pending_feedback()
        output = super()._generate_and_score_completions(inputs)
        rewards = self._gathered_rewards
        if rewards is None:  # pragma: no cover - TRL always scores before returning
            raise RuntimeError(f"{type(self).__name__}: no rewards were recorded for this batch")
        self._gathered_rewards = None
        mode = "train" if self.model.training else "eval"
        if mode == "train":
            self.last_rewards = rewards.detach()  # read by mrgrpo.train.rollout_log.RolloutLogger
        start = time.perf_counter()
        advantages = self.advantages_for(rewards, mode)
        trl_advantages = output["advantages"]
        output["advantages"] = advantages[trl_compat.process_slice(self, len(inputs))].to(device=trl_advantages.device, dtype=trl_advantages.dtype)
        self.last_advantages = advantages.detach()
        if mode == "train" and self._spec.feedback is not None:
            self._hold_for_feedback(output)
        self._log_mrgrpo(rewards, advantages, mode)
        elapsed = time.perf_counter() - start
        self.mrgrpo_seconds += elapsed
        self._metrics[mode]["mrgrpo/seconds"].append(elapsed)
        return output

    def group_ids(self, num_rollouts: int, mode: str = "train") -> torch.Tensor:
        """Rollouts of one prompt are consecutive blocks of ``num_generations``."""
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        return torch.arange(num_rollouts) // num_generations

    def groups_for(self, num_rollouts: int, mode: str, device: torch.device) -> Groups:
        """:meth:`group_ids` as :class:`~mrgrpo.estimators.groups.Groups`, built once per
        batch shape and device (every step has the same layout: no per-step detection)."""
        key = (num_rollouts, mode, device)
        groups = self._groups_cache.get(key)
        if groups is None:
            groups = self._groups_cache[key] = make_groups(self.group_ids(num_rollouts, mode), num_rollouts, device)
        return groups

    def advantages_for(self, rewards: torch.Tensor, mode: str = "train") -> torch.Tensor:
        """Advantages ``[B_global]`` of a gathered reward matrix ``[B_global, K]``; a training
        batch moves a stateful estimator's state, an evaluation batch only reads it."""
        # What compute_advantages_with_state does, with the checks of the estimator, its options
        # and the weights made once (at construction, and per device in _weights_for); the
        # reward values are checked every step (shape, dtype, ±inf, NaN), the output too.
        spec = self._spec
        values, out_dtype = reward_tensor(rewards)
        if values.shape[1] != self._num_components:
            raise InputError(
                f"rewards have {values.shape[1]} components, the trainer's reward functions {self._num_components}"
            )
        has_nan = False if spec.screens_rewards else check_reward_values(values)
        groups = self.groups_for(values.shape[0], mode, values.device)
        _, estimator_weights, fit, _ = self._weights_for(values.device)
        state = self.estimator_state if spec.stateful else None
        advantages, new_state = compute_checked(
            spec, values, out_dtype, has_nan, groups, estimator_weights, fit, self.estimator_options, state
        )
        if spec.stateful and mode == "train":
            if spec.feedback is None:
                self.estimator_state = new_state
            else:  # (the state moves when the policy signal is measured, after the update)
                self._feedback_step = {"values": values, "groups": groups, "weights": estimator_weights, "state": state}
        return advantages

    def _hold_for_feedback(self, output: dict[str, Any]) -> None:
        """Keep what the feedback needs of this training batch (this process's rows, unshuffled)."""
        step = getattr(self, "_feedback_step", None)
        self._feedback_step = None
        if step is None:  # pragma: no cover - advantages_for always runs first
            raise RuntimeError("no estimator step recorded for the feedback")
        prompt_ids, completion_ids = output["prompt_ids"], output["completion_ids"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        start = time.perf_counter()
        old = output.get("old_per_token_logps")
        # Where TRL does not compute the sampling policy's log-probabilities, its loss takes the
        # detached log-probabilities of its own forward pass, all before the optimizer steps on
        # this batch: they are captured there (row by row, ROW_KEY marks the rows through TRL's
        # shuffle and split), which saves a forward pass. (Liger's loss bypasses that forward.)
        capture = old is None and not getattr(self, "use_liger_kernel", False)
        if capture:
            old = torch.full(completion_ids.shape, float("nan"), dtype=torch.float32, device=completion_ids.device)
            output[ROW_KEY] = torch.arange(completion_ids.size(0), device=completion_ids.device)
        elif old is None:
            old = self._policy_logps(input_ids, attention_mask, completion_ids.size(1))
        generate_every = self.args.steps_per_generation * self.num_iterations
        self._pending_feedback = {
            **step, "input_ids": input_ids, "attention_mask": attention_mask, "mask": mask,
            "logits_to_keep": completion_ids.size(1), "old_logps": old.detach(), "capture": capture,
            "advantages": output["advantages"].detach(), "done_at": self._step + generate_every,
            "seconds": time.perf_counter() - start,  # (the sampling policy's forward, if it ran)
        }

    def _compute_loss(self, model, inputs):  # noqa: ANN001, ANN202
        rows = inputs.get(ROW_KEY) if isinstance(inputs, dict) else None
        pending = self._pending_feedback
        if rows is not None and pending is not None and pending.get("capture"):
            self._capture_logps = (rows, pending["old_logps"])
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._capture_logps = None

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        out = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        capture, self._capture_logps = getattr(self, "_capture_logps", None), None
        if capture is not None:  # (the loss's forward pass: the sampling policy, before the update)
            rows, old = capture
            old[rows.to(old.device)] = out[0].detach().to(device=old.device, dtype=old.dtype)
        return out

    def _policy_logps(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
        """Per-token log-probabilities of the current policy (no grad), as TRL's loss computes them."""
        with torch.no_grad():
            out = self._get_per_token_logps_and_entropies(
                self.model, input_ids, attention_mask, logits_to_keep, batch_size=self.args.per_device_train_batch_size
            )
        return out[0]

    def policy_signal(self, new_logps: torch.Tensor, pending: dict[str, Any]) -> torch.Tensor:
        """``s_i = (1/|o_i|) Σ_t Â_i·ρ_it·1[unclipped]`` ``[b]`` (float64) over the loss mask of this
        process's rows: ``ρ = exp(clamp(log π_new − log π_old, −20, 20))``, unclipped where
        ``ρ <= 1 + epsilon_high`` (``Â >= 0``) or ``ρ >= 1 − epsilon_low`` (``Â < 0``), as the
        official CTWA code (``compute_ctwa_stats``, aggregated as the estimator's ``w_agg`` says)
        and TRL's clip test."""
        mask = pending["mask"].to(torch.float64)
        old = pending["old_logps"].to(device=new_logps.device, dtype=torch.float64)
        if pending.get("capture"):
            if bool(torch.isnan(old[mask.to(old.device) > 0]).any()):
                raise RuntimeError(
                    "ctwa's policy signal: the loss did not see every row of the generation batch before the "
                    "optimizer stepped, so the sampling policy's log-probabilities are incomplete"
                )
            old = torch.nan_to_num(old, nan=0.0)  # (padding: masked out)
        return clipped_ratio_advantage(pending["advantages"], old, new_logps, mask, self.epsilon_low, self.epsilon_high,
                                       **signal_options(self._spec, self.estimator_options))

    def apply_pending_feedback(self) -> None:
        """Measure the pending batch's policy signal with the current policy, gather it over the
        processes and move the estimator's state (module docstring)."""
        pending, self._pending_feedback = self._pending_feedback, None
        if pending is None:
            return
        start = time.perf_counter()
        new_logps = self._policy_logps(pending["input_ids"], pending["attention_mask"], pending["logits_to_keep"])
        local = self.policy_signal(new_logps, pending)
        signal = self.accelerator.gather(local.to(pending["advantages"].device)).detach().cpu()
        self.last_policy_signal = signal
        self.estimator_state = apply_feedback(
            self._spec, pending["values"], pending["groups"], pending["weights"], self.estimator_options,
            pending["state"], signal,
        )
        metrics = self._metrics["train"]
        metrics["mrgrpo/feedback_seconds"].append(pending["seconds"] + time.perf_counter() - start)
        for key, value in flatten_scalars(self.estimator_state, "mrgrpo/state").items():
            metrics[key].append(value)

    @property
    def correlation_state(self) -> dict[str, Any] | None:
        """The estimator's state (the smoothed correlation, with ``correlation_ema``)."""
        return self.estimator_state

    def _save_checkpoint(self, model, trial):  # noqa: ANN001, ANN202
        super()._save_checkpoint(model, trial)
        if self.estimator_state is not None and self.args.should_save:
            folder = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
            if folder.is_dir():
                record = {"estimator": self.estimator, "state": self.estimator_state}
                (folder / ESTIMATOR_STATE_FILE).write_text(json.dumps(record, allow_nan=False))

    def _load_rng_state(self, checkpoint):  # noqa: ANN001, ANN202
        # Called by Trainer.train when resuming: restore our state from the same checkpoint.
        super()._load_rng_state(checkpoint)
        path = Path(checkpoint) / ESTIMATOR_STATE_FILE if checkpoint else None
        if self._spec.stateful and path is not None and path.is_file():
            self.binding = self.binding.resume(read_estimator_state(path, self.estimator), str(path))
            self.estimator_state = self.binding.initial_state()

    def _weights_for(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, bool, np.ndarray]:
        """The components' weights on ``device``, checked (:func:`as_weights`) once per device
        and per ``reward_weights`` tensor: ``(float64 weights, the estimator's weights (all ones
        for an estimator registered with uses_weights=False), whether those fit float32, the
        float64 weights on the CPU as numpy)``."""
        source = self.reward_weights
        cached = self._weights_cache.get(device)
        if cached is None or cached[0] is not source:
            weights = as_weights(source, self._num_components, device)
            given = as_weights(self.binding.weights_for_estimator(weights), self._num_components, device)
            cached = (source, weights, given, fits_float32(given), weights.cpu().numpy())
            self._weights_cache[device] = cached
        return cached[1:]

    def _weights(self, rewards: torch.Tensor) -> torch.Tensor:
        return self._weights_for(rewards.device)[0]

    def _log_mrgrpo(self, rewards: torch.Tensor, advantages: torch.Tensor, mode: str) -> None:
        metrics = self._metrics[mode]
        # One transfer to the CPU, then numpy: a step's batch is small, so per-call overhead,
        # not arithmetic, is the cost here (a torch op costs ~5x a numpy one on [B, K]).
        values = rewards.detach().to(device="cpu", dtype=torch.float64)
        adv = advantages.detach().to(device="cpu", dtype=torch.float64)
        v, a = values.numpy(), adv.numpy()
        means, total = reward_means(v, self._weights_for(values.device)[3])
        for key, mean in zip(self._reward_metric_keys, means):
            metrics[key].append(mean)
        metrics["mrgrpo/reward_total"].append(total)
        listed = a.tolist()
        for key, value in zip(self._advantage_metric_keys, advantage_stats(a, listed)):
            metrics[key].append(value)
        if mode == "train" and self.estimator_state is not None and self._spec.feedback is None:
            # (a feedback estimator's state is logged when its feedback moves it)
            for key, value in flatten_scalars(self.estimator_state, "mrgrpo/state").items():
                metrics[key].append(value)
        # Replace TRL's advantages in the completions table with the ones actually trained on.
        logged = self._logs["advantages"]
        for _ in range(min(len(a), len(logged))):
            logged.pop()
        logged.extend(listed)
        due = mode != "train" or self._diagnostics_batches % self.diagnostics_every == 0
        if mode == "train":
            self._diagnostics_batches += 1
        if self.run_diagnostics and due and self.accelerator.is_main_process:
            # (on the CPU: a [B, K] matrix is cheaper there than many tiny GPU kernels)
            report = diagnose(
                values,
                self.groups_for(values.shape[0], mode, values.device),
                weights=self._weights(values),
                reward_ranges=self.reward_ranges,
                names=self.reward_names,
                estimators=[self.estimator],
                advantages={self.estimator: adv},  # what was trained on: real options, EMA state
            )
            self.last_diagnostics = report
            for key, value in flatten_scalars(report, "mrgrpo/diag").items():
                if key.startswith(("mrgrpo/diag/num_", "mrgrpo/diag/weights")):
                    continue
                metrics[key].append(value)


class _FeedbackCallback(TrainerCallback):
    """Applies a feedback estimator's pending signal once the optimizer has stepped on every
    micro-batch of its generation batch (``on_step_end`` runs before the checkpoint is saved)."""

    def __init__(self, trainer: MultiRewardMixin) -> None:
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003, ANN201
        pending = self.trainer._pending_feedback
        if pending is not None and self.trainer._step >= pending["done_at"]:
            self.trainer.apply_pending_feedback()
        return control


class MultiRewardGRPOTrainer(MultiRewardMixin, PromptSharingMixin, GRPOTrainer):
    """A ``trl.GRPOTrainer`` whose advantages come from a registered mrgrpo estimator.

    A drop-in for ``GRPOTrainer``: an existing TRL script keeps its reward functions and its
    GRPOConfig and adds ``estimator=``/``estimator_options=`` (or ``suite=``). Arguments: see
    :class:`MultiRewardMixin`; ``share_prompt=True`` computes each group's prompt once in the
    loss's forward (:class:`~mrgrpo.train.shared_prefix.PromptSharingMixin`).
    """
