"""Tool calling on BFCL (``bfcl``): function schemas in the prompt, BFCL's acceptable answers as ground truth.

Categories: every single-turn Python category BFCL ships with possible answers,
:data:`mrgrpo.data.bfcl.CATEGORIES` (``simple_python`` alias ``simple``, ``multiple``,
``parallel``, ``parallel_multiple`` and the user-contributed ``live_simple``, ``live_multiple``,
``live_parallel``, ``live_parallel_multiple``); others are an error naming why.

Split: per category, the item ids are shuffled with ``random.Random(f"bfcl:{category}:{seed}")``;
the first ``test_fraction`` (rounded) are the test split, the rest train (``values_in_request``
then keeps, in both, only the items :func:`values_in_request` accepts); the ``few_shot`` worked
examples are the train items with the shortest prompts (function schemas plus request, in
characters; ties in shuffled order), then left out of train: an example's functions are listed
in every prompt, so a short one keeps every prompt short. Train and eval are shuffled across
categories with ``seed``; ``size``/``eval_size`` keep the first rows.

A worked example is a user turn and the assistant's reference calls in the requested format; its
functions are listed in the system message with the item's own (``tools_in_prompt``: as JSON
schemas, or ``compact``, one line per function, ``name(param: type, ...) - description``: about
half the tokens, without the parameters' descriptions).

``skeleton`` (a scaffold for small policies, off by default): every user turn, the worked
examples' included, ends with the call to make, its function names and parameter names given
and each value a ``<type>`` placeholder, quoted only for strings (:func:`call_skeleton`), and the
instruction asks for that call with its values filled in from the request. It gives function
selection and the parameter names away (``function_name`` and ``parameter_names`` then measure
copying them into a valid block), so what is left to learn is the values (``parameter_values``,
``all_exact``); SmolLM2-135M writes no correct call without it (docs/tasks.md).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from mrgrpo.errors import ConfigError
from mrgrpo.rewards.tool_call import compact_signatures, format_calls, instruction, reference_calls
from mrgrpo.tasks.base import Option, Task, TaskSpec
from mrgrpo.tasks.registry import register_task


class BFCLTask(Task):
    name = "bfcl"
    domain = "tool_call"
    description = "BFCL function calling (Python AST categories incl. live_*), BFCL answer semantics"
    columns = ("functions", "tools", "ground_truth", "id", "category")
    suite = "tool_call"
    options = {
        "categories": Option(["simple_python"], "BFCL categories (simple = simple_python; live_* included)"),
        "think": Option(True, "the prompt (and the tool_call suite's format) asks for <think></think> first"),
        "test_fraction": Option(0.25, "share of each category's items held out for eval"),
        "data_dir": Option(None, "a directory with BFCL_v*_<category>.json files (default: the bfcl-eval package)"),
        "skeleton": Option(False, "each request ends with the call to make, values as <type> placeholders (a scaffold for small models)"),
        "values_in_request": Option(False, "keep only items whose every required value is written in the request (an easier subset)"),
        "tools_in_prompt": Option("full", "full (JSON schemas) | compact (one line per function: name(param: type, ...) - description)"),
    }
    ground_truth = "ground_truth"
    eval_metric = "all_exact"
    eval_max_new_tokens = 256
    split = "per category a seeded shuffle of item ids; first test_fraction = test, few_shot examples: the shortest train items"
    extras = ("tools",)
    packages = ("bfcl_eval",)

    def suite_defaults(self, options: dict[str, Any]) -> dict[str, Any]:
        return {"think": bool(options["think"])}

    def load(self, spec: TaskSpec, split: str, options: dict[str, Any]) -> Any:
        from datasets import Dataset

        from mrgrpo.data.bfcl import bfcl_records

        if options["tools_in_prompt"] not in ("full", "compact"):
            raise ConfigError(f"task bfcl: tools_in_prompt must be full or compact, got {options['tools_in_prompt']!r}")
        categories = options["categories"]
        if isinstance(categories, str):
            categories = [categories]
        try:
            records = bfcl_records(categories, options["data_dir"], options["think"])
        except (ValueError, FileNotFoundError) as error:
            raise ConfigError(f"task bfcl: {error}") from None
        by_category: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            by_category.setdefault(record["category"], []).append(record)
        chosen, examples = [], []
        for category, rows in by_category.items():
            rows = sorted(rows, key=lambda r: r["id"])
            random.Random(f"bfcl:{category}:{spec.seed}").shuffle(rows)
            n_test = int(round(options["test_fraction"] * len(rows)))
            test, train = rows[:n_test], rows[n_test:]
            if options["values_in_request"]:
                test, train = [r for r in test if values_in_request(r)], [r for r in train if values_in_request(r)]
            shots = sorted(train, key=_prompt_chars)[: spec.few_shot] if not examples else []
            examples.extend(shots)
            chosen.extend(test if split == "eval" else [r for r in train if r not in shots])
        random.Random(f"bfcl:{split}:{spec.seed}").shuffle(chosen)
        limit = spec.size_of(split)
        chosen = chosen[:limit] if limit is not None else chosen
        rows = [self._with_examples(r, examples[: spec.few_shot], options, spec) for r in chosen]
        return Dataset.from_list(rows) if rows else Dataset.from_dict({"prompt": []})

    @staticmethod
    def _with_examples(row: dict[str, Any], examples: list[dict[str, Any]], options: dict[str, Any], spec: TaskSpec) -> dict[str, Any]:
        skeleton = bool(options["skeleton"])
        compact = options["tools_in_prompt"] == "compact"
        if not examples and spec.system_prompt is None and not skeleton and not compact:
            return row
        functions = json.loads(row["functions"])
        names = {f["name"] for f in functions}
        listed = list(functions)
        exchange = []
        for example in examples:
            example_functions = json.loads(example["functions"])
            listed += [f for f in example_functions if f["name"] not in names]
            names |= {f["name"] for f in example_functions}
            calls = reference_calls(json.loads(example["ground_truth"]), example_functions)
            exchange += [
                _user_turn(example, skeleton),
                {"role": "assistant", "content": format_calls(calls, "I will call the function." if options["think"] else None)},
            ]
        system = instruction(listed, bool(options["think"]), compact_signatures(listed) if compact else None)
        if skeleton:
            system += " " + SKELETON_INSTRUCTION
        if spec.system_prompt:
            system = spec.system_prompt + "\n\n" + system
        return {**row, "prompt": [{"role": "system", "content": system}, *exchange, *row["prompt"][1:-1], _user_turn(row, skeleton)]}

    def reference(self, row: dict[str, Any]) -> str | None:
        calls = reference_calls(json.loads(row["ground_truth"]), json.loads(row["functions"]))
        return format_calls(calls)


def _prompt_chars(row: dict[str, Any]) -> int:
    """What a worked example adds to every prompt: its function schemas and its request."""
    return len(row["functions"]) + len(row["prompt"][-1]["content"])


SKELETON_INSTRUCTION = "Each request ends with the call to make: answer with that call, its values filled in from the request."


def call_skeleton(row: dict[str, Any]) -> str:
    """The calls of ``row``'s reference answer with every value replaced by its schema type in angle
    brackets: ``<tool_call>[{"name": "f", "arguments": {"s": "<string>", "x": <integer>}}]</tool_call>``.

    A string's placeholder is quoted, every other type's is bare, where the JSON value goes: the
    skeleton shows which values are quoted, and copied as it stands it is no valid call (not even
    the ``format`` component's block), so copying the skeleton earns nothing for a non-string value.
    """
    functions = json.loads(row["functions"])
    properties = {f["name"]: (f.get("parameters") or {}).get("properties") or {} for f in functions}
    calls = []
    for name, args in reference_calls(json.loads(row["ground_truth"]), functions):
        types = {key: str((properties.get(name, {}).get(key) or {}).get("type", "value")) for key in args}
        holes = ", ".join(
            f"{json.dumps(key, ensure_ascii=False)}: " + (f'"<{kind}>"' if kind in _QUOTED_TYPES else f"<{kind}>")
            for key, kind in types.items()
        )
        calls.append(f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {{{holes}}}}}')
    return "<tool_call>[" + ", ".join(calls) + "]</tool_call>"


# schema types whose placeholder is quoted (a JSON string goes there)
_QUOTED_TYPES = frozenset({"string", "value", "any"})


def values_in_request(row: dict[str, Any]) -> bool:
    """Whether every required value of ``row``'s reference calls is written in its request, so that
    the answer can be copied from the request: for each parameter without an empty-string option
    (BFCL's mark of an optional one), some acceptable value is a number written as such (``4``,
    ``0.5``; ``4.0`` also as ``4``; not inside a longer number), a non-empty string contained in
    the request (ignoring case), or a list whose every element is written. Booleans, dicts and
    empty strings are never written; an item without a required value is not kept either.
    """
    request = row["prompt"][-1]["content"]
    required = [
        options
        for call in json.loads(row["ground_truth"])
        for args in call.values()
        for options in args.values()
        if "" not in options
    ]
    return bool(required) and all(any(_written(value, request) for value in options) for options in required)


def _written(value: Any, request: str) -> bool:
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        forms = {str(value)} | ({str(int(value))} if float(value).is_integer() else set())
        return any(re.search(rf"(?<![\d.]){re.escape(form)}(?![\d]|\.\d)", request) for form in forms)
    if isinstance(value, str):
        return bool(value) and value.lower() in request.lower()
    if isinstance(value, list):
        return bool(value) and all(_written(item, request) for item in value)
    return False


def _user_turn(row: dict[str, Any], skeleton: bool) -> dict[str, Any]:
    """``row``'s request (its last message), ending with :func:`call_skeleton` when ``skeleton``."""
    turn = dict(row["prompt"][-1])
    if skeleton:
        turn["content"] = f"{turn['content']}\nCall to make: {call_skeleton(row)}"
    return turn


register_task(BFCLTask())
