"""Math tasks: reasoning-gym (``math``, or any reasoning-gym dataset name) and question/answer sets (``qa``).

``math``: procedural problems from reasoning-gym, graded by each dataset's own scorer. Options:
``dataset`` (default ``chain_sum``) and that dataset's config keys (e.g. ``min_terms``); ``task:
{name: chain_sum, options: {...}}`` is the same as ``task: {name: math, options: {dataset:
chain_sum, ...}}``. Split: :func:`mrgrpo.data.reasoning_tasks.load_reasoning_gym` reads items in
order, skipping repeated questions; the first ``few_shot`` become worked examples, the next
``eval_size`` the test split, the next ``size`` the train split (no question in two of them).

``qa``: any JSONL/JSON/CSV/parquet file or hub dataset with a question and an answer column
(GSM8K's ``#### 42`` answers are reduced to the final number), graded with math-verify.
Split: ``eval_split`` of the source when given; else a seeded shuffle of the rows after the
``few_shot`` leading rows (the worked examples), the first ``test_fraction`` of them the test split.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from mrgrpo.errors import ConfigError
from mrgrpo.rewards.math import format_answer
from mrgrpo.tasks.base import Option, Task, TaskSpec
from mrgrpo.tasks.registry import register_task

MATH_COLUMNS = ("answer", "task", "task_config", "task_entry", "id")
MATH_WEIGHTS = {"correctness": 1.0, "format": 0.5, "length": 0.5}


def reasoning_gym_config_fields(dataset: str) -> list[str]:
    """The config keys of a reasoning-gym dataset (``seed`` and ``size`` are mrgrpo's)."""
    from reasoning_gym.factory import DATASETS

    if dataset not in DATASETS:
        raise ConfigError(f"task.options.dataset: {dataset!r} is not a reasoning-gym dataset")
    return [f.name for f in dataclasses.fields(DATASETS[dataset][1]) if f.name not in ("seed", "size")]


class ReasoningGymTask(Task):
    name = "math"
    domain = "math"
    description = "reasoning-gym procedural math (any reasoning-gym dataset; its own scorer grades answers)"
    columns = MATH_COLUMNS
    suite = "math"
    weights = MATH_WEIGHTS
    options = {"dataset": Option("chain_sum", "reasoning-gym dataset name; its config keys are options too")}
    ground_truth = "answer"
    eval_metric = "correctness"
    eval_max_new_tokens = 128
    split = "items in order, repeats skipped: few_shot examples, then eval_size test, then size train"
    extras = ("math",)

    def resolve_options(self, options: dict[str, Any]) -> dict[str, Any]:
        dataset = options.get("dataset", "chain_sum")
        fields = reasoning_gym_config_fields(dataset)
        rest = {k: v for k, v in options.items() if k not in ("dataset", "max_prompt_length")}
        unknown = sorted(set(rest) - set(fields))
        if unknown:
            raise ConfigError(
                f"task.options: {', '.join(unknown)} is not an option of reasoning-gym dataset {dataset!r} "
                f"(its options: {', '.join(fields)}, max_prompt_length)"
            )
        return {"dataset": dataset, "max_prompt_length": options.get("max_prompt_length"), **rest}

    def load(self, spec: TaskSpec, split: str, options: dict[str, Any]) -> Any:
        from mrgrpo.data.reasoning_tasks import load_reasoning_gym

        config = {k: v for k, v in options.items() if k not in ("dataset", "max_prompt_length")}
        try:
            splits = load_reasoning_gym(
                {options["dataset"]: config},
                n_train=spec.size if spec.size is not None else 1000,
                n_test=spec.eval_size if spec.eval_size is not None else 100,
                seed=spec.seed,
                few_shot=spec.few_shot,
                system_prompt=spec.system_prompt,
            )
        except (KeyError, ValueError, TypeError) as error:
            raise ConfigError(f"task {options['dataset']!r} with options {config}: {error}") from None
        return splits["train" if split == "train" else "test"]

    def reference(self, row: dict[str, Any]) -> str | None:
        return format_answer(str(row["answer"]))


class QATask(Task):
    name = "qa"
    domain = "math"
    description = "question/answer math from a JSONL/JSON/CSV/parquet file or hub dataset (GSM8K-style), math-verify grading"
    columns = MATH_COLUMNS
    suite = "math"
    weights = MATH_WEIGHTS
    options = {
        "source": Option(None, "file path (.jsonl/.json/.csv/.parquet) or hub dataset id (required)"),
        "name": Option(None, "hub dataset configuration (e.g. main for openai/gsm8k)"),
        "split": Option("train", "source split of the training rows"),
        "eval_split": Option(None, "source split of the test rows (default: a seeded holdout of `split`)"),
        "test_fraction": Option(0.1, "share of rows held out for eval when there is no eval_split"),
        "question_field": Option("question", "column holding the question"),
        "answer_field": Option("answer", "column holding the answer (text after the last #### kept)"),
    }
    ground_truth = "answer"
    eval_metric = "correctness"
    eval_max_new_tokens = 256
    split = "eval_split if given, else few_shot leading rows as examples then a seeded test_fraction holdout"

    def load(self, spec: TaskSpec, split: str, options: dict[str, Any]) -> Any:
        from mrgrpo.data.qa import load_qa, read_source, worked_reply

        if not options["source"]:
            raise ConfigError("task qa needs task.options.source (a file path or hub dataset id)")
        try:
            rows = read_source(options["source"], options["split"], options["name"])
            q, a = options["question_field"], options["answer_field"]
            missing = [f for f in (q, a) if f not in rows.column_names]
            if missing:
                raise ConfigError(f"task qa: {options['source']} has no column(s) {missing}; it has {rows.column_names}")
            shots = min(spec.few_shot, len(rows))
            examples = [(str(rows[i][q]), worked_reply(rows[i][a])) for i in range(shots)]
            if options["eval_split"]:
                chosen = rows.select(range(shots, len(rows))) if split == "train" else read_source(
                    options["source"], options["eval_split"], options["name"]
                )
            else:
                order = list(range(shots, len(rows)))
                random.Random(f"qa:{spec.seed}").shuffle(order)
                n_test = int(round(options["test_fraction"] * len(order)))
                chosen = rows.select(sorted(order[n_test:]) if split == "train" else sorted(order[:n_test]))
            limit = spec.size_of(split)
            dataset = load_qa(chosen, question_field=q, answer_field=a, few_shot=examples, system_prompt=spec.system_prompt,
                              limit=limit)
        except (FileNotFoundError, ValueError) as error:
            if isinstance(error, ConfigError):
                raise
            raise ConfigError(f"task qa, source {options['source']!r}: {error}") from None
        return dataset

    def reference(self, row: dict[str, Any]) -> str | None:
        return format_answer(str(row["answer"]))


register_task(ReasoningGymTask())
register_task(QATask())
