"""The ``mrgrpo`` command line: ``advantages``, ``diagnose``, ``estimators`` (+ ``train``, ``eval``, ...).

Errors: a user's mistake (any :class:`mrgrpo.errors.UserError`, raised by any layer) is printed
as one line, ``error: <problem and fix>``, on stderr with exit status 2 and no traceback;
``mrgrpo --debug ...`` (or ``MRGRPO_DEBUG=1``) shows the traceback instead. Ctrl-C exits with
status 130.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

import mrgrpo
from mrgrpo.command_errors import reporting_user_errors
from mrgrpo.errors import InputError, UnknownNameError, UserError
from mrgrpo.examples import EXAMPLES
from mrgrpo.keyvalue import parse_options


class _App(TyperGroup):
    """The top-level group: every command runs inside :func:`mrgrpo.command_errors.reporting_user_errors`
    (a user error is one line and exit status 2; Ctrl-C exit status 130)."""

    def invoke(self, ctx: Any) -> Any:
        with reporting_user_errors(debug=bool(ctx.params.get("debug"))):
            return super().invoke(ctx)


app = typer.Typer(
    cls=_App,
    help="mrgrpo: multi-reward GRPO advantage estimators, diagnostics and training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output (CI logs, files) gets room for the side-by-side tables.
console = Console(width=None if sys.stdout.isatty() else 140)
notes = Console(stderr=True, width=None if sys.stderr.isatty() else 140, highlight=False)


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="show the traceback of an error instead of one line"),
) -> None:
    """mrgrpo: multi-reward GRPO advantage estimators, diagnostics and training."""


def _fail(message: str) -> None:
    raise UserError(message)


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


#: Short flags mean one thing in every command: ``-c`` ``--config``, ``-e`` the estimator(s), ``-s``
#: ``--set``, ``-o`` ``--out``, ``-m`` ``--model``, ``-t`` ``--task``, ``-j`` ``--jobs``, ``-k``
#: ``--components``, ``-n`` the command's count. ``--option`` has no short form: ``-o`` meant it here before it meant ``--out``.
_OPTION_NOT_O = "estimator options are --option key=value (-o is short for --out)"


def _looks_like_an_option(text: str) -> bool:
    """``eps=1e-5``: a bare ``key=value``, what ``-o`` used to take here (a path has no ``=`` before a ``/``)."""
    key, sep, _ = text.partition("=")
    return bool(sep) and key.isidentifier()


def _out_path(value: Optional[str]) -> Optional[Path]:
    """``--out``/``-o`` of ``advantages``: refuses ``-o key=value``, the old spelling of ``--option``."""
    if value is None:
        return None
    if _looks_like_an_option(value):
        raise UserError(
            f"--out {value!r} looks like an estimator option: {_OPTION_NOT_O}; "
            f"to write a file of that name, give its directory (--out {Path.cwd() / value})"
        )
    return Path(value)


def _refuse_short_o(value: list[str]) -> list[str]:
    """``diagnose -o ...``: refused in one line (``-o`` was ``--option`` here; it writes no file)."""
    if value:
        raise UserError(f"diagnose has no -o (it writes no file): {_OPTION_NOT_O}, e.g. --option {value[0]}")
    return value


def _parse_options(items: list[str]) -> dict[str, Any]:
    """``--option key=value`` items, read by :func:`mrgrpo.keyvalue.parse_options` (``eps=1e-5`` is a float)."""
    return parse_options(items, what="--option", example="eps=1e-5")


def _cli_host() -> Any:
    """The command line as the estimators' host: no trainer settings, its own words in messages.

    Built on use: the binding module imports the estimators, hence torch, which ``mrgrpo --help``
    and the commands that compute nothing do not need.
    """
    from mrgrpo.estimators.binding import Host

    return Host(weights_from="--weights", ranges_fix="give --ranges lo:hi per component")


def _estimator_names(text: str) -> list[str]:
    if text.strip() == "all":
        return mrgrpo.available_estimators()
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        _fail(f"--estimator: no estimator named in {text!r}; give names separated by commas, or 'all'")
    for name in names:
        mrgrpo.get_estimator(name)  # an unknown name: UnknownNameError, listing the registered ones
    return list(dict.fromkeys(names))


def _read_batch(file: Path, group_field: str, components: str | None, allow_missing: bool) -> Any:
    from mrgrpo.rollouts import read_reward_jsonl

    names = components.split(",") if components is not None else None
    batch = read_reward_jsonl(file, group_field, names, allow_missing=allow_missing)
    notes.print(escape(f"{file}: {len(batch.group_ids)} rollouts; {batch.schema}"), soft_wrap=True)
    return batch


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


@app.command()
def estimators(
    as_json: bool = typer.Option(False, "--json", help="print every estimator's options, traits and example as JSON"),
) -> None:
    """List the registered estimators: options with defaults, traits, and an example."""
    from mrgrpo.estimators.registry import REQUIRED

    def default(value: Any) -> Any:
        return "<required>" if value is REQUIRED else value

    rows = []
    for name in mrgrpo.available_estimators():
        spec = mrgrpo.get_estimator(name)
        rows.append({
            "name": name,
            "summary": spec.summary,
            "options": {k: default(v) for k, v in spec.options.items()},
            "traits": spec.traits(),
            "example_options": spec.example_options,
        })
    if as_json:
        print(json.dumps(rows, indent=2, default=repr))
        return
    table = Table(title="mrgrpo estimators")
    table.add_column("name", style="bold")
    table.add_column("options (defaults)")
    table.add_column("traits")
    table.add_column("what it does")
    for row in rows:
        options = ", ".join(f"{k}={v if v == '<required>' else repr(v)}" for k, v in row["options"].items()) or "—"
        if row["example_options"]:
            options += f"; e.g. {', '.join(f'{k}={v!r}' for k, v in row['example_options'].items())}"
        t = row["traits"]
        traits = [t["combine"]]
        traits += [label for key, label in (("batch_norm", "batch norm"), ("needs_ranges", "needs ranges"),
                                            ("stateful", "stateful"), ("unscaled", "unscaled")) if t[key]]
        if t["roles"]:
            traits.append(f"roles: {', '.join(t['roles'])}")
        if not t["uses_weights"]:
            traits.append("no weights")
        if t["scale_option"]:
            traits.append(f"scale_rewards -> {t['scale_option']}")
        if t["trl_default"]:
            traits.append(f"TRL's {t['trl_default']}")
        table.add_row(escape(row["name"]), escape(options), escape("; ".join(traits)), escape(row["summary"]))
    console.print(table)


_FILE_HELP = (
    "JSONL of rollouts, one object per line: the group field plus one value per reward component "
    "(number, true/false = 1/0, null = not scored)."
)
_COMPONENTS_HELP = (
    "component fields, comma-separated (default: the union of numeric/boolean fields over all lines, "
    "minus metadata such as step; the schema read is printed)"
)
_ALLOW_MISSING_HELP = "read a component missing from a line as not scored (NaN) instead of an error"


@app.command()
def advantages(
    file: Optional[Path] = typer.Argument(None, help=_FILE_HELP),
    example: Optional[str] = typer.Option(
        None, "--example",
        help=f"a worked example: {', '.join(EXAMPLES)} (the paper's columns; -e adds estimators run on its rewards)",
    ),
    estimator: Optional[str] = typer.Option(
        None, "--estimator", "-e",
        help="estimator name(s), comma-separated, or 'all' (default: all; with --example, only the paper's columns)",
    ),
    weights: Optional[str] = typer.Option(None, help="component weights, comma-separated"),
    ranges: Optional[str] = typer.Option(None, help="component ranges lo:hi, comma-separated (sa_mrpo)"),
    option: list[str] = typer.Option([], "--option", help="estimator option key=value, e.g. eps=1e-5 (repeatable)"),
    group_field: str = typer.Option("group_id", help="field holding the group id"),
    components: Optional[str] = typer.Option(None, help=_COMPONENTS_HELP),
    allow_missing: bool = typer.Option(False, "--allow-missing", help=_ALLOW_MISSING_HELP),
    out_text: Optional[str] = typer.Option(
        None, "--out", "-o", metavar="PATH", help="write the rollouts with advantages to this JSONL",
    ),
) -> None:
    """Compute advantages for a worked example or a JSONL batch, side by side, as a table."""
    out = _out_path(out_text)
    w = _parse_floats(weights, "--weights")
    reward_ranges = _parse_ranges(ranges)
    options = _parse_options(option)
    if example is not None:
        file_only = [flag for flag, given in (
            ("FILE", file is not None), ("--out", out is not None), ("--components", components is not None),
            ("--group-field", group_field != "group_id"), ("--allow-missing", allow_missing),
        ) if given]
        if file_only:
            _fail(
                f"--example runs on the paper's rewards, so {', '.join(file_only)} (for a JSONL batch) mean(s) nothing "
                f"there: give either a FILE or --example"
            )
        if estimator is None:
            settings = [flag for flag, given in (("--weights", w), ("--ranges", reward_ranges), ("--option", options)) if given]
            if settings:
                _fail(
                    f"{', '.join(settings)} apply to the estimators named with -e (the paper's columns keep the paper's "
                    f"settings): add -e NAME[,NAME] or -e all"
                )
        _show_example(example, estimator, w, reward_ranges, options)
        return
    if file is None:
        _fail("give a JSONL file of rollouts or --example NAME")
    estimator = "all" if estimator is None else estimator
    _estimator_names(estimator)  # an unknown name is refused before the file is read
    batch = _read_batch(file, group_field, components, allow_missing)
    columns = _estimator_columns(estimator, options, w, reward_ranges, batch.names, batch.rewards, batch.group_ids)
    for name in columns:  # (an estimator whose state moves with a signal from the policy update, e.g. ctwa)
        if mrgrpo.get_estimator(name).signal is not None:
            notes.print(escape(f"{name}: no policy update in a rollout file: the on-policy limit (s = A) stands in for "
                               "the policy signal; the advantages use the initial weights"), soft_wrap=True)
    rows = []
    if out is not None:
        for i, record in enumerate(batch.records):
            added = {f"advantage_{n}": columns[n][i] for n in columns}
            clash = sorted(set(added) & set(record))
            if clash:
                _fail(f"{file}:{batch.line_numbers[i]}: already has field(s) {clash}; rename them before writing --out")
            rows.append(json.dumps({**record, **added}))
    table = Table(title=escape(f"advantages: {file}"))
    table.add_column("group")
    for name in batch.names:
        table.add_column(escape(name), justify="right")
    for name in columns:
        table.add_column(name, justify="right", style="bold")
    for i, group in enumerate(batch.group_labels):
        row = [escape(str(group))] + [_fmt(float(v)) for v in batch.rewards[i].tolist()]
        table.add_row(*row, *[_fmt(columns[name][i]) for name in columns])
    console.print(table)
    if out is not None:
        try:
            out.write_text("".join(row + "\n" for row in rows))
        except OSError as error:
            _fail(f"cannot write --out {out}: {error.strerror or error}")
        console.print(escape(f"wrote {out}"))


def _estimator_columns(
    estimator: str, options: dict[str, Any], w: list[float] | None, reward_ranges: list[tuple[float, float]] | None,
    component_names: list[str], rewards: Any, group_ids: Any,
) -> dict[str, list[float]]:
    """Each estimator named by ``-e`` (``all``: those whose required options and ranges are given),
    bound to the options, weights and ranges given, run on one batch: name -> advantages."""
    from mrgrpo.estimators.binding import bind

    names = _estimator_names(estimator)
    columns: dict[str, list[float]] = {}
    skipped, unset = [], []
    try:
        for name in names:
            spec = mrgrpo.get_estimator(name)
            chosen = {k: v for k, v in options.items() if k in spec.options}
            if estimator.strip() == "all" and any(k not in chosen for k in spec.required):
                unset.append(name)  # required options (e.g. which component is a cost) not given
                continue
            if estimator.strip() == "all" and spec.needs_ranges and reward_ranges is None and "reward_ranges" not in chosen:
                skipped.append(name)
                continue
            binding = bind(spec, chosen, names=component_names, ranges=reward_ranges, weights=w, host=_cli_host())
            columns[name] = binding.advantages(rewards, group_ids).tolist()
    except ValueError as error:
        if isinstance(error, UserError):
            raise
        raise InputError(str(error)) from None
    unused = set(options) - {k for n in columns for k in mrgrpo.get_estimator(n).options}
    if unused:
        _fail(f"option(s) {sorted(unused)} belong to none of the estimators {list(columns)}")
    if skipped:
        notes.print(
            f"skipped {', '.join(skipped)}: they need each component's range (--ranges lo:hi per component, "
            f"{len(component_names)} here)", soft_wrap=True,
        )
    if unset:
        notes.print(
            escape(f"skipped {', '.join(unset)}: they need options with no default (see mrgrpo estimators; --option key=value)"),
            soft_wrap=True,
        )
    if not columns:
        _fail("no estimator left to run")
    for key, value in options.items():
        takers = [n for n in columns if key in mrgrpo.get_estimator(n).options]
        if len(takers) < len(columns):
            notes.print(escape(f"option {key}={value!r} applies to {', '.join(takers)} only"), soft_wrap=True)
    return columns


def _show_example(
    name: str, estimator: str | None = None, w: list[float] | None = None,
    reward_ranges: list[tuple[float, float]] | None = None, options: dict[str, Any] | None = None,
) -> None:
    """The paper's columns of a worked example, its printed values and diagnostics; with ``-e``, the
    named estimators beside them, run on the example's rewards with the ``--weights``, ``--ranges``
    (default: the example's own ranges, where it has them) and ``--option`` given."""
    if name not in EXAMPLES:
        raise UnknownNameError("example", name, EXAMPLES, where="--example")
    ex = EXAMPLES[name]
    group = [0] * len(ex.rewards)
    rewards = _as_float64(ex.rewards)
    if reward_ranges is None and ex.reward_ranges is not None:
        reward_ranges = [tuple(pair) for pair in ex.reward_ranges]
    extra: dict[str, list[float]] = {}
    if estimator is not None:
        extra = _estimator_columns(estimator, options or {}, w, reward_ranges, list(ex.names), rewards, _as_int64(group))
    table = Table(title=ex.title, caption=ex.source)
    table.add_column("rollout", justify="right")
    for reward_name in ex.names:
        table.add_column(reward_name, justify="right")
    results = {}
    for label, (paper_estimator, paper_options) in ex.columns.items():
        results[label] = mrgrpo.compute_advantages(rewards, group, paper_estimator, **paper_options).tolist()
        table.add_column(label, justify="right", style="bold")
    for label in ex.paper_values:
        table.add_column(f"paper {label}", justify="right", style="dim")
    for label in extra:
        table.add_column(escape(label), justify="right", style="bold cyan")
    for i, row in enumerate(ex.rewards):
        cells = [str(i + 1)] + [f"{v:.2f}" for v in row] + [_fmt(results[label][i]) for label in ex.columns]
        cells += [_fmt(ex.paper_values[label][i], 2 if name == "sa-mrpo-sign-flip" else 4) for label in ex.paper_values]
        cells += [_fmt(extra[label][i]) for label in extra]
        table.add_row(*cells)
    console.print(table)
    for label, (paper_estimator, paper_options) in ex.columns.items():
        shown = {k: v for k, v in paper_options.items() if k != "reward_ranges"}
        console.print(f"  {label}: {paper_estimator} " + " ".join(f"{k}={v}" for k, v in shown.items()))
    for label in extra:
        chosen = {k: v for k, v in (options or {}).items() if k in mrgrpo.get_estimator(label).options}
        settings = [f"{k}={v}" for k, v in chosen.items()]
        settings += [f"weights={','.join(f'{x:g}' for x in w)}"] if w is not None else []
        if reward_ranges is not None and mrgrpo.get_estimator(label).needs_ranges and "reward_ranges" not in chosen:
            settings.append("ranges=" + ",".join(f"{lo:g}:{hi:g}" for lo, hi in reward_ranges))
        console.print(escape(f"  {label} (-e): " + (" ".join(settings) or "defaults")))
    for label, weights in (("", None), (f"with --weights {','.join(f'{x:g}' for x in w or [])}: ", w)):
        if label and weights is None:
            continue  # the first line is the paper's (all weights 1), which its note explains
        report = mrgrpo.diagnose(rewards, group, weights, reward_ranges=ex.reward_ranges, names=list(ex.names))
        console.print(
            f"{label}{_scales(report)}; share of Var(total): "
            + ", ".join(f"{k} {_fmt(v, 3)}" for k, v in report["variance_share"].items())
        )
    console.print(ex.note)


def _scales(report: dict[str, Any]) -> str:
    """``scale: grpo 0.2536, corr_grpo 0.4307``: each estimator's group scale in a diagnose report."""
    return "scale: " + ", ".join(f"{name} {_fmt(value)}" for name, value in report.get("scale", {}).items())


def _as_float64(rows: Any) -> Any:
    import torch

    return torch.tensor(rows, dtype=torch.float64)


def _as_int64(values: Any) -> Any:
    import torch

    return torch.tensor(values, dtype=torch.int64)


@app.command()
def diagnose(
    file: Path = typer.Argument(..., help=_FILE_HELP),
    weights: Optional[str] = typer.Option(None, help="component weights, comma-separated"),
    ranges: Optional[str] = typer.Option(None, help="component ranges lo:hi, comma-separated"),
    group_field: str = typer.Option("group_id", help="field holding the group id"),
    components: Optional[str] = typer.Option(None, help=_COMPONENTS_HELP),
    allow_missing: bool = typer.Option(False, "--allow-missing", help=_ALLOW_MISSING_HELP),
    estimator: str = typer.Option(
        "all", "--estimator", "-e",
        help="estimator(s) whose advantage collapse is reported, comma-separated, or 'all'",
    ),
    option: list[str] = typer.Option(
        [], "--option",
        help="option key=value the estimators are run with, as in training, e.g. shrinkage=auto (repeatable)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print the raw JSON instead of tables"),
    _short_o: list[str] = typer.Option([], "-o", hidden=True, callback=_refuse_short_o),
) -> None:
    """Diagnostics of a reward batch: correlations, variance shares, scales, saturation, collapse."""
    batch = _read_batch(file, group_field, components, allow_missing)
    w, reward_ranges = _parse_floats(weights, "--weights"), _parse_ranges(ranges)
    options = _parse_options(option)
    chosen = None if estimator.strip() == "all" and not options else _estimator_names(estimator)
    per_estimator = None
    if chosen is not None:
        if estimator.strip() == "all" and reward_ranges is None:
            chosen = [n for n in chosen if not mrgrpo.get_estimator(n).needs_ranges]
        per_estimator = {
            n: {k: v for k, v in options.items() if k in mrgrpo.get_estimator(n).options} for n in chosen
        }
        unused = set(options) - {k for n in chosen for k in mrgrpo.get_estimator(n).options}
        if unused:
            _fail(f"option(s) {sorted(unused)} belong to none of the estimators {chosen}")
        needs_ranges = [n for n in chosen if mrgrpo.get_estimator(n).needs_ranges]
        if needs_ranges and reward_ranges is None:
            _fail(f"{', '.join(needs_ranges)} need(s) --ranges lo:hi per component ({len(batch.names)}: {', '.join(batch.names)})")
    try:
        report = mrgrpo.diagnose(
            batch.rewards, batch.group_ids, w, reward_ranges, batch.names,
            estimators=chosen, estimator_options=per_estimator,
        )
    except ValueError as error:
        if isinstance(error, UserError):
            raise
        raise InputError(str(error)) from None
    if as_json:
        print(json.dumps(_json_safe(report), indent=2, allow_nan=False))
        return
    print_report(report)


def _json_safe(value: Any) -> Any:
    """NaN/inf -> null, so that ``--json`` prints strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


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
            escape(name), _fmt(report["weights"][i], 2), _fmt(stats["mean"]), _fmt(stats["std"]), _fmt(stats["scored"], 2),
            _fmt(stats["saturation"], 3), _fmt(report.get("variance_share", {}).get(name), 3),
        )
    console.print(table)
    if "correlation" in report:
        corr = Table(title="mean in-group correlation")
        corr.add_column("")
        for name in names:
            corr.add_column(escape(name), justify="right")
        for name, row in zip(names, report["correlation"]):
            corr.add_row(escape(name), *[_fmt(v, 3) for v in row])
        console.print(corr)
        console.print(f"median {_scales(report)}")
        collapse = report["advantage_collapse"]
        console.print(
            f"distinct reward profiles per group: {collapse['distinct_reward_profiles']:.2f}; distinct advantages: "
            + ", ".join(f"{k} {v:.2f}" for k, v in collapse["distinct_advantages"].items())
        )


def _register_subcommands() -> None:
    # Heavier jobs (training, evaluation) live with their layers and add their own commands.
    for module in ("mrgrpo.train.commands", "mrgrpo.train.shipped", "mrgrpo.experiments.commands", "mrgrpo.tasks.commands"):
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
