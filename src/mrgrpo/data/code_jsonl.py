"""Your own code problems from a JSON-lines file, in the columns of :mod:`mrgrpo.rewards.code`.

One JSON object per line. Required: ``prompt`` (a string or a list of chat messages) and
``test``. Optional: ``test_format`` (``humaneval`` | ``assert`` | ``stdio``; default
``assert``), ``entry_point`` (required for ``humaneval``), ``reference``, ``code_prefix``,
``task_id`` (default: the line number). Tests by format:

* ``humaneval``: a string defining ``check(candidate)``;
* ``assert``: a string of assert statements, or a list of them (joined by newlines);
* ``stdio``: a list of ``{"input": ..., "output": ...}`` (stored as a JSON string).
"""

from __future__ import annotations

import json
from typing import Any

FORMATS = ("humaneval", "assert", "stdio")


def _row(item: dict[str, Any], line: int) -> dict[str, Any]:
    missing = [k for k in ("prompt", "test") if k not in item]
    if missing:
        raise ValueError(f"line {line}: missing {missing}")
    fmt = item.get("test_format", "assert")
    if fmt not in FORMATS:
        raise ValueError(f"line {line}: test_format {fmt!r} is not one of {FORMATS}")
    test = item["test"]
    if fmt == "stdio":
        cases = json.loads(test) if isinstance(test, str) else test
        if not all(isinstance(c, dict) and {"input", "output"} <= set(c) for c in cases):
            raise ValueError(f"line {line}: stdio tests must be a list of {{'input', 'output'}}")
        test = json.dumps(cases)
    elif isinstance(test, list):
        test = "\n".join(test)
    if fmt == "humaneval" and not item.get("entry_point"):
        raise ValueError(f"line {line}: humaneval-style tests need an entry_point")
    return {
        "prompt": item["prompt"],
        "task_id": str(item.get("task_id", line)),
        "code_prefix": item.get("code_prefix", ""),
        "test": test,
        "test_format": fmt,
        "entry_point": item.get("entry_point", ""),
        "reference": item.get("reference", ""),
    }


def code_jsonl_records(path: str) -> list[dict[str, Any]]:
    """Validated rows of a JSONL file (raises ``ValueError`` naming the bad line)."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                rows.append(_row(json.loads(line), number))
    return rows


def load_code_jsonl(path: str, limit: int | None = None):
    """The problems as a ``datasets.Dataset``."""
    from datasets import Dataset

    return Dataset.from_list(code_jsonl_records(path)[:limit])
