"""The ``mrgrpo compare``, ``mrgrpo figure`` and ``mrgrpo analyze`` commands; :func:`register` adds them to the CLI app."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mrgrpo.command_errors import command
from mrgrpo.errors import ConfigError, UserError
from mrgrpo.extras import require


def _fail(error: BaseException) -> None:
    """A plain ``ValueError`` of the experiment code as a :class:`ConfigError`, reported like every
    user error (:mod:`mrgrpo.command_errors`: one line, exit status 2)."""
    raise error if isinstance(error, UserError) else ConfigError(str(error)) from None


def compare_command(
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="train config YAML (+ optional `experiment` section)")] = None,
    estimators: Annotated[str, typer.Option("--estimators", "-e", help="comma-separated names; options in parentheses, ';'-separated: corr_grpo(shrinkage=auto;pooling=batch)")] = "grpo,gdpo,sa_mrpo,corr_grpo",
    seeds: Annotated[int, typer.Option("--seeds", "-n", min=1, help="number of seeds (first..first+N-1)")] = 5,
    first_seed: Annotated[int, typer.Option("--first-seed", min=0, help="the first seed (pilots on seeds kept apart from a final table's, e.g. 100)")] = 0,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="output directory (default runs/compare-<config name>)")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="runs in parallel (one CPU thread each when > 1)")] = 1,
    set_: Annotated[Optional[list[str]], typer.Option("--set", "-s", help="override a config key (repeatable)")] = None,
    start: Annotated[bool, typer.Option("--start", help="also evaluate the policy before RL, on the same seeds and evaluation settings (OUT/start.json: eval minus start per seed is what RL added)")] = False,
) -> None:
    """Train every estimator × seed (paired) and write compare.md with 95% intervals, curves and Pareto plots.
    Rerun the same command to resume: finished runs are not rerun."""
    require("trl", "mrgrpo compare")
    require("plots", "mrgrpo compare (curves and Pareto plots)")
    from mrgrpo.experiments.compare import parse_estimators, run_compare

    out = out or Path("runs") / f"compare-{config.stem if config else 'default'}"
    try:
        names = parse_estimators(estimators)
        seed_list = list(range(first_seed, first_seed + seeds))
        before_runs = None
        if start and not (out / "start.json").is_file():
            from mrgrpo.experiments.compare import evaluate_start

            def before_runs() -> None:  # after the warm starts, before the runs: compare.md reads start.json
                evaluate_start(config, out, seed_list, overrides=list(set_ or []))

        run_compare(config, names, seed_list, out, jobs=jobs, overrides=list(set_ or []), log=typer.echo, before_runs=before_runs)
    except (UserError, ValueError) as error:
        _fail(error)


def analyze_command(
    source: Annotated[Path, typer.Argument(help="rollouts.jsonl, or a run directory holding one")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="report directory (default: <run dir>/analysis)")] = None,
    estimators: Annotated[str, typer.Option("--estimators", "-e", help="comma-separated names, or 'all'")] = "all",
    weights: Annotated[Optional[str], typer.Option(help="component weights, comma-separated (default: the run's)")] = None,
    ranges: Annotated[Optional[str], typer.Option(help="component ranges lo:hi, comma-separated (default: the run's)")] = None,
) -> None:
    """Replay logged reward batches through every estimator: sign agreement, rank correlation,
    effective component weights, diagnostics over time."""
    from mrgrpo.experiments.analyze import run_analyze

    try:
        report = run_analyze(source, out=out, estimators=estimators, weights=weights, ranges=ranges)
    except (UserError, ValueError) as error:
        _fail(error)
    import json

    for name, why in json.loads((report.parent / "analysis.json").read_text()).get("refused", {}).items():
        typer.echo(f"skipped {name}: {why}", err=True)
    typer.echo(f"wrote {report}")


def figure_command(
    source: Annotated[Path, typer.Argument(help="the --out directory of a finished `mrgrpo compare`")],
    out: Annotated[Path, typer.Option("--out", "-o", help="PNG to write")],
    components: Annotated[Optional[str], typer.Option("--components", "-k", help="comma-separated component names, in panel order (default: all)")] = None,
) -> None:
    """Redraw a comparison's training curves (mean over seeds, 95% band) from its committed
    result.json files: the README's headline figure is made this way."""
    require("plots", "mrgrpo figure")
    from mrgrpo.experiments.compare import draw_figure

    try:
        path = draw_figure(source, out, [c.strip() for c in components.split(",")] if components else None)
    except (UserError, ValueError, FileNotFoundError) as error:
        _fail(error)
    typer.echo(f"wrote {path}")


def register(app: typer.Typer) -> None:
    """Add ``compare``, ``figure`` and ``analyze`` to ``app``."""
    app.command("compare")(command(compare_command))
    app.command("figure")(command(figure_command))
    app.command("analyze")(command(analyze_command))
