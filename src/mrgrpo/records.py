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


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, one per non-blank line, in file order (UTF-8)."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


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
