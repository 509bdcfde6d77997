"""Where a training step's time and memory go: a per-step split and the peak RSS of the job.

:class:`StepProfiler` is a trainer callback that also wraps a few of the trainer's methods on
the *instance* (nothing of TRL is patched; the names are those :mod:`mrgrpo.train.trl_compat`
already relies on, plus ``_generate``, ``training_step``, ``_prepare_inputs``, ``log``). Each
optimizer step is split into (seconds):

=====================  ================================================================
``generation``         ``_generate``: the policy's sampling (multi-turn: the whole episode,
                       environment turns included)
``rewards``            ``_calculate_rewards``: every reward component (the code sandbox, the
                       AgentDojo checks)
``advantages``         mrgrpo's estimator (``advantages_for``)
``diagnostics``        mrgrpo's per-step metrics and :func:`mrgrpo.diagnose` (``_log_mrgrpo``)
``batch_other``        the rest of ``_generate_and_score_completions`` (tokenization, old
                       log-probs when TRL needs them, TRL's own metrics)
``loss_backward``      ``training_step`` minus the batch preparation above: forward, loss, backward
``optimizer_other``    the remainder of the step (optimizer and scheduler step, callbacks)
``logging``            ``log`` (TRL's metric aggregation and every ``on_log`` callback)
``checkpoint``         ``_save_checkpoint``
=====================  ================================================================

``step`` is the wall time from the step's start to the end of its log and checkpoint. The
split is written to ``profile.jsonl`` (one line per step, also the peak memory) once a step is
complete; the step's ``metrics.jsonl`` line carries the phases known when it is logged
(``profile/<phase>_s``, all but ``logging`` and ``checkpoint``) and ``profile/peak_rss_mb``.

Memory: a background thread samples, every ``interval`` seconds, the resident set of this
process and of every descendant (found by the one tree walk, :mod:`mrgrpo.train.children`; each
read from ``/proc/<pid>/statm``) and keeps the largest sum per step and per run (``peak_rss_mb``); ``trainer_max_rss_mb`` is the kernel's exact high-water
mark of the trainer process alone (``VmHWM``). A forked worker (AgentDojo's scoring pool)
shares its parent's pages, and RSS counts them in both, so the sum is an upper bound on the
memory the job really holds. Linux only (elsewhere the memory fields are ``None``).
"""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

PROFILE_FILE = "profile.jsonl"
#: Phases in the order reports show them.
PHASES = (
    "generation", "rewards", "advantages", "diagnostics", "batch_other", "loss_backward", "optimizer_other",
    "logging", "checkpoint",
)
#: The phases that are mrgrpo's own code (its share of a step).
MRGRPO_PHASES = ("advantages", "diagnostics")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def tree_rss_bytes(pid: int | None = None) -> int | None:
    """Resident bytes of process ``pid`` (default: this one) plus all its descendants (found by
    :func:`mrgrpo.train.children.descendants`, the one process-tree walk); ``None`` where ``/proc``
    is not available."""
    from mrgrpo.train.children import descendants

    root = os.getpid() if pid is None else pid
    if not os.path.exists(f"/proc/{root}/statm"):
        return None
    total = 0
    for current in (root, *descendants(root)):
        try:
            with open(f"/proc/{current}/statm") as handle:
                total += int(handle.read().split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
    return total


class MemorySampler:
    """A daemon thread keeping the peak of :func:`tree_rss_bytes` (overall and since :meth:`reset_step`)."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.peak = 0
        self.step_peak = 0
        self.available = tree_rss_bytes() is not None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        value = tree_rss_bytes()
        if value is not None:
            self.peak = max(self.peak, value)
            self.step_peak = max(self.step_peak, value)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> None:
        if self.available and self._thread is None:
            self.sample()
            self._thread = threading.Thread(target=self._run, name="mrgrpo-memory", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.interval + 1)
            self._thread = None

    def reset_step(self) -> None:
        self.sample()
        self.step_peak = tree_rss_bytes() or 0


def _mb(value: int | None) -> float | None:
    return None if value is None else round(value / 2**20, 1)


def trainer_max_rss_mb() -> float | None:
    """The kernel's high-water mark of this process's resident set, in MiB.

    ``VmHWM`` of ``/proc/self/status``: it belongs to the address space, which ``execve`` makes
    anew. ``ru_maxrss`` is the fallback only: Linux carries it over from the parent across fork
    and exec, so a run started by a large process (a test runner holding a model) would report the
    parent's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return None


class StepProfiler(TrainerCallback):
    """Times each step's phases and samples memory (see the module docstring).

    Put it first among the trainer's callbacks (it adds its keys to the logs the later callbacks
    write), then :meth:`attach` it to the constructed trainer.
    """

    def __init__(self, run_dir: Path | None = None, interval: float = 0.5) -> None:
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.memory = MemorySampler(interval)
        self.times: dict[str, float] = defaultdict(float)
        self._step_started: float | None = None
        self._step: int | None = None
        self.records: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ wrapping
    def attach(self, trainer: Any) -> None:
        """Wrap the trainer instance's phase methods (a method the trainer lacks is skipped)."""
        plain = {
            "_generate": "generation",
            "_calculate_rewards": "rewards",
            "advantages_for": "advantages",
            "_log_mrgrpo": "diagnostics",
            "log": "logging",
            "_save_checkpoint": "checkpoint",
        }
        for name, phase in plain.items():
            self._wrap(trainer, name, phase)
        self._wrap(trainer, "_generate_and_score_completions", "_batch")
        self._wrap(trainer, "_prepare_inputs", "_prepare")
        self._wrap(trainer, "training_step", "_training_step")

    def _wrap(self, trainer: Any, name: str, phase: str) -> None:
        method = getattr(trainer, name, None)
        if method is None or getattr(method, "_mrgrpo_profiled", False):
            return
        times = self.times

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                times[phase] += time.perf_counter() - start

        timed._mrgrpo_profiled = True  # type: ignore[attr-defined]
        timed.__wrapped__ = method  # type: ignore[attr-defined]
        setattr(trainer, name, timed)

    # ------------------------------------------------------------------ split
    def split(self, times: dict[str, float] | None = None, step_s: float | None = None) -> dict[str, float]:
        """Seconds per phase (:data:`PHASES`) from the raw timers; ``step_s`` gives ``optimizer_other``."""
        t = dict(self.times if times is None else times)
        inner = t.get("generation", 0.0) + t.get("rewards", 0.0) + t.get("advantages", 0.0) + t.get("diagnostics", 0.0)
        out = {
            "generation": t.get("generation", 0.0),
            "rewards": t.get("rewards", 0.0),
            "advantages": t.get("advantages", 0.0),
            "diagnostics": t.get("diagnostics", 0.0),
            "batch_other": max(0.0, t.get("_batch", 0.0) - inner),
            "loss_backward": max(0.0, t.get("_training_step", 0.0) - t.get("_prepare", 0.0)),
            "logging": t.get("logging", 0.0),
            "checkpoint": t.get("checkpoint", 0.0),
        }
        if step_s is not None:
            counted = sum(v for k, v in out.items() if k not in ("logging", "checkpoint"))
            counted += max(0.0, t.get("_prepare", 0.0) - t.get("_batch", 0.0))  # buffer handling: other
            out["optimizer_other"] = max(0.0, step_s - counted - out["logging"] - out["checkpoint"])
        return {k: round(out[k], 4) for k in PHASES if k in out}

    # ------------------------------------------------------------------ callback
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.memory.start()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._finish_step()
        self.times.clear()
        self.memory.reset_step()
        self._step_started = time.perf_counter()
        self._step = int(state.global_step) + 1

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs is None or self._step_started is None or "train_runtime" in logs:
            return
        elapsed = time.perf_counter() - self._step_started
        for phase, seconds in self.split(step_s=elapsed).items():
            if phase not in ("logging", "checkpoint"):
                logs[f"profile/{phase}_s"] = seconds
        self.memory.sample()
        if self.memory.available:
            logs["profile/peak_rss_mb"] = _mb(self.memory.step_peak)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._finish_step()
        self.memory.stop()

    def _finish_step(self) -> None:
        """Write the last step's complete record (its log and checkpoint are done by now)."""
        if self._step_started is None or self._step is None:
            return
        step_s = time.perf_counter() - self._step_started
        self.memory.sample()
        record: dict[str, Any] = {"step": self._step, "step_s": round(step_s, 4), **self.split(step_s=step_s)}
        record["peak_rss_mb"] = _mb(self.memory.step_peak) if self.memory.available else None
        record["run_peak_rss_mb"] = _mb(self.memory.peak) if self.memory.available else None
        record["trainer_max_rss_mb"] = trainer_max_rss_mb()
        record["load_average_1m"] = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
        self.records.append(record)
        if self.run_dir is not None:
            with (self.run_dir / PROFILE_FILE).open("a") as handle:
                handle.write(json.dumps(record) + "\n")
        self._step_started = None
        self._step = None


def summarize(records: list[dict[str, Any]], skip_first: bool = True) -> dict[str, Any] | None:
    """Mean seconds per phase over ``records`` (``profile.jsonl`` lines; the first step, which carries
    warm-up, left out when there are others), each phase's share of the step, mrgrpo's share, and
    the peaks."""
    if not records:
        return None
    used = records[1:] if skip_first and len(records) > 1 else records
    mean_step = sum(r["step_s"] for r in used) / len(used)
    phases = {p: sum(r.get(p, 0.0) for r in used) / len(used) for p in PHASES}
    peaks = [r["peak_rss_mb"] for r in records if r.get("peak_rss_mb") is not None]
    trainer = [r["trainer_max_rss_mb"] for r in records if r.get("trainer_max_rss_mb") is not None]
    loads = [r["load_average_1m"] for r in records if r.get("load_average_1m") is not None]
    return {
        "steps": len(used),
        "mean_step_s": mean_step,
        "phases_s": phases,
        "shares": {p: (v / mean_step if mean_step > 0 else 0.0) for p, v in phases.items()},
        "mrgrpo_share": sum(phases[p] for p in MRGRPO_PHASES) / mean_step if mean_step > 0 else 0.0,
        "peak_rss_mb": max(peaks) if peaks else None,
        "trainer_max_rss_mb": max(trainer) if trainer else None,
        "load_average_1m": (min(loads), max(loads)) if loads else None,
    }


def profile_lines(summary: dict[str, Any] | None) -> list[str]:
    """Markdown lines of a :func:`summarize` result (the run report's "Step time and memory")."""
    if summary is None:
        return []
    lines = [
        f"## Step time and memory (mean over {summary['steps']} steps, the first left out)",
        "",
        f"- mean step {summary['mean_step_s']:.2f} s; mrgrpo's own code (advantages + diagnostics) "
        f"{100 * summary['mrgrpo_share']:.2f}% of it",
        "- peak RSS of the trainer and its children "
        + (f"{summary['peak_rss_mb']:.0f} MB" if summary["peak_rss_mb"] is not None else "unknown")
        + (f" (trainer process alone {summary['trainer_max_rss_mb']:.0f} MB)" if summary["trainer_max_rss_mb"] else ""),
    ]
    if summary["load_average_1m"] is not None:
        low, high = summary["load_average_1m"]
        lines.append(f"- load average (1 min) during the run {low:.2f}-{high:.2f} on {os.cpu_count()} cores")
    lines += ["", "| phase | seconds | share |", "|---|---|---|"]
    for phase in PHASES:
        lines.append(f"| {phase} | {summary['phases_s'][phase]:.3f} | {100 * summary['shares'][phase]:.1f}% |")
    return lines + [""]
