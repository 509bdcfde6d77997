"""Trainer callbacks of the train job: run files, the progress bar, and clean stops.

* :class:`RunLogCallback` appends one JSON line per logged step to ``metrics.jsonl`` (and each
  new :func:`mrgrpo.diagnose` report to ``diagnostics.jsonl``: every step, or every
  ``diagnostics_every`` steps) and writes the same scalars to TensorBoard under ``tensorboard/``.
* :class:`StopCallback` stops (with a checkpoint) on Ctrl-C, before a wall-clock budget runs
  out, and checkpoints the last step.
* :class:`ProgressCallback` draws a rich progress bar: step, rewards, time left.
"""

from __future__ import annotations

import json
import math
import signal
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

SKIP_LOG_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss", "total_flos")


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def truncate_jsonl(path: Path, last_step: int) -> int:
    """Keep only lines with ``step <= last_step`` (resume without duplicates); returns kept count."""
    if not path.exists():
        return 0
    kept = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a crash
            continue
        if int(record.get("step", 0)) <= last_step:
            kept.append(line)
    path.write_text("".join(line + "\n" for line in kept))
    return len(kept)


class RunLogCallback(TrainerCallback):
    """metrics.jsonl + diagnostics.jsonl + TensorBoard, on the main process."""

    def __init__(self, run_dir: Path, trainer_ref: Any = None, purge_step: int | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.trainer = trainer_ref
        self.purge_step = purge_step
        self.writer = None
        self.started = time.monotonic()
        self.elapsed_before = 0.0  # seconds of earlier sessions (resume)
        self._written_diagnostics: Any = None  # the report last written (diagnostics_every > 1 skips steps)

    def _writer(self) -> Any:
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=self.purge_step)
        return self.writer

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs or any(k in logs for k in SKIP_LOG_KEYS):
            return
        step = int(state.global_step)
        record = {"step": step, "time_s": round(self.elapsed_before + time.monotonic() - self.started, 3)}
        record.update({k: _clean(v) for k, v in logs.items() if isinstance(v, (int, float)) or v is None})
        with (self.run_dir / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        diagnostics = getattr(self.trainer, "last_diagnostics", None) if self.trainer is not None else None
        if diagnostics is not None and diagnostics is not self._written_diagnostics:  # new since the last log
            self._written_diagnostics = diagnostics
            with (self.run_dir / "diagnostics.jsonl").open("a") as f:
                f.write(json.dumps({"step": step, **diagnostics}, default=_clean) + "\n")
        writer = self._writer()
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)):
                writer.add_scalar(key, value, step)
        writer.flush()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class StopCallback(TrainerCallback):
    """Checkpoint and stop on Ctrl-C or SIGTERM or before ``max_wall_seconds``; checkpoint the last step.

    The wall clock counts from ``job_started`` (``time.monotonic()``); training stops when the
    next step (estimated as 1.2 x the mean step so far) plus ``reserve_s`` (final save and
    report) would not fit.
    """

    def __init__(self, max_wall_seconds: float | None, job_started: float, reserve_s: float = 20.0) -> None:
        self.max_wall_seconds = max_wall_seconds
        self.job_started = job_started
        self.reserve_s = reserve_s
        self.interrupted = False
        self.reason: str | None = None
        self._step_started: float | None = None
        self._step_times: list[float] = []
        self._previous_handler: Any = None

    # Ctrl-C (SIGINT) and SIGTERM (a scheduler's preemption, `kill`): the first asks for a
    # checkpoint and a clean stop after the current step; a second one interrupts immediately
    # (KeyboardInterrupt / SystemExit(143): the last checkpoint stays valid, children are reaped).
    _MESSAGES = {
        signal.SIGINT: "Ctrl-C: saving a checkpoint after this step, then stopping (Ctrl-C again to abort now)",
        signal.SIGTERM: "SIGTERM: saving a checkpoint after this step, then stopping (SIGTERM again to abort now)",
    }
    _REASONS = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "interrupted (SIGTERM)"}

    def install(self, signals: tuple[int, ...] = (signal.SIGINT,)) -> None:
        """Handle ``signals`` (main thread only); :meth:`uninstall` puts the previous handlers back."""
        self._previous_handler = self._previous_handler or {}
        for signum in signals:
            self._previous_handler[signum] = signal.getsignal(signum)
            signal.signal(signum, self._on_signal)

    def uninstall(self) -> None:
        for signum, previous in (self._previous_handler or {}).items():
            signal.signal(signum, previous)
        self._previous_handler = None

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.interrupted:
            if signum == signal.SIGTERM:
                raise SystemExit(128 + signal.SIGTERM)
            raise KeyboardInterrupt
        self.interrupted = True
        self.reason = self._REASONS.get(signum, f"interrupted (signal {signum})")
        print("\n" + self._MESSAGES.get(signum, self.reason), flush=True)

    def request_stop(self, reason: str) -> None:
        """Stop after the current step (used by Ctrl-C and by tests)."""
        self.interrupted = True
        self.reason = reason

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step_started = time.monotonic()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self._step_started is not None:
            self._step_times.append(time.monotonic() - self._step_started)
        if state.global_step >= state.max_steps:
            control.should_save = True
            return control
        if self.interrupted:
            self.reason = self.reason or self._REASONS[signal.SIGINT]
        elif self.max_wall_seconds is not None and self._step_times:
            elapsed = time.monotonic() - self.job_started
            mean_step = sum(self._step_times) / len(self._step_times)
            if elapsed + 1.2 * mean_step + self.reserve_s > self.max_wall_seconds:
                self.reason = f"wall-clock budget ({self.max_wall_seconds:.0f} s) reached"
        if self.reason is not None:
            control.should_training_stop = True
            control.should_save = True
        return control

    @property
    def mean_step_seconds(self) -> float | None:
        return sum(self._step_times) / len(self._step_times) if self._step_times else None


def _split_text(logs: dict[str, Any]) -> str:
    """``  (gen 12.1 s, rewards 0.4 s, ..., RSS 2900 MB)`` from a step's ``profile/`` log keys ("" if none)."""
    short = {"generation": "gen", "rewards": "rewards", "loss_backward": "loss+backward", "advantages": "adv",
             "diagnostics": "diag", "batch_other": "batch", "optimizer_other": "other"}
    parts = [f"{label} {logs[f'profile/{phase}_s']:.2f} s" for phase, label in short.items() if f"profile/{phase}_s" in logs]
    if logs.get("profile/peak_rss_mb") is not None:
        parts.append(f"RSS {logs['profile/peak_rss_mb']:.0f} MB")
    return f"  ({', '.join(parts)})" if parts else ""


class ProgressCallback(TrainerCallback):
    """A rich progress bar: step, component rewards (with the weighted total), time left."""

    def __init__(self, names: list[str], stop: StopCallback, console: Any = None) -> None:
        from rich.console import Console

        self.names = names
        self.stop = stop
        self.console = console or Console(stderr=True)
        self.progress: Any = None
        self.task: Any = None
        self.last_rewards = ""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("[bold]step"),
            MofNCompleteColumn(),
            BarColumn(bar_width=24),
            TextColumn("{task.fields[rewards]}"),
            TimeElapsedColumn(),
            TextColumn("left {task.fields[left]}"),
            console=self.console,
            transient=False,
            disable=not self.console.is_terminal,
        )
        self.progress.start()
        self.task = self.progress.add_task(
            "train", total=state.max_steps, completed=state.global_step, rewards="", left="?"
        )

    def _left(self, state: Any) -> str:
        mean = self.stop.mean_step_seconds
        if mean is None:
            return "?"
        left = (state.max_steps - state.global_step) * mean
        if self.stop.max_wall_seconds is not None:
            wall_left = self.stop.max_wall_seconds - (time.monotonic() - self.stop.job_started)
            left = min(left, max(wall_left, 0.0))
        minutes, seconds = divmod(int(left), 60)
        return f"{minutes}m{seconds:02d}s"

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if self.progress is None or not logs or "mrgrpo/reward_total" not in logs:
            return
        parts = [f"total {logs['mrgrpo/reward_total']:.2f}"]
        for name in self.names:
            value = logs.get(f"mrgrpo/rewards/{name}")
            if value is not None:
                parts.append(f"{name} {value:.2f}")
        self.last_rewards = " ".join(parts)
        left = self._left(state)
        self.progress.update(self.task, completed=state.global_step, rewards=self.last_rewards, left=left)
        if not self.console.is_terminal:  # logs / CI: one plain line per step
            mean = self.stop.mean_step_seconds or 0.0
            self.console.print(
                f"step {state.global_step}/{state.max_steps}  {self.last_rewards}  {mean:.1f} s/step  left {left}"
                + _split_text(logs),
                highlight=False,
            )

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step, left="0m00s")
            self.progress.stop()
            self.progress = None


class ModelCardCallback(TrainerCallback):
    """After each checkpoint, replace TRL's ``README.md`` (whose base model is ``None`` for a local
    or preset model) with mrgrpo's card naming the base model and the estimator."""

    def __init__(self, run_dir: Path, config: Any) -> None:
        self.run_dir = Path(run_dir)
        self.config = config

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        from mrgrpo.train.report import write_model_card

        folder = self.run_dir / f"checkpoint-{state.global_step}"
        write_model_card(self.run_dir, self.config, int(state.global_step), folder if folder.is_dir() else None)
