"""``mrgrpo tasks``: the registered tasks with their columns, default suite, rollout, metric and options."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from mrgrpo.command_errors import command


def tasks_command(
    name: Annotated[Optional[str], typer.Argument(help="show only this task")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """List the tasks `mrgrpo train` and `mrgrpo eval --task` accept (any reasoning-gym dataset name is a
    shorthand for the `math` task)."""
    from rich.console import Console
    from rich.table import Table

    from mrgrpo.tasks.registry import describe_all, get_task

    rows = [get_task(name).describe()] if name else describe_all()
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    console = Console(width=160)
    table = Table(title="mrgrpo tasks")
    for column in ("task", "domain", "suite", "rollout", "eval metric", "ground truth", "prompt rule", "columns"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["name"] + ("" if row["trainable"] else " (eval only)"), row["domain"], row["suite"] or "–",
            row["rollout"], row["eval_metric"], row["ground_truth"] or "–", row["prompt_rule"], ", ".join(row["columns"]),
        )
    console.print(table)
    for row in rows:
        console.print(f"\n[bold]{row['name']}[/]: {row['description']}\n  split: {row['split']}")
        for option, spec in row["options"].items():
            console.print(f"  {option} = {spec['default']!r}: {spec['help']}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``tasks`` to ``app``."""
    app.command("tasks")(command(tasks_command))
