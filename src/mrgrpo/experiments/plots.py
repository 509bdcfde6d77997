"""Figures of ``compare`` and ``analyze`` (matplotlib, Agg backend; ``None`` when there is nothing to draw)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from mrgrpo.errors import ConfigError
from mrgrpo.experiments.stats import mean_ci
from mrgrpo.plotting import pyplot, saved_figure
from mrgrpo.records import moving_average

PURPOSE = "experiment plots"  # what the missing-extra message names


def plot_curves(path: Path, records: list[dict[str, Any]], estimators: list[str],
                components: list[str] | None = None, title: str | None = None) -> Path | None:
    """One panel per component (normalized by its range; ``components``: which, in order; default
    all): mean over seeds of the moving-average training curve, with a 95% band across seeds.
    ``title`` replaces the default heading (which says the window and the band)."""
    if not records:
        return None
    names, ranges = records[0]["names"], records[0]["ranges"]
    unknown = sorted(set(components or []) - set(names))
    if unknown:
        raise ConfigError(f"components: unknown {unknown}; the runs have {names}")
    panels = [(name, rng) for name, rng in zip(names, ranges) if name in (components or names)]
    panels.sort(key=lambda panel: (components or names).index(panel[0]))
    steps = max(len(r["curves"][names[0]]) for r in records)
    window = max(1, steps // 10)
    with saved_figure(path, PURPOSE, dpi=110, ncols=len(panels), figsize=(3.6 * len(panels), 3.2), squeeze=False) as (fig, axes):
        for ax, (name, (lo, hi)) in zip(axes[0], panels):
            span = hi - lo if hi > lo else 1.0
            for est in estimators:
                runs = [moving_average([None if v is None else (v - lo) / span for v in r["curves"][name]], window)
                        for r in records if r["estimator"] == est]
                xs, means, lows, highs = [], [], [], []
                for i in range(steps):
                    mean, half, n = mean_ci([run[i] for run in runs if i < len(run)])
                    if n:
                        half = 0.0 if not math.isfinite(half) else half
                        xs.append(i + 1), means.append(mean), lows.append(mean - half), highs.append(mean + half)
                line, = ax.plot(xs, means, label=est, lw=1.5)
                ax.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.15)
            ax.set_title(f"{name} (÷ range)")
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.suptitle(title or f"training curves: moving average ({window} steps), mean ± 95% CI over seeds", fontsize=10)
    return path


def plot_pareto(path: Path, summary: dict[str, Any], records: list[dict[str, Any]], estimators: list[str]) -> Path | None:
    """Objective vs objective of the final points (``eval`` view, else ``end``): seeds as small
    dots, the mean with 95% error bars as a large marker, one panel per pair of components."""
    view = "eval" if "eval" in summary["views"] else "end"
    names = summary["names"]
    pairs = list(itertools.combinations(names, 2))
    if not pairs:
        return None
    cols = min(3, len(pairs))
    rows = math.ceil(len(pairs) / cols)
    with saved_figure(path, PURPOSE, dpi=110, nrows=rows, ncols=cols, figsize=(3.8 * cols, 3.4 * rows),
                      squeeze=False) as (fig, axes):
        colors = pyplot(PURPOSE).rcParams["axes.prop_cycle"].by_key()["color"]
        for ax, (a, b) in zip(axes.flat, pairs):
            for k, est in enumerate(estimators):
                color = colors[k % len(colors)]
                pts = [(r["objectives"][view].get(a), r["objectives"][view].get(b)) for r in records if r["estimator"] == est]
                pts = [(x, y) for x, y in pts if x is not None and y is not None]
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10, alpha=0.4, color=color)
                cell = summary["table"][view][est]
                ax.errorbar(cell[a]["mean"], cell[b]["mean"], xerr=_finite(cell[a]["ci"]), yerr=_finite(cell[b]["ci"]),
                            fmt="o", ms=7, color=color, label=est, capsize=3)
            ax.set_xlabel(a)
            ax.set_ylabel(b)
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(pairs):]:
            ax.axis("off")
        axes[0][0].legend(fontsize=8)
        fig.suptitle(f"final points ({view}, ÷ range): seeds (dots), mean ± 95% CI", fontsize=10)
    return path


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def plot_series(path: Path, steps: list[int], series: dict[str, dict[str, list[float]]], title: str) -> Path | None:
    """Panels of named series over steps (``{panel: {label: values}}``), for ``analyze``."""
    if not steps or not series:
        return None
    cols = min(3, len(series))
    rows = math.ceil(len(series) / cols)
    with saved_figure(path, PURPOSE, dpi=110, nrows=rows, ncols=cols, figsize=(4.2 * cols, 3.0 * rows),
                      squeeze=False) as (fig, axes):
        for ax in list(axes.flat)[len(series):]:
            ax.axis("off")
        for ax, (panel, lines) in zip(axes.flat, series.items()):
            for label, values in lines.items():
                ax.plot(steps, values, label=label, lw=1.2)
            ax.set_title(panel, fontsize=9)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(title, fontsize=10)
    return path
