"""``mrgrpo analyze``: replay logged reward batches through every estimator, without training.

For a ``rollouts.jsonl`` (one rollout per line: ``step``, ``group_id``, one field per component;
written by :class:`~mrgrpo.train.rollout_log.RolloutLogger`) or a run directory holding one,
each step's batch is handed to every estimator, and the report answers "which reward is really
steering my update?":

* **sign agreement**: over rollouts where both advantages are nonzero, the fraction whose signs
  agree, for every pair of estimators (all steps pooled);
* **rank correlation**: Spearman correlation of two estimators' advantages within a step's
  batch, averaged over steps;
* **effective weights**: the least-squares coefficients ``β`` of ``Â ≈ Σ_k β_k z_k``, where ``Â``
  is the advantage divided by its in-group root mean square (so per-group scales, such as
  CorrGRPO's amplification of some groups, do not decide the fit) and
  ``z_k`` is component ``k`` standardized within its group (``(r − mean_g)/std_g``, ddof=1; 0 in
  groups where it is constant, NaN as 0), fitted per step and pooled; shown as shares
  ``|β_k| / Σ_l |β_l|`` with the fit's R². A share near 1 means that component alone sets the sign
  and size of the advantages;
* :func:`mrgrpo.diagnose` **over time**: in-group correlation of component pairs, each
  component's share of Var(total), GRPO's and CorrGRPO's scales, zero-variance groups.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import torch

from mrgrpo.errors import ConfigError, InputError, MissingExtraError
from mrgrpo.extras import require
from mrgrpo.rollouts import ROLLOUTS_FILE


def _run_suite_info(run_dir: Path) -> tuple[list[str] | None, list[float] | None, list[tuple[float, float]] | None]:
    """Names, weights and ranges of a run's suite (from its result.json or config.yaml), else Nones."""
    result = run_dir / "result.json"
    if result.is_file():
        data = json.loads(result.read_text())
        return data["names"], data["weights"], [tuple(r) for r in data["ranges"]]
    if (run_dir / "config.yaml").is_file():
        # Rebuilding the suite from the run's config needs the training stack (a rollouts file,
        # or a run directory with result.json, does not): checked here, not left to an import.
        feature = f"mrgrpo analyze of {run_dir} (no result.json: the suite is rebuilt from config.yaml)"
        require("trl", feature)
        try:
            from mrgrpo.experiments import testbed  # noqa: F401  (registers the testbed suite)
            from mrgrpo.train.job import build_suite, load_run_config
            from mrgrpo.train.presets import load_tokenizer
        except ImportError as error:  # a missing package, or MissingExtraError from the trainer
            missing = getattr(error, "missing", None) or (error.name or "trl").split(".")[0]
            raise MissingExtraError(feature, "trl", missing) from None
        try:
            config = load_run_config(run_dir)
            suite = build_suite(config, load_tokenizer(config.model))
            return suite.names, list(suite.weights), list(suite.reward_ranges)
        except Exception:  # noqa: BLE001 - analysis still works without the suite's metadata
            return None, None, None
    return None, None, None


def read_rollouts(path: Path, names: list[str] | None = None) -> tuple[list[str], list[tuple[int, torch.Tensor, list[Any]]]]:
    """``(component names, [(step, rewards [N, K] float64, group ids), ...])`` from a rollouts file.

    Read by :func:`mrgrpo.rollouts.read_reward_jsonl` (the same rules as ``mrgrpo diagnose``:
    ``names`` or the union of numeric fields minus metadata such as ``step``; a missing or
    mistyped component is an error naming the line); rollouts are batched by their ``step``."""
    from mrgrpo.errors import InputError
    from mrgrpo.rollouts import read_reward_jsonl

    batch = read_reward_jsonl(path, "group_id", names, missing_hint="add it (null = not scored) to every line")
    steps: dict[int, list[int]] = {}
    for i, (record, line) in enumerate(zip(batch.records, batch.line_numbers)):
        step = record.get("step", 0)
        if isinstance(step, bool) or not isinstance(step, int):
            raise InputError(f"{path}:{line}: field 'step' must be an integer, got {step!r}")
        steps.setdefault(step, []).append(i)
    batches = [
        (step, batch.rewards[rows], [batch.group_ids[i] for i in rows]) for step, rows in sorted(steps.items())
    ]
    return batch.names, batches


def group_standardize(rewards: torch.Tensor, group_ids: list[Any]) -> torch.Tensor:
    """Per-component in-group z-scores (ddof=1); 0 where a component is constant in a group or NaN."""
    codes: dict[Any, int] = {}
    index = torch.tensor([codes.setdefault(g, len(codes)) for g in group_ids])
    z = torch.zeros_like(rewards)
    for g in range(len(codes)):
        rows = index == g
        block = rewards[rows]
        if block.shape[0] < 2:
            continue
        filled = torch.where(torch.isnan(block), torch.nanmean(block, dim=0, keepdim=True).expand_as(block), block)
        mean = filled.mean(dim=0, keepdim=True)
        std = filled.std(dim=0, unbiased=True, keepdim=True)
        ok = (std > 1e-12) & torch.isfinite(std)
        z[rows] = torch.where(ok, (filled - mean) / std.clamp_min(1e-12), torch.zeros_like(filled))
    return torch.nan_to_num(z)


def group_rms_normalize(advantages: torch.Tensor, group_ids: list[Any]) -> torch.Tensor:
    """Advantages divided by their in-group root mean square (groups of all zeros stay 0), so
    per-group scales (CorrGRPO's amplification, GRPO's 1/std) do not decide the fit."""
    codes: dict[Any, int] = {}
    index = torch.tensor([codes.setdefault(g, len(codes)) for g in group_ids])
    squares = torch.zeros(len(codes), dtype=advantages.dtype).index_add_(0, index, advantages**2)
    counts = torch.zeros(len(codes), dtype=advantages.dtype).index_add_(0, index, torch.ones_like(advantages))
    rms = (squares / counts).sqrt()[index]
    return torch.where(rms > 1e-12, advantages / rms.clamp_min(1e-12), torch.zeros_like(advantages))


def effective_weights(advantages: torch.Tensor, z: torch.Tensor) -> tuple[list[float], float]:
    """Least-squares ``β`` of ``advantages ≈ z β`` and the fit's R² (no intercept: both are centered per group)."""
    if advantages.abs().sum() == 0:
        return [0.0] * z.shape[1], math.nan
    beta = torch.linalg.lstsq(z, advantages.unsqueeze(1), driver="gelsd").solution.squeeze(1)
    residual = advantages - z @ beta
    total = (advantages**2).sum()
    return beta.tolist(), float(1 - (residual**2).sum() / total) if total > 0 else math.nan


def _ranks(x: torch.Tensor) -> torch.Tensor:
    order = torch.argsort(x, stable=True)
    ranks = torch.empty_like(x)
    ranks[order] = torch.arange(len(x), dtype=x.dtype)
    # average ties
    values, inverse = torch.unique(x, return_inverse=True)
    sums = torch.zeros(len(values), dtype=x.dtype).index_add_(0, inverse, ranks)
    counts = torch.zeros(len(values), dtype=x.dtype).index_add_(0, inverse, torch.ones_like(x))
    return (sums / counts)[inverse]


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = math.sqrt(float((ra**2).sum() * (rb**2).sum()))
    return float((ra * rb).sum()) / denom if denom > 0 else math.nan


def analyze_batches(
    names: list[str],
    batches: list[tuple[int, torch.Tensor, list[Any]]],
    estimators: list[str],
    weights: list[float] | None = None,
    ranges: list[tuple[float, float]] | None = None,
) -> dict[str, Any]:
    """The replay (see the module docstring) as a JSON-ready dict."""
    import mrgrpo

    from mrgrpo.errors import ConfigError
    from mrgrpo.estimators.binding import Host, bind

    w = torch.tensor(weights if weights is not None else [1.0] * len(names), dtype=torch.float64)
    host = Host(weights_from="the run's weights (or --weights)", ranges_fix="give --ranges lo:hi per component")
    bound, refused = {}, {}
    for name in estimators:
        spec = mrgrpo.get_estimator(name)
        if spec.needs_ranges and ranges is None:
            continue  # needs the components' ranges (give --ranges)
        if spec.required:
            continue  # needs options with no default (a threshold, which component is a cost): none to replay with
        try:
            bound[name] = bind(spec, {}, names=names, ranges=ranges, weights=weights, host=host)
        except ConfigError as error:
            if len(estimators) == 1:
                raise  # the one estimator asked for cannot replay this run: say why
            refused[name] = str(error)  # e.g. weights it does not use: skipped, and said so
    chosen = list(bound)
    agree = {(a, b): [0, 0] for a, b in itertools.combinations(chosen, 2)}
    rank_corr: dict[tuple[str, str], list[float]] = {pair: [] for pair in agree}
    per_step_weights: dict[str, list[list[float]]] = {e: [] for e in chosen}
    r2: dict[str, list[float]] = {e: [] for e in chosen}
    pooled_z, pooled_a = [], {e: [] for e in chosen}
    diag_steps: list[dict[str, Any]] = []
    steps = []
    for step, rewards, group_ids in batches:
        steps.append(step)
        advantages = {}
        for name, binding in bound.items():
            advantages[name] = binding.advantages(rewards, group_ids).to(torch.float64)
        z = group_standardize(rewards, group_ids)
        pooled_z.append(z)
        for name, adv in advantages.items():
            adv = group_rms_normalize(adv, group_ids)
            pooled_a[name].append(adv)
            beta, fit = effective_weights(adv, z)
            total = sum(abs(b) for b in beta)
            per_step_weights[name].append([abs(b) / total if total > 0 else math.nan for b in beta])
            r2[name].append(fit)
        for a, b in agree:
            both = (advantages[a].abs() > 1e-8) & (advantages[b].abs() > 1e-8)
            agree[(a, b)][0] += int((torch.sign(advantages[a][both]) == torch.sign(advantages[b][both])).sum())
            agree[(a, b)][1] += int(both.sum())
            rank_corr[(a, b)].append(spearman(advantages[a], advantages[b]))
        diag_steps.append(mrgrpo.diagnose(rewards, group_ids, w, ranges, names))
    z_all = torch.cat(pooled_z)
    pooled = {}
    for name in chosen:
        beta, fit = effective_weights(torch.cat(pooled_a[name]), z_all)
        total = sum(abs(b) for b in beta)
        pooled[name] = {"beta": beta, "share": [abs(b) / total if total > 0 else math.nan for b in beta], "r2": fit}

    def nanmean(values: list[float]) -> float:
        kept = [v for v in values if v is not None and math.isfinite(v)]
        return sum(kept) / len(kept) if kept else math.nan

    return {
        "names": names,
        "weights": w.tolist(),
        "ranges": [list(r) for r in ranges] if ranges is not None else None,
        "estimators": chosen,
        "skipped": [e for e in estimators if e not in chosen],
        "refused": refused,
        "steps": steps,
        "num_rollouts": int(z_all.shape[0]),
        "sign_agreement": {f"{a}|{b}": (c / n if n else math.nan) for (a, b), (c, n) in agree.items()},
        "rank_correlation": {f"{a}|{b}": nanmean(v) for (a, b), v in rank_corr.items()},
        "effective_weights": pooled,
        "effective_weights_per_step": per_step_weights,
        "r2_per_step": r2,
        "diagnostics": diag_steps,
    }


def _matrix_table(estimators: list[str], values: dict[str, float], title: str) -> list[str]:
    lines = [f"### {title}", "", "| | " + " | ".join(estimators) + " |", "|---" * (len(estimators) + 1) + "|"]
    for a in estimators:
        cells = []
        for b in estimators:
            v = 1.0 if a == b else values.get(f"{a}|{b}", values.get(f"{b}|{a}", math.nan))
            cells.append(f"{v:.3f}" if math.isfinite(v) else "—")
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return lines + [""]


def render_report(report: dict[str, Any], source: str, figures: dict[str, Path | None]) -> str:
    names, estimators = report["names"], report["estimators"]
    unset = [e for e in report["skipped"] if e not in report.get("refused", {})]
    lines = [
        f"# mrgrpo analyze: `{source}`",
        "",
        f"{len(report['steps'])} logged steps, {report['num_rollouts']} rollouts; components {', '.join(names)} "
        f"(weights {', '.join(f'{w:g}' for w in report['weights'])}"
        + (f", {report['weights_source']}" if report.get("weights_source") else "")
        + f"); estimators replayed: {', '.join(estimators)}"
        + (f"; skipped (no ranges, or options with no default): {', '.join(unset)}" if unset else "")
        + "".join(f"; skipped {name}: {why}" for name, why in report.get("refused", {}).items()),
        "",
        "## Effective weight of each component",
        "",
        "Least-squares fit of each estimator's advantages (divided by their in-group RMS) on the group-standardized "
        "components, all steps pooled: "
        "share |β_k| / Σ|β| (β in parentheses) and R². The component with the largest share steers the update.",
        "",
        "| estimator | " + " | ".join(names) + " | R² |",
        "|---" * (len(names) + 2) + "|",
    ]
    for est in estimators:
        fit = report["effective_weights"][est]
        cells = [f"{s:.2f} ({b:+.3f})" if math.isfinite(s) else "—" for s, b in zip(fit["share"], fit["beta"])]
        lines.append(f"| {est} | " + " | ".join(cells) + f" | {fit['r2']:.3f} |")
    lines += ["", *_matrix_table(estimators, report["sign_agreement"], "Sign agreement (rollouts where both are nonzero)")]
    lines += _matrix_table(estimators, report["rank_correlation"], "Rank correlation (Spearman within a step, averaged)")
    lines += ["## Figures", ""] + [f"![{n}]({n})" for n, p in figures.items() if p is not None]
    return "\n".join(lines) + "\n"


def run_analyze(
    source: str | Path,
    out: str | Path | None = None,
    estimators: str = "all",
    weights: str | None = None,
    ranges: str | None = None,
) -> Path:
    """Analyze ``source`` (a rollouts file or a run directory); returns the report path."""
    import mrgrpo
    from mrgrpo.experiments.plots import plot_series

    source = Path(source)
    if source.is_dir():
        run_dir, path = source, source / ROLLOUTS_FILE
        if not path.is_file():
            raise InputError(f"{source}: no {ROLLOUTS_FILE} in this run directory")
    elif source.is_file():
        run_dir, path = source.parent, source
    else:
        raise InputError(f"{source}: no such file or directory")
    names, run_weights, run_ranges = _run_suite_info(run_dir)
    names, batches = read_rollouts(path, names)
    if weights is not None:
        run_weights = [float(x) for x in weights.split(",")]
    if ranges is not None:
        run_ranges = [tuple(float(v) for v in item.split(":")) for item in ranges.split(",")]
    for given, what in ((run_weights, "weights"), (run_ranges, "ranges")):
        if given is not None and len(given) != len(names):
            raise ConfigError(f"{len(given)} {what} for {len(names)} components ({', '.join(names)})")
    chosen = mrgrpo.available_estimators() if estimators == "all" else [e.strip() for e in estimators.split(",") if e.strip()]
    report = analyze_batches(names, batches, chosen, run_weights, run_ranges)
    if weights is not None:
        report["weights_source"] = "--weights"
    elif run_weights is not None:
        report["weights_source"] = "the run's"
    else:  # said in the report: an unweighted replay of a weighted run would mislead silently
        report["weights_source"] = "all 1: the run's weights were not found, pass --weights"
    out_dir = Path(out) if out is not None else run_dir / "analysis"
    out_dir.mkdir(parents=True, exist_ok=True)
    steps = report["steps"]
    diags = report["diagnostics"]
    shares = {
        est: {n: [row[i] for row in report["effective_weights_per_step"][est]] for i, n in enumerate(names)}
        for est in report["estimators"]
    }
    pair_corr = {}
    for i, j in itertools.combinations(range(len(names)), 2):
        pair_corr[f"{names[i]}~{names[j]}"] = [
            (d.get("correlation") or [[None] * len(names)] * len(names))[i][j] if d.get("correlation") else math.nan for d in diags
        ]
    pair_corr = {k: [math.nan if v is None else v for v in vals] for k, vals in pair_corr.items()}
    diag_series = {
        "in-group correlation": pair_corr,
        "share of Var(total)": {n: [d.get("variance_share", {}).get(n, math.nan) or math.nan for d in diags] for n in names},
        "scale (median over groups)": {
            k: [d.get("scale", {}).get(k) or math.nan for d in diags] for k in (diags[0].get("scale", {}) if diags else {})
        },
        "zero-variance groups": {"fraction": [d.get("zero_variance_fraction") or 0.0 for d in diags]},
    }
    figures = {
        "effective_weights.png": plot_series(out_dir / "effective_weights.png", steps, shares, "effective weight share |β_k|/Σ|β| per step"),
        "diagnostics.png": plot_series(out_dir / "diagnostics.png", steps, diag_series, "mrgrpo.diagnose over time"),
    }
    (out_dir / "analysis.json").write_text(json.dumps({k: v for k, v in report.items() if k != "diagnostics"}, indent=1, default=str))
    report_path = out_dir / "analysis.md"
    report_path.write_text(render_report(report, str(source), figures))
    return report_path
