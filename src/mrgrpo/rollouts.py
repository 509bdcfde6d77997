"""Reading reward batches (one rollout per JSONL line) for the ``advantages``/``diagnose`` commands.

Each line is a JSON object holding the group field (``group_id`` by default: a string, a
number, or a list/object compared by value) and one value per reward component. A component
value is a number, a boolean (read as 1/0) or ``null`` (not scored: NaN in the reward matrix).

Which fields are components is never guessed from one line:

* ``components=[...]`` names them; every line must then have every one of them.
* Otherwise the components are the *union* over all lines of the fields holding a number or a
  boolean, in order of first appearance, minus the group field and the metadata fields of
  :data:`METADATA_FIELDS` (``step``, ``index``, ``seed``, ...); :attr:`RewardBatch.schema` says
  which fields were read and which were left out, and why, so the caller can print it.

A component missing from a line is an error unless ``allow_missing=True`` (then it reads as
NaN, not scored); a name in ``components`` that no line has is always an error. Every message
names the file, the 1-based line number and the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mrgrpo.errors import InputError

#: The file a training run writes its scored rollouts to, one JSON line per rollout (in the run
#: directory; ``mrgrpo analyze RUN_DIR`` reads it). Named here, in the core, so that reading a run
#: needs no training extra.
ROLLOUTS_FILE = "rollouts.jsonl"

#: Numeric fields that describe a rollout rather than score it: never taken as a component
#: unless named in ``components``.
METADATA_FIELDS = frozenset(
    {
        "step", "global_step", "epoch", "iteration", "index", "idx", "id", "uid", "row", "line",
        "rollout", "rollout_id", "rollout_index", "sample", "sample_id", "sample_index", "prompt_id",
        "prompt_index", "problem_id", "task_id", "group", "group_index", "seed", "time", "time_s",
        "timestamp", "num_tokens", "completion_length", "tokens",
    }
)


@dataclass(frozen=True)
class RewardBatch:
    """A batch read from JSONL: ``rewards`` ``[N, K]`` float64 (NaN = null/missing),
    ``group_ids`` ``[N]`` ints numbering the groups in order of first appearance, and
    ``group_labels`` the group field's values as written (for display)."""

    rewards: torch.Tensor
    group_ids: list[int]
    names: list[str]
    records: list[dict[str, Any]]
    line_numbers: list[int] = field(default_factory=list)
    #: field -> why it is not a component (``"group field"``, ``"metadata"``, ``"text"``, ...)
    ignored: dict[str, str] = field(default_factory=dict)
    explicit: bool = False
    group_labels: list[Any] = field(default_factory=list)

    @property
    def schema(self) -> str:
        """One line: how the file was read (components, where they came from, ignored fields)."""
        source = "as given by --components" if self.explicit else "the union of numeric/boolean fields over all lines"
        text = f"components ({source}): {', '.join(self.names)}"
        if self.ignored:
            text += "; not components: " + ", ".join(f"{k} ({v})" for k, v in self.ignored.items())
        return text


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if _is_number(value):
        return "number"
    return {str: "text", list: "list", dict: "object"}.get(type(value), type(value).__name__)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


class _DuplicateKey(ValueError):
    pass


def _parse_constant(name: str) -> float:
    # json accepts NaN/Infinity (not JSON); NaN reads as "not scored" like null, ±Infinity is refused
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[name]


def _read_lines(path: Path, group_field: str) -> tuple[list[dict[str, Any]], list[int]]:
    records: list[dict[str, Any]] = []
    numbers: list[int] = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text (byte {error.start}); pass a JSONL file") from None
    for line_number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_pairs_hook=_no_duplicates, parse_constant=_parse_constant)
        except _DuplicateKey as error:
            raise InputError(f"{path}:{line_number}: field {error.args[0]!r} appears twice in one line") from None
        except json.JSONDecodeError as error:
            raise InputError(f"{path}:{line_number}: not valid JSON ({error.msg} at column {error.colno})") from None
        except RecursionError:
            raise InputError(f"{path}:{line_number}: JSON nested too deeply") from None
        if not isinstance(record, dict):
            raise InputError(f"{path}:{line_number}: each line must be a JSON object, got a {_kind(record)}")
        if group_field not in record:
            raise InputError(f"{path}:{line_number}: missing group field {group_field!r} (choose it with --group-field)")
        group = record[group_field]
        if group is None or isinstance(group, (bool, float)):
            raise InputError(
                f"{path}:{line_number}: field {group_field!r} (the group id) must be a string, an integer, a list "
                f"or an object, got {_kind(group)} {group!r}"
            )
        records.append(record)
        numbers.append(line_number)
    if not records:
        raise InputError(f"{path}: no rollouts in the file (one JSON object per line)")
    return records, numbers


def _union_components(records: list[dict[str, Any]], group_field: str) -> tuple[list[str], dict[str, str]]:
    kinds: dict[str, set[str]] = {}
    for record in records:
        for key, value in record.items():
            kinds.setdefault(key, set()).add(_kind(value))
    components, ignored = [], {}
    for key, seen in kinds.items():
        if key == group_field:
            ignored[key] = "group field"
        elif not seen & {"number", "boolean"}:
            ignored[key] = "always null" if seen == {"null"} else "/".join(sorted(seen - {"null"}))
        elif key in METADATA_FIELDS:
            ignored[key] = "metadata; name it in --components to use it"
        else:
            components.append(key)
    return components, ignored


def read_reward_jsonl(
    path: str | Path,
    group_field: str = "group_id",
    components: list[str] | None = None,
    allow_missing: bool = False,
    missing_hint: str = "add it (null = not scored) or pass --allow-missing to read it as not scored",
) -> RewardBatch:
    """Read rollouts from JSONL (see the module docstring for the format and the rules).

    Args:
        path: the JSONL file.
        group_field: the field holding each rollout's group id.
        components: the component fields, in order; ``None``: the union of numeric/boolean
            fields over all lines, minus metadata fields.
        allow_missing: read a component absent from a line as NaN (not scored) instead of
            raising.
        missing_hint: the fix a missing component's message suggests.

    Raises:
        InputError: naming the file, the 1-based line and the field.
    """
    path = Path(path)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "no such file"
        raise InputError(f"{path}: {what}; pass a JSONL file with one rollout per line")
    records, line_numbers = _read_lines(path, group_field)
    explicit = components is not None
    if explicit:
        components = [name.strip() for name in components]
        if not components or not all(components):
            raise InputError(f"--components: empty component name in {components!r}; give comma-separated field names")
        duplicated = sorted({name for name in components if components.count(name) > 1})
        if duplicated:
            raise InputError(f"--components names {duplicated} more than once")
        if group_field in components:
            raise InputError(f"--components includes the group field {group_field!r}")
        present = {key for record in records for key in record}
        unknown = [name for name in components if name not in present]
        if unknown:
            available = ", ".join(sorted(present - {group_field})) or "none"
            raise InputError(f"{path}: component(s) {unknown} appear in no line; fields in the file: {available}")
        ignored = {key: "not in --components" for key in dict.fromkeys(k for r in records for k in r) if key not in components}
        ignored.pop(group_field, None)
    else:
        components, ignored = _union_components(records, group_field)
        if not components:
            raise InputError(
                f"{path}: no numeric or boolean reward fields besides {group_field!r}"
                + (f" (left out: {', '.join(f'{k} ({v})' for k, v in ignored.items())})" if ignored else "")
            )
    rows = []
    for line_number, record in zip(line_numbers, records):
        row = []
        for name in components:
            if name not in record:
                if allow_missing:
                    row.append(math.nan)
                    continue
                raise InputError(f"{path}:{line_number}: component {name!r} is missing (other lines have it); {missing_hint}")
            row.append(_component_value(record[name], path, line_number, name))
        rows.append(row)
    labels = [record[group_field] for record in records]
    # Ids compare by type and value: 1 and "1" are different groups; lists/objects by content.
    codes: dict[tuple[str, str], int] = {}
    group_ids = [codes.setdefault((type(g).__name__, json.dumps(g, sort_keys=True)), len(codes)) for g in labels]
    return RewardBatch(
        torch.tensor(rows, dtype=torch.float64), group_ids, list(components), records, line_numbers, ignored,
        explicit, labels,
    )


def _component_value(value: Any, path: Path, line_number: int, name: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool):
        return float(value)
    if _is_number(value):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if math.isinf(number):
            raise InputError(
                f"{path}:{line_number}: field {name!r} is {value!r}, beyond the float range; "
                "clip rewards to a finite range (null = not scored)"
            )
        return number
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    raise InputError(
        f"{path}:{line_number}: field {name!r} must be a number, a boolean or null, got {_kind(value)} {shown}"
    )
