"""Small helpers over plain records that several layers share: JSONL files, means, moving averages.

Plain Python (no torch, no numpy), so data loaders, tasks, reports and experiment plots all read
and summarize their records one way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mrgrpo.errors import InputError


def read_jsonl(path: str | Path, *, missing_ok: bool = False, truncated_tail_ok: bool = False) -> list[dict[str, Any]]:
    """The JSON values of a JSONL file, one per non-blank line, in file order (UTF-8).

    A line that does not parse raises :class:`~mrgrpo.errors.InputError` naming the file and the
    line, with one exception when ``truncated_tail_ok``: a last line without its newline (a writer
    stopped mid-line, e.g. a run killed while logging) is left out. ``missing_ok``: a missing file
    reads as no records.
    """
    path = Path(path)
    if missing_ok and not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            if truncated_tail_ok and number == len(lines):  # the last line has no newline after it
                break
            raise InputError(f"{path}:{number}: not a JSON line ({error.msg}): fix or remove that line") from None
    return records


def mean(values: Iterable[Any], empty: float | None = math.nan) -> float | None:
    """Arithmetic mean of ``values`` (booleans and ints count as numbers); ``empty`` when there are none."""
    numbers = [float(v) for v in values]
    return sum(numbers) / len(numbers) if numbers else empty


def moving_average(values: Iterable[float | None], window: int) -> list[float]:
    """Trailing mean over the last ``window`` entries at each position; ``None`` and non-finite
    entries are skipped inside a window (NaN where a window holds no finite value)."""
    out: list[float] = []
    kept: list[float] = []
    for value in values:
        kept.append(math.nan if value is None else float(value))
        recent = [x for x in kept[-window:] if math.isfinite(x)]
        out.append(sum(recent) / len(recent) if recent else math.nan)
    return out
