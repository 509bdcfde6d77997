"""``report.md`` and its PNG plots, from a run directory's ``metrics.jsonl`` and ``diagnostics.jsonl``.

Plots: per-component reward curves (raw and moving average), the weighted total, the advantage
spread (std, mean |A|, min–max band), and the in-group reward correlation matrix at the start
and at the end of the run (mean over the first / last few steps).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mrgrpo.plotting import saved_figure
from mrgrpo.records import mean, moving_average
from mrgrpo.records import read_jsonl as read_records

WINDOW = 5  # moving-average window and the number of steps averaged for "start" and "end"
PURPOSE = "the run report's plots"  # what the missing-extra message names


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """A run's log (absent: none yet; a last line cut off by a kill: left out; any other bad line: an error)."""
    return read_records(path, missing_ok=True, truncated_tail_ok=True)


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    steps, values = [], []
    for record in records:
        value = record.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            steps.append(int(record["step"]))
            values.append(float(value))
    return steps, values


def edge_window(count: int) -> int:
    """Steps averaged for "start" and "end": up to WINDOW, at most a third of the run."""
    return max(1, min(WINDOW, count // 3))


def _mean_matrix(records: list[dict[str, Any]]) -> list[list[float | None]] | None:
    matrices = [r.get("correlation") for r in records if r.get("correlation")]
    if not matrices:
        return None
    k = len(matrices[0])
    out: list[list[float | None]] = []
    for i in range(k):
        row: list[float | None] = []
        for j in range(k):
            vals = [m[i][j] for m in matrices if m[i][j] is not None]
            row.append(sum(vals) / len(vals) if vals else None)
        out.append(row)
    return out


def _plot_rewards(path: Path, metrics: list[dict[str, Any]], names: list[str]) -> bool:
    drawn = False
    with saved_figure(path, PURPOSE, dpi=100, figsize=(7, 4)) as (_, ax):
        for name in names:
            steps, values = _series(metrics, f"mrgrpo/rewards/{name}")
            if steps:
                (line,) = ax.plot(steps, values, alpha=0.3)
                ax.plot(steps, moving_average(values, WINDOW), color=line.get_color(), label=name)
                drawn = True
        ax.set(xlabel="step", ylabel="mean reward", title=f"reward components (moving average over {WINDOW} steps)")
        if drawn:
            ax.legend()
    return drawn


def _plot_total(path: Path, metrics: list[dict[str, Any]]) -> bool:
    steps, values = _series(metrics, "mrgrpo/reward_total")
    with saved_figure(path, PURPOSE, dpi=100, figsize=(7, 4)) as (_, ax):
        if steps:
            ax.plot(steps, values, alpha=0.3, color="C0")
            ax.plot(steps, moving_average(values, WINDOW), color="C0", label="weighted total")
            ax.legend()
        ax.set(xlabel="step", ylabel="weighted total reward", title="total reward")
    return bool(steps)


def _plot_advantages(path: Path, metrics: list[dict[str, Any]]) -> bool:
    steps, std = _series(metrics, "mrgrpo/advantages/std")
    with saved_figure(path, PURPOSE, dpi=100, figsize=(7, 4)) as (_, ax):
        if steps:
            ax.plot(steps, std, label="std")
            s2, abs_mean = _series(metrics, "mrgrpo/advantages/abs_mean")
            ax.plot(s2, abs_mean, label="mean |A|")
            s3, lo = _series(metrics, "mrgrpo/advantages/min")
            s4, hi = _series(metrics, "mrgrpo/advantages/max")
            if s3 == s4 and s3:
                ax.fill_between(s3, lo, hi, alpha=0.15, label="min–max")
            ax.legend()
        ax.set(xlabel="step", ylabel="advantage", title="advantage spread")
    return bool(steps)


def _plot_correlation(path: Path, start: Any, end: Any, names: list[str]) -> bool:
    if start is None and end is None:
        return False
    with saved_figure(path, PURPOSE, dpi=100, tight=False, ncols=2, figsize=(9.5, 4.2)) as (fig, axes):
        image = None
        for ax, matrix, title in ((axes[0], start, "start"), (axes[1], end, "end")):
            ax.set_title(f"in-group correlation ({title})")
            ax.set_xticks(range(len(names)), names, rotation=30)
            ax.set_yticks(range(len(names)), names if ax is axes[0] else [""] * len(names))
            if matrix is None:
                continue
            data = [[float("nan") if v is None else v for v in row] for row in matrix]
            image = ax.imshow(data, vmin=-1, vmax=1, cmap="coolwarm")
            for i, row in enumerate(data):
                for j, value in enumerate(row):
                    ax.text(j, i, "–" if math.isnan(value) else f"{value:.2f}", ha="center", va="center", fontsize=8)
        if image is not None:
            fig.colorbar(image, ax=axes, shrink=0.8)
    return True


def _plot_step_time(path: Path, records: list[dict[str, Any]]) -> bool:
    """Stacked bars: each step's seconds per phase (``profile.jsonl``)."""
    from mrgrpo.train.profiling import PHASES

    if not records:
        return False
    steps = [int(r["step"]) for r in records]
    with saved_figure(path, PURPOSE, dpi=100, figsize=(7, 4)) as (_, ax):
        bottom = [0.0] * len(records)
        for phase in PHASES:
            values = [float(r.get(phase) or 0.0) for r in records]
            if any(values):
                ax.bar(steps, values, bottom=bottom, label=phase)
                bottom = [b + v for b, v in zip(bottom, values)]
        ax.set(xlabel="step", ylabel="seconds", title="where each step's time goes")
        ax.legend(fontsize=7)
    return True


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def model_card(run_dir: Path, config: Any, steps: int | None = None, checkpoint: Path | None = None) -> str:
    """The run directory's ``README.md``: the base model (preset name or path, and what it is), the
    estimator with its options, the task and reward suite, and how to load a checkpoint."""
    from mrgrpo.train.presets import model_origin

    hub_id, origin = model_origin(config.model)
    weights = getattr(config.rewards, "weights", None)
    tags = ["mrgrpo", "grpo", "trl", config.estimator]
    front = ["---", "library_name: transformers", *([f"base_model: {hub_id}"] if hub_id else []),
             "tags:", *[f"- {t}" for t in tags], "---", ""]
    options = f" with options `{config.estimator_options}`" if config.estimator_options else ""
    where = f"{run_dir.name}/{checkpoint.name}" if checkpoint is not None else f"{run_dir.name}/checkpoint-N"
    body = [
        f"# {run_dir.name}",
        "",
        f"A multi-reward GRPO run of mrgrpo: base model `{config.model}` ({origin}), advantages from the "
        f"`{config.estimator}` estimator{options}.",
        "",
        f"- task: `{config.task.name}`" + (f" {dict(config.task.options)}" if config.task.options else ""),
        f"- reward suite: `{config.rewards.suite}`" + (f", weights {dict(weights)}" if weights else " (its default weights)"),
        *([f"- steps trained: {steps}"] if steps is not None else []),
        "- resolved settings: `config.yaml` (mrgrpo) and `grpo_config.json` (TRL); curves: `report.md`",
        "",
        "Load a checkpoint:",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM",
        "from mrgrpo.train.presets import load_tokenizer  # also reads the tiny preset's tokenizer right",
        "",
        f'model = AutoModelForCausalLM.from_pretrained("{where}")',
        f'tokenizer = load_tokenizer("{where}")',
        "```",
        "",
        f"Evaluate it: `mrgrpo eval --model {where} --task {config.task.name}`.",
        "",
    ]
    return "\n".join(front + body)


def write_model_card(run_dir: Path, config: Any, steps: int | None = None, checkpoint: Path | None = None) -> Path:
    """Write :func:`model_card` to ``run_dir/README.md`` (over TRL's, which cannot name a local base model)."""
    path = Path(run_dir) / "README.md"
    path.write_text(model_card(Path(run_dir), config, steps, checkpoint))
    return path


def write_report(
    run_dir: Path,
    config: Any,
    steps: int,
    stop_reason: str,
    seconds: float,
    checkpoint: Path | None,
) -> Path:
    """Write ``report.md`` and the PNGs into ``run_dir``; returns the report's path."""
    run_dir = Path(run_dir)
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    diagnostics = read_jsonl(run_dir / "diagnostics.jsonl")
    names = next((d["names"] for d in diagnostics if d.get("names")), None)
    if names is None:
        prefix = "mrgrpo/rewards/"
        names = sorted({k[len(prefix) :] for r in metrics for k in r if k.startswith(prefix)})
    plots = {
        "rewards.png": _plot_rewards(run_dir / "rewards.png", metrics, names),
        "reward_total.png": _plot_total(run_dir / "reward_total.png", metrics),
        "advantages.png": _plot_advantages(run_dir / "advantages.png", metrics),
        "correlation.png": _plot_correlation(
            run_dir / "correlation.png",
            _mean_matrix(diagnostics[: edge_window(len(diagnostics))]),
            _mean_matrix(diagnostics[-edge_window(len(diagnostics)) :]),
            names,
        ),
    }
    window = edge_window(len(metrics))
    from mrgrpo.train.profiling import PROFILE_FILE, profile_lines, summarize

    profile_records = read_jsonl(run_dir / PROFILE_FILE)
    profile = summarize(profile_records)
    plots["step_time.png"] = _plot_step_time(run_dir / "step_time.png", profile_records)
    lines = [
        f"# mrgrpo run: {config.estimator} on {config.task.name}",
        "",
        f"- model: `{config.model}`; reward suite `{config.rewards.suite}`; estimator `{config.estimator}`"
        + (f" {config.estimator_options}" if config.estimator_options else ""),
        f"- steps: {steps} (stopped: {stop_reason}); job time {seconds:.0f} s",
        f"- last checkpoint: `{checkpoint.name if checkpoint else 'none'}`",
        "",
        f"## Rewards (mean of the first / last {window} logged steps)",
        "",
        "| component | start | end | change |",
        "|---|---|---|---|",
    ]
    for key, label in [(f"mrgrpo/rewards/{n}", n) for n in names] + [("mrgrpo/reward_total", "**total**")]:
        _, values = _series(metrics, key)
        start, end = mean(values[:window], empty=None), mean(values[-window:], empty=None)
        change = None if start is None or end is None else end - start
        lines.append(f"| {label} | {_fmt(start)} | {_fmt(end)} | {_fmt(change)} |")
    lines += ["", *profile_lines(profile)]
    lines += ["## Plots", ""]
    for file, drawn in plots.items():
        if drawn:
            lines.append(f"![{file[:-4]}]({file})")
    lines += [
        "",
        "Files: `config.yaml` (resolved config), `metrics.jsonl` (one line per step), "
        "`diagnostics.jsonl` (mrgrpo.diagnose per step), `profile.jsonl` (each step's time split and peak "
        "memory), `tensorboard/`, `checkpoint-N/`.",
        "",
    ]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines))
    write_model_card(run_dir, config, steps, checkpoint)
    return path
