"""Reading reward batches (one rollout per JSONL line) for the ``advantages``/``diagnose`` commands."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class RewardBatch:
    """A batch read from JSONL: ``rewards`` ``[N, K]`` float64 (NaN = null/missing)."""

    rewards: torch.Tensor
    group_ids: list[Any]
    names: list[str]
    records: list[dict[str, Any]]


def read_reward_jsonl(path: str | Path, group_field: str = "group_id", components: list[str] | None = None) -> RewardBatch:
    """Read rollouts from JSONL: each line an object with ``group_field`` and one numeric (or
    null = not scored) field per reward component.

    Without ``components``, the components are the fields of the first line whose values are
    numbers or null, in file order, other than ``group_field``.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file; pass a JSONL file with one rollout per line")
    records: list[dict[str, Any]] = []
    with path.open() as handle:
        for line_number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line_number}: not valid JSON ({error.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{line_number}: each line must be a JSON object")
            if group_field not in record:
                raise ValueError(
                    f"{path}:{line_number}: missing group field {group_field!r} (choose it with --group-field)"
                )
            records.append(record)
    if not records:
        raise ValueError(f"{path}: no rollouts in the file")
    if components is None:
        components = [
            key
            for key, value in records[0].items()
            if key != group_field and (value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)))
        ]
        if not components:
            raise ValueError(f"{path}: the first line has no numeric reward fields besides {group_field!r}")
    rows = []
    for line_number, record in enumerate(records, 1):
        row = []
        for name in components:
            value = record.get(name)
            if value is None:
                row.append(math.nan)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                row.append(float(value))
            else:
                raise ValueError(f"{path}: rollout {line_number}: field {name!r} must be a number or null, got {value!r}")
        rows.append(row)
    group_ids = [record[group_field] for record in records]
    group_ids = [json.dumps(g, sort_keys=True) if isinstance(g, (list, dict)) else g for g in group_ids]
    return RewardBatch(torch.tensor(rows, dtype=torch.float64), group_ids, list(components), records)
