"""The rows of a verl v1 batch: one per agent-loop output, grouped into sessions and prompts.

verl's v1 trainer (``trainer.use_v1=true``) keeps every agent-loop output as one TransferQueue
row under the key ``{uid}_{session_id}_{index}``: ``uid`` is the prompt's id (the GRPO group),
``session_id`` one of its ``rollout.n`` sessions, ``index`` the output's position in the session
(a multi-turn agent loop may return several outputs; the last one carries the session's reward).
Advantages are computed on each session's final output, grouped by ``uid``, and broadcast to
the session's other outputs: verl does this for its ``grpo``; :class:`Trajectories` lets mrgrpo's
estimators do the same with every reward component.

This module is pure (numpy only). :mod:`.v1` builds a :class:`Trajectories` from the queue and
puts it in scope (:func:`using`) while verl's own ``_compute_advantage`` runs; the registered
estimators read it with :func:`current`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mrgrpo.errors import InputError

_CURRENT: ContextVar[Trajectories | None] = ContextVar("mrgrpo_verl_trajectories", default=None)


def parse_key(key: str) -> tuple[str, str, int]:
    """``"{uid}_{session_id}_{index}"`` -> ``(uid, session_id, index)`` (the uid may contain ``_``)."""
    parts = str(key).rsplit("_", 2)
    if len(parts) != 3 or not parts[0]:
        raise InputError(f"TransferQueue key {key!r} is not '{{uid}}_{{session_id}}_{{index}}' as verl's v1 agent loop writes it")
    try:
        return parts[0], parts[1], int(parts[2])
    except ValueError:
        raise InputError(f"TransferQueue key {key!r}: the output index {parts[2]!r} is not an integer") from None


@dataclass(frozen=True)
class Trajectories:
    """A v1 batch's row keys and reward components, in the order of the trainer's rows.

    Attributes:
        keys: ``(N,)`` TransferQueue keys ``{uid}_{session_id}_{index}``.
        columns: component name -> ``(N,)`` float64 scores (NaN = not scored); empty when the
            scalar score is the only component.
        padding: ``(N,)`` bool, verl's synthetic rows added to fill data-parallel shards (tag
            ``is_padding``); they take no part in any statistic and get advantage 0.
    """

    keys: tuple[str, ...]
    columns: Mapping[str, np.ndarray] = field(default_factory=dict)
    padding: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.keys)
        padding = np.zeros(n, dtype=bool) if self.padding is None else np.asarray(self.padding, dtype=bool)
        if padding.shape != (n,):
            raise InputError(f"padding has shape {padding.shape} for {n} rows")
        for name, column in self.columns.items():
            if np.shape(column) != (n,):
                raise InputError(f"reward component {name!r} has shape {np.shape(column)} for {n} rows")
        object.__setattr__(self, "padding", padding)

    def __len__(self) -> int:
        return len(self.keys)

    def sessions(self, index: Sequence[Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(final_rows [S], row_session [N])``: the row of each session's last output (in order
        of first appearance) and, for every row, the position of its session in ``final_rows``.

        ``index`` (the trainer's ``uid`` column) must name, row by row, the uid in the key: a
        mismatch means the rows and the keys are not aligned, and raises.
        """
        uids, sessions, positions = zip(*(parse_key(k) for k in self.keys)) if self.keys else ((), (), ())
        if index is not None:
            index = list(index)
            if len(index) != len(self.keys):
                raise InputError(f"{len(index)} uids for {len(self.keys)} TransferQueue keys: rows and keys are not aligned")
            for i, (uid, key) in enumerate(zip(index, self.keys)):
                if str(uid) != uids[i]:
                    raise InputError(f"row {i} has uid {uid!r} but key {key!r}: rows and keys are not aligned")
        final: dict[tuple[str, str], tuple[int, int]] = {}
        for row, (uid, session, position) in enumerate(zip(uids, sessions, positions)):
            known = final.get((uid, session))
            if known is not None and known[0] == position:
                raise InputError(f"TransferQueue key {self.keys[row]!r} appears twice in one batch")
            if known is None or known[0] < position:
                final[(uid, session)] = (position, row)
        slot = {session: i for i, session in enumerate(final)}
        final_rows = np.array([row for _, row in final.values()], dtype=np.int64)
        row_session = np.array([slot[(u, s)] for u, s in zip(uids, sessions)], dtype=np.int64)
        return final_rows, row_session


def current() -> Trajectories | None:
    """The v1 batch whose advantages are being computed, or ``None`` (legacy trainer)."""
    return _CURRENT.get()


@contextlib.contextmanager
def using(trajectories: Trajectories) -> Iterator[Trajectories]:
    """Put ``trajectories`` in scope for the estimators called inside the block."""
    token = _CURRENT.set(trajectories)
    try:
        yield trajectories
    finally:
        _CURRENT.reset(token)


def scores_column(values: Sequence[Any], name: str) -> np.ndarray:
    """One float64 score per row from queue values (numbers, 0-d tensors/arrays, ``None`` = NaN)."""
    out = np.empty(len(values), dtype=np.float64)
    for i, value in enumerate(values):
        if value is None:
            out[i] = np.nan
            continue
        if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
            value = value.item()
        if not isinstance(value, int | float | np.number | np.bool_):
            raise InputError(f"reward component {name!r} of row {i} is {value!r}; it must be a number (or None = not scored)")
        out[i] = float(value)
    if np.isinf(out).any():
        raise InputError(f"reward component {name!r} has an infinite score (row {int(np.flatnonzero(np.isinf(out))[0])})")
    return out
