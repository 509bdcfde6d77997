"""A stateful mrgrpo estimator's state inside verl: carried, logged, checkpointed, restored.

verl computes advantages in its trainer process (the driver on the legacy trainer, the trainer
actor on v1), one call per training batch, and never for validation. That process holds one
:class:`EstimatorState`, :data:`STATE`: each ``mrgrpo_*`` call on a stateful estimator
(:func:`mrgrpo.compute_advantages_with_state`) reads the state the previous batch left and stores
the new one, together with its numeric entries as metrics (``mrgrpo/state/...``), which the
trainer adds to the step's metrics. The trainers' ``_save_checkpoint`` writes it as
:data:`STATE_FILE` beside verl's own checkpoint (``<default_local_dir>/global_step_<n>/``);
their ``_load_checkpoint`` reads it back from the folder verl resumes from.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrgrpo.errors import ConfigError
from mrgrpo.integrations.verl.names import mrgrpo_name

#: File in each ``global_step_<n>`` checkpoint folder: ``{"estimator": name, "state": {...}}``.
STATE_FILE = "mrgrpo_estimator_state.json"
#: ``DataProto.meta_info`` key under which the legacy trainer's batch carries the state metrics.
METRICS_KEY = "mrgrpo_state_metrics"


def state_metrics(state: Any, prefix: str = "mrgrpo/state") -> dict[str, float]:
    """Numeric scalar leaves of a state as ``prefix/a/b`` (nested dicts flattened; lists skipped)."""
    out: dict[str, float] = {}
    if isinstance(state, dict):
        for key, value in state.items():
            out.update(state_metrics(value, f"{prefix}/{key}"))
    elif isinstance(state, (bool, int, float)):
        out[prefix] = float(state)
    return out


@dataclass
class EstimatorState:
    """The state of the estimator this process trains with (one per process)."""

    estimator: str | None = None
    state: dict[str, Any] | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    def get(self, estimator: str) -> dict[str, Any] | None:
        """The state left for ``estimator`` (``None``: its first step, or another estimator's state)."""
        return self.state if self.estimator == estimator else None

    def put(self, estimator: str, state: dict[str, Any] | None) -> None:
        self.estimator, self.state = estimator, state
        self.metrics = state_metrics(state) if state is not None else {}

    def reset(self) -> None:
        self.estimator, self.state, self.metrics = None, None, {}

    def take_metrics(self) -> dict[str, float]:
        """The last step's state metrics, once (a second call returns ``{}`` until the next step)."""
        metrics, self.metrics = self.metrics, {}
        return metrics

    def save(self, folder: str | os.PathLike[str]) -> Path | None:
        """Write the state into a checkpoint folder (nothing when there is none)."""
        if self.state is None:
            return None
        path = Path(folder) / STATE_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"estimator": self.estimator, "state": self.state}, allow_nan=False))
        return path

    def load(self, folder: str | os.PathLike[str], estimator: str | None) -> bool:
        """Restore the state saved in a checkpoint folder for ``estimator``; whether one was there.
        A state saved by another estimator raises (resume with the run's own estimator)."""
        record = read_record(folder, estimator)
        if record is None:
            return False
        self.estimator, self.state, self.metrics = record.get("estimator"), record.get("state"), {}
        return True


def read_record(folder: str | os.PathLike[str], estimator: str | None) -> dict[str, Any] | None:
    """The ``{"estimator", "state"}`` record saved in a checkpoint folder (``None``: none there);
    one saved by another estimator than ``estimator``, or unreadable, raises :class:`ConfigError`."""
    path = Path(folder) / STATE_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: the estimator state cannot be read ({type(error).__name__})") from None
    if not isinstance(record, dict):
        raise ConfigError(f"{path}: the estimator state file must hold a mapping")
    if estimator is not None and record.get("estimator") != estimator:
        raise ConfigError(
            f"{path}: the estimator state was saved by mrgrpo_{record.get('estimator')}, this run uses "
            f"mrgrpo_{estimator}: resume with the run's own algorithm.adv_estimator"
        )
    return record


def resume_folder(config: Any) -> str | None:
    """The ``global_step_<n>`` folder verl will resume from, found as verl's ``_load_checkpoint``
    finds it from the config's ``trainer`` section (``None``: a fresh start)."""
    trainer = _get(config, "trainer")
    mode = _get(trainer, "resume_mode") or "auto"
    if mode == "disable":
        return None
    if mode == "resume_path":
        given = _get(trainer, "resume_from_path")
        if not given:
            return None
        return str(given) if os.path.isabs(str(given)) else os.path.join(os.getcwd(), str(given))
    root = _get(trainer, "default_local_dir")
    if root is None:
        return None
    root = str(root) if os.path.isabs(str(root)) else os.path.join(os.getcwd(), str(root))
    tracker = Path(root) / "latest_checkpointed_iteration.txt"  # verl's tracker file
    try:
        step = int(tracker.read_text().strip())
    except (OSError, ValueError):
        return None
    folder = Path(root) / f"global_step_{step}"
    return str(folder) if folder.is_dir() else None


#: This process's estimator state.
STATE = EstimatorState()


def checkpoint_folder(trainer_config: Any, global_steps: int) -> str:
    """The ``global_step_<n>`` folder verl saves to / resumes from, as verl's own
    ``_save_checkpoint`` / ``_load_checkpoint`` compute it (``trainer`` section of the config)."""
    mode = _get(trainer_config, "resume_mode")
    given = _get(trainer_config, "resume_from_path")
    if mode == "resume_path" and given and f"global_step_{global_steps}" in str(given):
        folder = str(given)
    else:
        folder = os.path.join(str(_get(trainer_config, "default_local_dir")), f"global_step_{global_steps}")
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)


def save_after(trainer: Any) -> None:
    """Called after verl's ``_save_checkpoint``: the state beside the checkpoint just written."""
    STATE.save(checkpoint_folder(trainer.config.trainer, trainer.global_steps))


def load_after(trainer: Any) -> None:
    """Called after verl's ``_load_checkpoint``: the state of the checkpoint verl resumed from
    (a fresh start, ``global_steps == 0``, starts from no state)."""
    estimator = mrgrpo_name(trainer.config.algorithm.adv_estimator)
    STATE.reset()
    steps = int(getattr(trainer, "global_steps", 0) or 0)
    if estimator is not None and steps > 0:
        folder = checkpoint_folder(trainer.config.trainer, steps)
        if STATE.load(folder, estimator):
            from mrgrpo.integrations.verl.binding import check_resumed  # (it reads verl's settings)

            check_resumed(trainer.config, estimator, STATE.state, str(Path(folder) / STATE_FILE))


def _get(config: Any, key: str) -> Any:
    getter = getattr(config, "get", None)
    return getter(key, None) if callable(getter) else getattr(config, key, None)
