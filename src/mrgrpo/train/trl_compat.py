"""Every reliance of mrgrpo's TRL adapter on TRL (and transformers ``Trainer``) internals.

TRL computes GRPO advantages inline in ``GRPOTrainer._generate_and_score_completions``, with no
public hook, so :class:`~mrgrpo.train.trainer.MultiRewardGRPOTrainer` overrides private methods
and reads private attributes. This module names each of them once and checks them when a
trainer is constructed, so an unsupported TRL fails at once with the supported range instead of
training on wrong advantages.

Supported: ``trl`` :data:`SUPPORTED_RANGE` (tested at both ends: 1.6.0 and 1.16.0). The floor is
where TRL's own advantage code took its present form: from 1.6.0 on, a completion that every
reward function left unscored (``None``) gets advantage 0 and is left out of the group
statistics, as in mrgrpo's estimators; before it, TRL summed such a row as reward 0, so
``grpo``/``gdpo`` could not equal stock TRL there. The ceiling is the newest release checked.
``MRGRPO_ALLOW_UNTESTED_TRL=1`` lets a newer (or older) TRL through with a warning, for trying a
release before mrgrpo declares it.

What the adapter relies on (checked by :func:`check_trainer_class` / :func:`check_trainer`):

* ``GRPOTrainer._calculate_rewards(inputs, prompts, completions, completion_ids_list)`` returns
  the rewards gathered over all processes, ``[B_global, K]``, NaN where a function returned
  ``None``;
* ``GRPOTrainer._generate_and_score_completions(inputs)`` returns a dict whose
  ``"advantages"`` entry is this process's slice ``process_index * len(inputs) : ...``;
* groups are consecutive blocks of ``num_generations`` (``num_generations_eval`` in eval);
* trainer attributes ``reward_funcs``, ``reward_func_names``, ``reward_weights``,
  ``num_generations``, ``num_generations_eval``, ``accelerator``, ``_metrics[mode]`` (lists per
  key) and ``_logs["advantages"]`` (the completions table);
* ``GRPOConfig`` fields ``scale_rewards``, ``multi_objective_aggregation``, ``reward_weights``;
* ``GRPOTrainer._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, ...)``
  runs the policy's (and reference model's) forward for the loss through ``model(...)``, whose
  backbone is ``model.base_model`` (``share_prompt``: :mod:`mrgrpo.train.shared_prefix` wraps it);
* transformers ``Trainer._save_checkpoint(model, trial)`` and ``Trainer._load_rng_state(checkpoint)``
  (estimator state saved with, and restored from, each checkpoint);
* for an estimator with a feedback (``ctwa``): ``_generate_and_score_completions``' output keys
  ``prompt_ids``, ``prompt_mask``, ``completion_ids``, ``completion_mask`` (and ``tool_mask``,
  ``old_per_token_logps`` where present) hold this process's rows in the gathered order, and an
  extra per-row tensor key travels through TRL's shuffle and split to ``_compute_loss(model,
  inputs)``, whose first ``_get_per_token_logps_and_entropies`` call is the policy's forward; the
  trainer's ``_step`` counts micro-steps (a generation batch is trained on for
  ``args.steps_per_generation * num_iterations`` of them); ``epsilon_low``/``epsilon_high`` are
  the loss's clip range; a ``TrainerCallback.on_step_end`` runs after the optimizer step and
  before the checkpoint is saved.

The multi-turn agent trainer (:mod:`mrgrpo.train.agent_rollout`) also relies on TRL's
experimental ``rollout_func`` (checked by :func:`check_rollout_func`): ``GRPOTrainer(...,
rollout_func=f)`` calls ``f(prompts, trainer)``, which returns :data:`ROLLOUT_KEYS` plus extra
per-completion fields; ``env_mask`` among them marks policy tokens (1) against tool feedback (0,
no loss), and every other extra field reaches the reward functions as a keyword argument.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import inspect
import os
import warnings
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from mrgrpo.errors import MissingExtraError, UnsupportedVersionError

#: TRL releases whose internals match what the adapter relies on (the ``trl`` extra's range).
SUPPORTED_RANGE = ">=1.6,<1.17"
SUPPORTED_TRL = SpecifierSet(SUPPORTED_RANGE)
#: Environment variable that lets an unsupported TRL through, with a warning.
ALLOW_UNTESTED = "MRGRPO_ALLOW_UNTESTED_TRL"

#: Overridden methods and the parameters mrgrpo calls them with.
METHODS = {
    "_calculate_rewards": ("inputs", "prompts", "completions", "completion_ids_list"),
    "_generate_and_score_completions": ("inputs",),
    "_save_checkpoint": ("model", "trial"),
    "_load_rng_state": ("checkpoint",),
    "_get_per_token_logps_and_entropies": ("model", "input_ids", "attention_mask", "logits_to_keep"),
    "_compute_loss": ("model", "inputs"),
}
#: Attributes read from a constructed trainer.
ATTRIBUTES = (
    "reward_funcs",
    "reward_func_names",
    "reward_weights",
    "num_generations",
    "num_generations_eval",
    "accelerator",
    "_metrics",
    "_logs",
    # (read only for an estimator with a feedback, such as ctwa: the micro-step counter, the
    # generation cadence and the clip range of the policy signal)
    "_step",
    "num_iterations",
    "epsilon_low",
    "epsilon_high",
)
#: GRPOConfig fields read (and, for the first two, mapped onto the estimator).
CONFIG_FIELDS = ("scale_rewards", "multi_objective_aggregation", "reward_weights")


#: Keys TRL requires in ``rollout_func``'s output; ``env_mask`` is the extra key it turns into the loss mask.
ROLLOUT_KEYS = ("prompt_ids", "completion_ids", "logprobs")
ENV_MASK = "env_mask"


def import_grpo() -> tuple[type, type]:
    """``(trl.GRPOTrainer, trl.GRPOConfig)``, or :class:`MissingExtraError` naming the ``trl`` extra."""
    try:
        from trl import GRPOConfig, GRPOTrainer
    except ModuleNotFoundError as error:
        missing = (error.name or "trl").split(".")[0]
        raise MissingExtraError("training with TRL", "trl", missing) from None
    return GRPOTrainer, GRPOConfig


def trl_version() -> str:
    return importlib.metadata.version("trl")


def check_version(version: str | None = None) -> None:
    """Raise :class:`UnsupportedVersionError` unless TRL ``version`` is in :data:`SUPPORTED_TRL`."""
    version = version or trl_version()
    if Version(version) in SUPPORTED_TRL:
        return
    message = (
        f"mrgrpo's TRL trainer supports trl{SUPPORTED_RANGE} (it relies on GRPOTrainer internals "
        f"checked for those releases), found trl {version}: pip install 'trl{SUPPORTED_RANGE}'"
    )
    if os.environ.get(ALLOW_UNTESTED) == "1":
        warnings.warn(f"{message} ({ALLOW_UNTESTED}=1: trying anyway)", stacklevel=3)
        return
    raise UnsupportedVersionError(f"{message}, or set {ALLOW_UNTESTED}=1 to try it anyway")


def check_trainer_class(cls: type) -> None:
    """The TRL version and the overridden methods' signatures of trainer class ``cls``."""
    grpo_trainer, grpo_config = import_grpo()
    check_version()
    if not issubclass(cls, grpo_trainer):
        raise TypeError(
            f"{cls.__name__} uses MultiRewardMixin but does not derive from trl.GRPOTrainer: "
            f"class {cls.__name__}(MultiRewardMixin, YourGRPOTrainer)"
        )
    problems = []
    for name, expected in METHODS.items():
        method = getattr(grpo_trainer, name, None)
        if method is None:
            problems.append(f"GRPOTrainer.{name} is gone")
            continue
        params = tuple(p for p in inspect.signature(method).parameters if p != "self")
        if params[: len(expected)] != expected:
            problems.append(f"GRPOTrainer.{name}{params} no longer takes {expected}")
    fields = {f.name for f in dataclasses.fields(grpo_config)}
    problems += [f"GRPOConfig.{name} is gone" for name in CONFIG_FIELDS if name not in fields]
    if problems:
        raise UnsupportedVersionError(
            f"trl {trl_version()} does not have the internals mrgrpo's trainer relies on ({'; '.join(problems)}): "
            f"pip install 'trl{SUPPORTED_RANGE}'"
        )


def check_rollout_func() -> None:
    """``GRPOTrainer`` takes ``rollout_func``, requires exactly :data:`ROLLOUT_KEYS` of it and
    reads ``env_mask`` from its extra fields (else the agent trainer would train on tool tokens)."""
    grpo_trainer, _ = import_grpo()
    check_version()
    problems = []
    if "rollout_func" not in inspect.signature(grpo_trainer.__init__).parameters:
        problems.append("GRPOTrainer(rollout_func=...) is gone")
    source = inspect.getsource(grpo_trainer)
    if f'extra_fields.pop("{ENV_MASK}"' not in source:
        problems.append(f"GRPOTrainer no longer reads {ENV_MASK!r} from rollout_func's output")
    if not all(f'"{key}"' in source for key in ROLLOUT_KEYS):
        problems.append(f"rollout_func's output no longer has the keys {ROLLOUT_KEYS}")
    if problems:
        raise UnsupportedVersionError(
            f"trl {trl_version()} does not have the rollout_func mrgrpo's agent trainer relies on "
            f"({'; '.join(problems)}): pip install 'trl{SUPPORTED_RANGE}'"
        )


def check_trainer(trainer: Any) -> None:
    """The attributes the adapter reads, on a constructed trainer."""
    missing = [name for name in ATTRIBUTES if not hasattr(trainer, name)]
    logs = getattr(trainer, "_logs", {})
    if not isinstance(logs, dict) or "advantages" not in logs:
        missing.append('_logs["advantages"]')
    if missing:
        raise UnsupportedVersionError(
            f"trl {trl_version()}: GRPOTrainer has no {', '.join(missing)} (mrgrpo's trainer reads them): "
            f"pip install 'trl{SUPPORTED_RANGE}'"
        )


def config_defaults() -> dict[str, Any]:
    """GRPOConfig's defaults of the settings mrgrpo maps (``scale_rewards``, ``multi_objective_aggregation``)."""
    _, grpo_config = import_grpo()
    fields = {f.name: f.default for f in dataclasses.fields(grpo_config)}
    return {name: fields[name] for name in ("scale_rewards", "multi_objective_aggregation")}


def process_slice(trainer: Any, local: int) -> slice:
    """This process's rows of a gathered batch (TRL's own slicing)."""
    index = trainer.accelerator.process_index
    return slice(index * local, (index + 1) * local)
