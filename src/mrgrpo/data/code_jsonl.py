"""Your own code problems (a JSON-lines file or any ``datasets`` source) in the columns of :mod:`mrgrpo.rewards.code`.

One problem per row. Required: ``prompt`` (a string or a list of chat messages) and ``test``.
Optional: ``test_format`` (``humaneval`` | ``assert`` | ``stdio``; default ``assert``),
``entry_point`` (required for ``humaneval``), ``reference``, ``code_prefix``, ``task_id``
(default: the line number). Tests by format:

* ``humaneval``: a string defining ``check(candidate)``;
* ``assert``: a string of assert statements, or a list of them (joined by newlines), as
  MBPP's ``test_list``;
* ``stdio``: a list of ``{"input": ..., "output": ...}`` (stored as a JSON string), or a
  mapping ``{"inputs": [...], "outputs": [...]}`` (APPS/TACO style).

Datasets whose fields have other names map them with ``columns`` (ours -> theirs), e.g. MBPP:
``{"prompt": "text", "test": "test_list", "reference": "code"}``. A string prompt is wrapped in
``instruction`` (a chat message asking for one fenced Python block).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from mrgrpo.errors import ConfigError, InputError

FORMATS = ("humaneval", "assert", "stdio")
FIELDS = ("prompt", "test", "test_format", "entry_point", "reference", "code_prefix", "task_id")
INSTRUCTION = "{prompt}\n\nReply with the complete Python solution in a single ```python code block."


def _stdio_cases(test: Any, line: str) -> list[dict[str, Any]]:
    cases = json.loads(test) if isinstance(test, str) else test
    if isinstance(cases, Mapping) and {"inputs", "outputs"} <= set(cases):
        cases = [{"input": i, "output": o} for i, o in zip(cases["inputs"], cases["outputs"])]
    if not isinstance(cases, list) or not all(isinstance(c, Mapping) and {"input", "output"} <= set(c) for c in cases):
        raise InputError(f"{line}: stdio tests must be a list of {{'input', 'output'}}")
    return [dict(c) for c in cases]


def _row(item: Mapping[str, Any], line: int, test_format: str | None = None, instruction: str | None = None,
         unit: str = "line") -> dict[str, Any]:
    where = f"{unit} {line}"
    missing = [k for k in ("prompt", "test") if item.get(k) in (None, "", [])]
    if missing:
        raise InputError(f"{where}: missing {missing}")
    fmt = item.get("test_format") or test_format or "assert"
    if fmt not in FORMATS:
        raise InputError(f"{where}: test_format {fmt!r} is not one of {FORMATS}")
    test = item["test"]
    if fmt == "stdio":
        test = json.dumps(_stdio_cases(test, where))
    elif isinstance(test, list):
        test = "\n".join(test)
    if fmt == "humaneval" and not item.get("entry_point"):
        raise InputError(f"{where}: humaneval-style tests need an entry_point")
    prompt = item["prompt"]
    if isinstance(prompt, str) and instruction:
        prompt = [{"role": "user", "content": instruction.format(prompt=prompt)}]
    return {
        "prompt": prompt,
        "task_id": str(item.get("task_id") if item.get("task_id") is not None else line),
        "code_prefix": item.get("code_prefix") or "",
        "test": test,
        "test_format": fmt,
        "entry_point": item.get("entry_point") or "",
        "reference": item.get("reference") or "",
    }


def code_records(
    items: Iterable[Mapping[str, Any]],
    columns: Mapping[str, str] | None = None,
    test_format: str | None = None,
    instruction: str | None = None,
) -> list[dict[str, Any]]:
    """Validated rows from ``items`` (``columns`` maps our field names to theirs; raises
    :class:`~mrgrpo.errors.InputError` naming the bad row, 1-based)."""
    columns = dict(columns or {})
    unknown = sorted(set(columns) - set(FIELDS))
    if unknown:
        raise ConfigError(f"columns: {unknown} are not code fields; fields: {', '.join(FIELDS)}")
    rows = []
    for number, item in enumerate(items, 1):
        mapped = {field: item.get(columns.get(field, field)) for field in FIELDS}
        rows.append(_row(mapped, number, test_format, instruction, unit="row"))
    return rows


def code_jsonl_records(path: str) -> list[dict[str, Any]]:
    """Validated rows of a JSONL file (raises :class:`~mrgrpo.errors.InputError` naming the bad line)."""
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
