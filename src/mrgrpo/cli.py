"""The ``mrgrpo`` command line: ``advantages``, ``diagnose``, ``estimators`` (+ ``train``, ``eval``)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer
import yaml
from rich.console import Console
from rich.table import Table

import mrgrpo
from mrgrpo.examples import EXAMPLES

app = typer.Typer(
    help="mrgrpo: multi-reward GRPO advantage estimators, diagnostics and training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output (CI logs, files) gets room for the side-by-side tables.
console = Console(width=None if sys.stdout.isatty() else 140)


def _fail(message: str) -> None:
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code=2)


def _parse_floats(text: str | None, what: str) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        _fail(f"{what} must be comma-separated numbers, got {text!r}")
    return None


def _parse_ranges(text: str | None) -> list[tuple[float, float]] | None:
    """``"0:1,0:1,0:10"`` -> ``[(0, 1), (0, 1), (0, 10)]``."""
    if text is None:
        return None
    try:
        pairs = [item.split(":") for item in text.split(",")]
        return [(float(lo), float(hi)) for lo, hi in pairs]
    except ValueError:
        _fail(f"--ranges must look like 0:1,0:1 (lo:hi per component), got {text!r}")
    return None


def _parse_options(items: list[str]) -> dict[str, Any]:
    options = {}
    for item in items:
        if "=" not in item:
            _fail(f"--option must be key=value, got {item!r}")
        key, value = item.split("=", 1)
        options[key.strip()] = yaml.safe_load(value)
    return options


def _estimator_names(text: str) -> list[str]:
    if text == "all":
        return mrgrpo.available_estimators()
    return [name.strip() for name in text.split(",") if name.strip()]


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


@app.command()
def estimators() -> None:
    """List the registered estimators and their options."""
    table = Table(title="mrgrpo estimators")
    table.add_column("name", style="bold")
    table.add_column("options (defaults)")
    table.add_column("what it does")
    for name in mrgrpo.available_estimators():
        spec = mrgrpo.get_estimator(name)
        options = ", ".join(f"{k}={v!r}" for k, v in spec.options.items()) or "—"
        table.add_row(name, options, spec.summary)
    console.print(table)


@app.command()
def advantages(
    file: Optional[Path] = typer.Argument(None, help="JSONL of rollouts: group_id plus one numeric field per component."),
    example: Optional[str] = typer.Option(None, "--example", help=f"a worked example: {', '.join(EXAMPLES)}"),
    estimator: str = typer.Option("all", "--estimator", "-e", help="estimator name(s), comma-separated, or 'all'"),
    weights: Optional[str] = typer.Option(None, help="component weights, comma-separated"),
    ranges: Optional[str] = typer.Option(None, help="component ranges lo:hi, comma-separated (sa_mrpo)"),
    option: list[str] = typer.Option([], "--option", "-o", help="estimator option key=value (repeatable)"),
    group_field: str = typer.Option("group_id", help="field holding the group id"),
    components: Optional[str] = typer.Option(None, help="component fields, comma-separated (default: all numeric)"),
    out: Optional[Path] = typer.Option(None, help="write the rollouts with advantages to this JSONL"),
) -> None:
    """Compute advantages for a worked example or a JSONL batch, side by side, as a table."""
    if example is not None:
        _show_example(example)
        return
    if file is None:
        _fail("give a JSONL file of rollouts or --example NAME")
    from mrgrpo.rollouts import read_reward_jsonl

    try:
        batch = read_reward_jsonl(file, group_field, components.split(",") if components else None)
        w = _parse_floats(weights, "--weights")
        reward_ranges = _parse_ranges(ranges)
        options = _parse_options(option)
        columns = {}
        for name in _estimator_names(estimator):
            spec = mrgrpo.get_estimator(name)
            chosen = {k: v for k, v in options.items() if k in spec.options}
            if "reward_ranges" in spec.options:
                if reward_ranges is None:
                    if estimator == "all":
                        continue
                    _fail(f"{name} needs --ranges lo:hi per component")
                chosen["reward_ranges"] = reward_ranges
            columns[name] = mrgrpo.compute_advantages(batch.rewards, batch.group_ids, name, w, **chosen).tolist()
        unused = set(options) - {k for n in columns for k in mrgrpo.get_estimator(n).options}
        if unused:
            _fail(f"option(s) {sorted(unused)} belong to none of the estimators {list(columns)}")
    except ValueError as error:
        _fail(str(error))
    table = Table(title=f"advantages: {file}")
    table.add_column("group")
    for name in batch.names:
        table.add_column(name, justify="right")
    for name in columns:
        table.add_column(name, justify="right", style="bold")
    for i, group in enumerate(batch.group_ids):
        row = [str(group)] + [_fmt(float(v)) for v in batch.rewards[i].tolist()]
        table.add_row(*row, *[_fmt(columns[name][i]) for name in columns])
    console.print(table)
    if out is not None:
        with out.open("w") as handle:
            for i, record in enumerate(batch.records):
                handle.write(json.dumps({**record, **{f"advantage_{n}": columns[n][i] for n in columns}}) + "\n")
        console.print(f"wrote {out}")


def _show_example(name: str) -> None:
    if name not in EXAMPLES:
        _fail(f"unknown example {name!r}; available: {', '.join(EXAMPLES)}")
    ex = EXAMPLES[name]
    group = [0] * len(ex.rewards)
    table = Table(title=ex.title, caption=ex.source)
    table.add_column("rollout", justify="right")
    for reward_name in ex.names:
        table.add_column(reward_name, justify="right")
    results = {}
    for label, (estimator, options) in ex.columns.items():
        results[label] = mrgrpo.compute_advantages(_as_float64(ex.rewards), group, estimator, **options).tolist()
        table.add_column(label, justify="right", style="bold")
    for label in ex.paper_values:
        table.add_column(f"paper {label}", justify="right", style="dim")
    for i, row in enumerate(ex.rewards):
        cells = [str(i + 1)] + [f"{v:.2f}" for v in row] + [_fmt(results[label][i]) for label in ex.columns]
        cells += [_fmt(ex.paper_values[label][i], 2 if name == "sa-mrpo-sign-flip" else 4) for label in ex.paper_values]
        table.add_row(*cells)
    console.print(table)
    for label, (estimator, options) in ex.columns.items():
        shown = {k: v for k, v in options.items() if k != "reward_ranges"}
        console.print(f"  {label}: {estimator} " + " ".join(f"{k}={v}" for k, v in shown.items()))
    report = mrgrpo.diagnose(_as_float64(ex.rewards), group, reward_ranges=ex.reward_ranges, names=list(ex.names))
    scale = report["scale"]
    console.print(
        f"GRPO scale 1/(std+eps) = {_fmt(scale['grpo'])}, CorrGRPO scale 1/sqrt(Σρ+eps) = {_fmt(scale['corr_grpo'])}; "
        "share of Var(total): " + ", ".join(f"{k} {_fmt(v, 3)}" for k, v in report["variance_share"].items())
    )
    console.print(ex.note)


def _as_float64(rows: Any) -> Any:
    import torch

    return torch.tensor(rows, dtype=torch.float64)


@app.command()
def diagnose(
    file: Path = typer.Argument(..., help="JSONL of rollouts: group_id plus one numeric field per component."),
    weights: Optional[str] = typer.Option(None, help="component weights, comma-separated"),
    ranges: Optional[str] = typer.Option(None, help="component ranges lo:hi, comma-separated"),
    group_field: str = typer.Option("group_id", help="field holding the group id"),
    components: Optional[str] = typer.Option(None, help="component fields, comma-separated (default: all numeric)"),
    as_json: bool = typer.Option(False, "--json", help="print the raw JSON instead of tables"),
) -> None:
    """Diagnostics of a reward batch: correlations, variance shares, scales, saturation, collapse."""
    from mrgrpo.rollouts import read_reward_jsonl

    try:
        batch = read_reward_jsonl(file, group_field, components.split(",") if components else None)
        report = mrgrpo.diagnose(
            batch.rewards, batch.group_ids, _parse_floats(weights, "--weights"), _parse_ranges(ranges), batch.names
        )
    except ValueError as error:
        _fail(str(error))
    if as_json:
        print(json.dumps(report, indent=2))
        return
    print_report(report)


def print_report(report: dict[str, Any]) -> None:
    """Print a :func:`mrgrpo.diagnose` report as rich tables."""
    names = report["names"]
    console.print(
        f"[bold]{report['num_rollouts']}[/] rollouts in [bold]{report['num_groups']}[/] groups; "
        f"zero-variance groups: {_fmt(report.get('zero_variance_fraction'), 3)}"
    )
    table = Table(title="components")
    for column in ("component", "weight", "mean", "std", "scored", "saturation", "share of Var(T)"):
        table.add_column(column, justify="right")
    for i, name in enumerate(names):
        stats = report["components"][name]
        table.add_row(
            name, _fmt(report["weights"][i], 2), _fmt(stats["mean"]), _fmt(stats["std"]), _fmt(stats["scored"], 2),
            _fmt(stats["saturation"], 3), _fmt(report.get("variance_share", {}).get(name), 3),
        )
    console.print(table)
    if "correlation" in report:
        corr = Table(title="mean in-group correlation")
        corr.add_column("")
        for name in names:
            corr.add_column(name, justify="right")
        for name, row in zip(names, report["correlation"]):
            corr.add_row(name, *[_fmt(v, 3) for v in row])
        console.print(corr)
        scale = report["scale"]
        console.print(f"median scale: GRPO {_fmt(scale['grpo'])}, CorrGRPO {_fmt(scale['corr_grpo'])}")
        collapse = report["advantage_collapse"]
        console.print(
            f"distinct reward profiles per group: {collapse['distinct_reward_profiles']:.2f}; distinct advantages: "
            + ", ".join(f"{k} {v:.2f}" for k, v in collapse["distinct_advantages"].items())
        )


def _register_subcommands() -> None:
    # Heavier jobs (training, evaluation) live with their layers and add their own commands.
    for module in ("mrgrpo.train.commands", "mrgrpo.experiments.commands"):
        try:
            importlib.import_module(module).register(app)
        except ModuleNotFoundError as error:
            if error.name != module:
                raise


_register_subcommands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
