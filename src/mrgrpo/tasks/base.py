"""The task concept: a domain's data, columns, default rewards, rollout kind and evaluation.

A :class:`Task` bundles everything a run needs to know about *where prompts come from*:

* its dataset, with a reproducible train/test split (:meth:`Task.rows`);
* the columns its rows provide (:attr:`Task.columns`; the reward suites read them);
* its default reward suite, suite options and weights;
* its rollout kind: ``single_turn`` (TRL generates one completion) or ``multi_turn`` (an
  environment answers tool calls between the policy's turns);
* its evaluation metric (:attr:`Task.eval_metric`) and, for multi-turn tasks, its own evaluation;
* the ground-truth column verl's ``custom_reward_function`` receives as ``ground_truth``;
* its prompt rule (:attr:`Task.prompt_rule`): what happens to a prompt longer than the policy's
  context (``drop``: the row is left out; ``compact``: the row is rebuilt with a shorter tool
  listing first, then dropped if still too long). Prompts are measured in the policy's tokens.

Tasks are registered by name (:mod:`mrgrpo.tasks.registry`); ``mrgrpo tasks`` lists them. The
checks that pair a task with a reward suite live in :mod:`mrgrpo.tasks.checks`. This module
imports nothing from ``mrgrpo.train`` nor from the registry: the arrows point one way
(``base`` <- ``registry`` <- ``checks``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mrgrpo.errors import ConfigError
from mrgrpo.extras import require, require_package

log = logging.getLogger("mrgrpo.tasks")

Messages = list[dict[str, str]]



@dataclass(frozen=True)
class Option:
    """One task option: its default and a one-line description (listed by ``mrgrpo tasks``)."""

    default: Any
    help: str


COMMON_OPTIONS: dict[str, Option] = {
    "max_prompt_length": Option(
        None,
        "longest prompt in policy tokens; longer ones follow the task's prompt rule "
        "(default: the model's context minus max_completion_length)",
    ),
}


@dataclass(frozen=True)
class TaskSpec:
    """What a run asks of its task (the ``task:`` section of a train config, duck-typed)."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    size: int | None = None
    eval_size: int | None = None
    seed: int = 0
    system_prompt: str | None = None
    few_shot: int = 0

    @classmethod
    def of(cls, config: Any) -> TaskSpec:
        """A spec from a ``TaskConfig`` (or anything with its fields), or a task name."""
        if isinstance(config, TaskSpec):
            return config
        if isinstance(config, str):
            return cls(config)
        return cls(
            name=config.name,
            options=dict(config.options or {}),
            size=getattr(config, "size", None),
            eval_size=getattr(config, "eval_size", None),
            seed=getattr(config, "seed", 0),
            system_prompt=getattr(config, "system_prompt", None),
            few_shot=getattr(config, "few_shot", 0),
        )

    def size_of(self, split: str) -> int | None:
        return self.size if split == "train" else self.eval_size


@dataclass
class PromptFit:
    """What the prompt rule did to a dataset (logged by the train job, returned by :meth:`Task.fit`)."""

    limit: int
    rows: int
    kept: int
    shortened: int
    dropped: int
    longest_kept: int

    def line(self, task: str) -> str:
        return (
            f"task {task}: {self.kept}/{self.rows} prompts fit {self.limit} tokens "
            f"({self.shortened} shortened, {self.dropped} dropped; longest kept {self.longest_kept})"
        )


def plain_text(messages: Sequence[Mapping[str, str]]) -> str:
    """Prompts of models without a chat template: ``Role: content`` blocks, then ``Assistant:``."""
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts) + "\n\nAssistant:"


def prompt_tokens(prompt: Any, tokenizer: Any, chat: bool) -> int:
    """The length of a prompt in the policy's tokens, rendered as TRL renders it."""
    if isinstance(prompt, str):
        return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    if chat:
        ids = tokenizer.apply_chat_template(list(prompt), tokenize=True, add_generation_prompt=True)
        if isinstance(ids, Mapping) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return len(ids)
    return len(tokenizer(plain_text(prompt), add_special_tokens=False)["input_ids"])


class Task:
    """A registered task (subclass per domain; see the module docstring).

    Subclasses set the class attributes and implement :meth:`load`; the rest has defaults.
    """

    name: str = ""
    description: str = ""
    domain: str = ""
    columns: tuple[str, ...] = ()
    suite: str = ""
    suite_options: Mapping[str, Any] = {}
    weights: Mapping[str, float] | None = None
    options: Mapping[str, Option] = {}
    ground_truth: str = ""
    rollout: str = "single_turn"
    rollout_options: tuple[str, ...] = ()  # options read by the multi-turn rollout, not the loader
    eval_metric: str = ""
    eval_components: tuple[str, ...] | None = None  # components `mrgrpo eval` scores (None: all)
    eval_suite_options: Mapping[str, Any] = {}  # suite options of the evaluation suite
    eval_max_new_tokens: int = 256
    prompt_rule: str = "drop"
    trainable: bool = True
    few_shot: bool = True  # whether worked examples (``few_shot`` > 0) are supported
    split: str = ""  # how the train/test split is made (documented by `mrgrpo tasks`)
    extras: tuple[str, ...] = ()  # optional dependency groups its data, rollout and rewards import (mrgrpo.extras)
    packages: tuple[str, ...] = ()  # --no-deps data packages it reads unless options name a data_dir (NO_DEPS)

    # ------------------------------------------------------------------ options

    def all_options(self) -> dict[str, Option]:
        return {**self.options, **COMMON_OPTIONS}

    def resolve_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` with defaults filled in; an unknown key, or a non-boolean value for an option
        whose default is ``True``/``False``, is a :class:`ConfigError`."""
        known = self.all_options()
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ConfigError(
                f"task.options: {', '.join(unknown)} is not an option of task {self.name!r} "
                f"(its options: {', '.join(known)})"
            )
        switches = sorted(k for k, v in options.items() if isinstance(known[k].default, bool) and not isinstance(v, bool))
        if switches:  # a string such as "no" would read as true
            raise ConfigError(
                f"task.options.{switches[0]} of task {self.name!r} is true or false, not {options[switches[0]]!r}"
            )
        return {**{k: o.default for k, o in known.items()}, **dict(options)}

    def require_installed(self, options: Mapping[str, Any] | None = None) -> None:
        """A :class:`~mrgrpo.errors.MissingExtraError` (one line with the install line) for each extra or
        data package the task needs that is not installed. Cheap (no import): :meth:`rows` and
        ``mrgrpo eval`` call it before any data, model or tokenizer loads. ``options=None`` (the
        task's options not known yet): the extras only, since ``data_dir`` can replace a package."""
        for extra in self.extras:
            require(extra, f"task {self.name}")
        if options is not None and options.get("data_dir") is None:
            for module in self.packages:
                require_package(module, f"task {self.name}'s data (unless task.options.data_dir names a copy)")

    def check_spec(self, spec: TaskSpec) -> None:
        if spec.few_shot and not self.few_shot:
            raise ConfigError(f"task {self.name!r} takes no worked examples: set task.few_shot: 0")

    def suite_defaults(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Options the task's default suite gets unless ``rewards.options`` sets them."""
        return dict(self.suite_options)

    # ------------------------------------------------------------------ data

    def load(self, spec: TaskSpec, split: str, options: dict[str, Any]) -> Any:
        """The ``datasets.Dataset`` of ``split`` (``train`` | ``eval``), prompts as chat messages."""
        raise NotImplementedError

    def rows(self, spec: TaskSpec | Any, split: str = "train", chat: bool = True) -> Any:
        """The rows of ``split`` (``train`` | ``eval``): chat messages, or plain text when ``chat`` is false."""
        spec = TaskSpec.of(spec)
        if split not in ("train", "eval"):
            raise ConfigError(f"split must be 'train' or 'eval', got {split!r}")
        if not self.trainable and split == "train":
            raise ConfigError(f"task {self.name!r} is evaluation-only: use `mrgrpo eval --task {self.name}`")
        self.check_spec(spec)
        self.require_installed(spec.options)
        options = self.resolve_options(spec.options)
        dataset = self.load(spec, split, options)
        missing = [c for c in ("prompt", *self.columns) if len(dataset) and c not in dataset.column_names]
        if missing:
            raise ConfigError(f"task {self.name!r}: its data has no column(s) {', '.join(missing)}")
        if not chat:
            dataset = dataset.map(lambda row: {"prompt": plain_text(row["prompt"]) if not isinstance(row["prompt"], str) else row["prompt"]})
        return dataset

    def reference(self, row: Mapping[str, Any]) -> str | None:
        """A known-good completion of ``row`` (pre-model-load checks, tests); ``None``: none known."""
        return None

    def shorten(self, row: dict[str, Any], options: Mapping[str, Any], chat: bool, attempt: int = 0) -> dict[str, Any] | None:
        """The ``attempt``-th shorter version of ``row`` (prompt rule ``compact``); ``None``: no more."""
        return None

    def verl_row(self, row: Mapping[str, Any], data_source: str | None = None) -> dict[str, Any]:
        """``row`` in verl's RL dataset format: ``prompt``, ``data_source``, ``reward_model`` with the
        ground truth, and every other column in ``extra_info`` (what ``verl_reward`` reads back)."""
        extra = {k: v for k, v in row.items() if k not in ("prompt", self.ground_truth)}
        extra["task"] = extra.get("task") or self.name
        return {
            "data_source": data_source or f"mrgrpo/{self.name}",
            "prompt": row["prompt"],
            "reward_model": {"style": "rule", "ground_truth": row[self.ground_truth]},
            "extra_info": {**extra, "mrgrpo_task": self.name},
        }

    # ------------------------------------------------------------------ prompt length

    def fit(self, dataset: Any, tokenizer: Any, chat: bool, limit: int, options: Mapping[str, Any]) -> tuple[Any, PromptFit]:
        """Apply the prompt rule: every kept prompt is at most ``limit`` policy tokens.

        Raises :class:`ConfigError` when no prompt fits (naming the shortest and the fixes)."""
        if limit <= 0:
            raise ConfigError(f"task {self.name!r}: no room for a prompt ({limit} tokens); lower max_completion_length")
        keep, shortened, longest, shortest = [], 0, 0, None
        rows = list(dataset)
        for i, row in enumerate(rows):
            n = prompt_tokens(row["prompt"], tokenizer, chat)
            attempt = 0
            while n > limit and self.prompt_rule == "compact":
                short = self.shorten(dict(row), options, chat, attempt)
                if short is None:
                    break
                attempt += 1
                m = prompt_tokens(short["prompt"], tokenizer, chat)
                if m <= limit:
                    rows[i], n = short, m
                    shortened += 1
            shortest = n if shortest is None else min(shortest, n)
            if n <= limit:
                keep.append(i)
                longest = max(longest, n)
        fit = PromptFit(limit, len(rows), len(keep), shortened, len(rows) - len(keep), longest)
        if rows and not keep:
            raise ConfigError(
                f"task {self.name!r}: every prompt is longer than {limit} policy tokens (shortest {shortest}); "
                "use a model with a longer context, a shorter max_completion_length"
                + (", tools_in_prompt: compact or none" if "tools_in_prompt" in self.options else "")
                + " or a larger task.options.max_prompt_length"
            )
        if fit.dropped or fit.shortened:
            import datasets

            dataset = datasets.Dataset.from_list([rows[i] for i in keep])
            log.warning(fit.line(self.name))
        return dataset, fit

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, policy: Callable, spec: TaskSpec, loaded: Any, attack: str | None, limit: int | None,
                 max_new_tokens: int | None) -> dict[str, Any] | None:
        """A task's own evaluation (multi-turn tasks); ``None``: the generic generate-and-score one."""
        return None

    def describe(self) -> dict[str, Any]:
        """What ``mrgrpo tasks`` prints."""
        return {
            "name": self.name,
            "domain": self.domain,
            "description": self.description,
            "columns": list(self.columns),
            "suite": self.suite,
            "suite_options": dict(self.suite_options),
            "weights": dict(self.weights) if self.weights else None,
            "rollout": self.rollout,
            "eval_metric": self.eval_metric,
            "ground_truth": self.ground_truth,
            "prompt_rule": self.prompt_rule,
            "trainable": self.trainable,
            "split": self.split,
            "options": {k: {"default": o.default, "help": o.help} for k, o in self.all_options().items()},
        }
