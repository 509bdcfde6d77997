"""BFCL (Berkeley Function Calling Leaderboard) prompts with their acceptable answers.

The data ships in the ``bfcl-eval`` package (``pip install --no-deps bfcl-eval``: only its data
files are read, nothing of it is imported) as JSON-lines files ``BFCL_v*_{category}.json`` and
``possible_answer/BFCL_v*_{category}.json``. Any directory with that layout works (e.g. a local
snapshot of the ``gorilla-llm/Berkeley-Function-Calling-Leaderboard`` hub dataset).

Rows (the column contract of :mod:`mrgrpo.rewards.tool_call`):

* ``prompt``: ``[system, user]``; the system message lists the function schemas and asks for
  the completion format (:func:`mrgrpo.rewards.tool_call.instruction`).
* ``functions``: JSON list of the BFCL schemas; ``tools``: the same in OpenAI tool format
  (``{"type": "function", "function": ...}`` with JSON-schema types) for chat templates that
  take ``tools=``; ``ground_truth``: JSON list of expected calls with acceptable values;
  ``id`` and ``category``.

Columns hold JSON text because schemas differ from row to row (Arrow needs one schema).
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from datasets import Dataset

from mrgrpo.errors import ConfigError, InputError
from mrgrpo.rewards.tool_call import instruction
from mrgrpo.records import read_jsonl

CATEGORIES = (
    "simple_python", "multiple", "parallel", "parallel_multiple",
    "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
)
ALIASES = {"simple": "simple_python"}
# Categories BFCL ships that this loader does not read, and why (named in the error).
UNSUPPORTED = {
    "simple_java": "Java type semantics", "simple_javascript": "JavaScript type semantics",
    "irrelevance": "no expected call", "live_irrelevance": "no expected call", "live_relevance": "no expected call",
    "multi_turn_base": "multi-turn", "multi_turn_long_context": "multi-turn", "multi_turn_miss_func": "multi-turn",
    "multi_turn_miss_param": "multi-turn", "memory": "multi-turn with memory", "web_search": "multi-turn with search",
    "format_sensitivity": "no expected call",
}
_JSON_SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}


def bfcl_data_dir() -> str:
    """The data directory of the installed ``bfcl-eval`` package (found without importing it)."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("bfcl-eval is not installed: pip install --no-deps bfcl-eval, or pass data_dir")
    return os.path.join(list(spec.submodule_search_locations)[0], "data")


def _category_file(directory: str, category: str) -> str:
    pattern = re.compile(rf"BFCL_v(\d+)_{re.escape(category)}\.json")
    found = [(m, p) for p in glob.glob(os.path.join(directory, "BFCL_v*.json")) if (m := pattern.fullmatch(os.path.basename(p)))]
    matches = [p for _, p in sorted(found, key=lambda mp: int(mp[0].group(1)))]
    if not matches:
        raise FileNotFoundError(f"no BFCL_v*_{category}.json in {directory}")
    return matches[-1]  # the newest version


def openai_tool(function: Mapping[str, Any]) -> dict:
    """A BFCL schema as an OpenAI-style tool (BFCL's ``dict``/``float``/``tuple``/``any`` mapped)."""

    def convert(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: convert(v) for k, v in node.items()}
            if isinstance(node.get("type"), str):
                out["type"] = _JSON_SCHEMA_TYPES.get(node["type"], node["type"])
            return out
        if isinstance(node, list):
            return [convert(v) for v in node]
        return node

    return {"type": "function", "function": convert(dict(function))}


def bfcl_records(
    categories: Sequence[str] = CATEGORIES,
    data_dir: str | None = None,
    think: bool = True,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """BFCL items of ``categories`` as row dicts (see the module docstring for the columns).

    Args:
        categories: BFCL category names (``"simple"`` = ``"simple_python"``): the single-turn
            Python AST ones with possible answers, :data:`CATEGORIES` (``live_*`` included).
        data_dir: a directory with the BFCL files; the installed ``bfcl-eval`` data by default.
        think: the prompt asks for ``<think>…</think>`` before the call block.
        limit: at most this many items per category (the first ones).
    """
    directory = data_dir or bfcl_data_dir()
    records = []
    for category in (ALIASES.get(c, c) for c in categories):
        if category not in CATEGORIES:
            why = UNSUPPORTED.get(category)
            raise ConfigError(
                f"BFCL category {category!r} is not supported" + (f" ({why})" if why else "")
                + f"; supported: {', '.join(CATEGORIES)} (simple = simple_python)"
            )
        path = _category_file(directory, category)
        questions = read_jsonl(path)
        answers = {a["id"]: a["ground_truth"] for a in read_jsonl(os.path.join(directory, "possible_answer", os.path.basename(path)))}
        for item in questions[:limit]:
            turns = item["question"]
            if len(turns) != 1:
                raise InputError(f"{item['id']}: multi-turn items are not supported")
            messages = [dict(m) for m in turns[0]]
            system = instruction(item["function"], think)
            if messages and messages[0].get("role") == "system":  # live_* items may carry their own system line
                system = messages.pop(0)["content"] + "\n\n" + system
            records.append(
                {
                    "prompt": [{"role": "system", "content": system}, *messages],
                    "functions": json.dumps(item["function"], ensure_ascii=False),
                    "tools": json.dumps([openai_tool(f) for f in item["function"]], ensure_ascii=False),
                    "ground_truth": json.dumps(answers[item["id"]], ensure_ascii=False),
                    "id": item["id"],
                    "category": category,
                }
            )
    return records


def load_bfcl(
    categories: Sequence[str] = CATEGORIES,
    data_dir: str | None = None,
    think: bool = True,
    limit: int | None = None,
) -> Dataset:
    """:func:`bfcl_records` as a ``datasets.Dataset``."""
    return Dataset.from_list(bfcl_records(categories, data_dir, think, limit))
