"""Print the extra tables of docs/results.md's learnable-testbed section from finished comparisons.

    python docs/results/claim_tables.py runs/learnable-x1 runs/learnable-x100 [--seeds N]
    python docs/results/claim_tables.py --field runs/learnable-x1 runs/learnable-x1-ext runs/learnable-x100 runs/learnable-x100-ext
    python docs/results/claim_tables.py --newest runs/new-x1 runs/new-x100 runs/new-x1-lr1 runs/new-x100-lr1

Reads each comparison's ``runs/*/seed*/result.json`` (``mrgrpo compare``), ``start.json``
(:func:`mrgrpo.experiments.compare.evaluate_start`) and the runs' ``diagnostics.jsonl``
(:func:`mrgrpo.experiments.compare.compare_diagnostics`); only seeds for which every estimator
finished are used. Paired differences: per seed, estimator minus baseline; mean ± 95% t interval,
the paired t-test's p and Holm's adjusted p over the table (the family).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from mrgrpo.experiments.compare import run_dir_of
from mrgrpo.experiments.stats import fmt_ci, holm_family, mean_ci, paired
from mrgrpo.experiments.compare import compare_diagnostics

ESTIMATORS = ["grpo", "gdpo", "sa_mrpo", "corr_grpo", "corr_grpo(numerator=standardized)"]
OBJECTIVES = ["correct", "format", "close", "low", "total"]


def load(out: Path, estimators: list[str], max_seeds: int) -> tuple[dict, list[int]]:
    results: dict = {}
    for est in estimators:
        for seed in range(max_seeds):
            path = run_dir_of(out, est, seed) / "result.json"
            if path.is_file():
                results[(est, seed)] = json.loads(path.read_text())
    seeds = [s for s in range(max_seeds) if all((e, s) in results for e in estimators)]
    return results, seeds


def cell(d: dict) -> str:
    if not math.isfinite(d["mean"]):
        return "—"
    mark = (" ✓" if abs(d["mean"]) > d["ci"] else "") + ("‡" if d.get("p_holm", 1) < 0.05 else "")
    return f"{d['mean']:+.3f} ± {d['ci']:.3f} ({d['positive']}/{d['negative']}), p {d['p']:.3f}, Holm {d['p_holm']:.3f}{mark}"


def paired_table(results: dict, seeds: list[int], rows: list[str], baseline: str, view: str, start: dict | None = None) -> list[str]:
    table = {}
    for est in rows:
        table[est] = {o: paired([results[(est, s)]["objectives"][view][o] for s in seeds],
                                [(start[str(s)][o] if baseline == "start" else results[(baseline, s)]["objectives"][view][o]) for s in seeds])
                      for o in OBJECTIVES}
    m = holm_family(table)
    lines = [f"| vs {baseline} ({len(seeds)} seeds, Holm over {m}) | " + " | ".join(OBJECTIVES) + " |", "|---" * 6 + "|"]
    lines += [f"| {est} | " + " | ".join(cell(table[est][o]) for o in OBJECTIVES) + " |" for est in rows]
    return lines


def one_seed(outs: list[Path], seed: int, baselines: tuple[str, ...] = ("grpo", "gdpo")) -> None:
    """Every finished run of ``seed`` in ``outs`` (comparisons of one testbed scale): its eval and
    curve objectives and its difference from each baseline of the first comparison. One seed
    gives no interval: these are single measurements, not tests."""
    rows: dict[str, dict] = {}
    for out in outs:
        for result in sorted((out / "runs").glob(f"*/seed{seed}/result.json")):
            record = json.loads(result.read_text())
            rows.setdefault(record["estimator"], record)  # the first comparison's grpo is the baseline
    rows = {e: rows[e] for e in sorted(rows, key=lambda e: (e not in baselines, baselines.index(e) if e in baselines else 0))}
    extra = ["unformatted", "length"]
    for view in ("eval", "curve"):
        print(f"\n| estimator ({view}, seed {seed}) | " + " | ".join(OBJECTIVES + extra) + " | " + " | ".join(f"correct − {b}" for b in baselines) + " |")
        print("|---" * (1 + len(OBJECTIVES) + len(extra) + len(baselines)) + "|")
        for est, record in rows.items():
            values = record["objectives"][view]
            cells = [f"{values[o]:.3f}" if values.get(o) is not None else "—" for o in OBJECTIVES + extra]
            diffs = [f"{values['correct'] - rows[b]['objectives'][view]['correct']:+.3f}" if b in rows and b != est else "—" for b in baselines]
            print(f"| {est} | " + " | ".join(cells + diffs) + " |")
    for est, record in rows.items():  # a stateful estimator's logged state, first and last step
        run = next(out for out in outs if (run_dir_of(out, est, seed) / "metrics.jsonl").is_file())
        metrics = [json.loads(x) for x in (run_dir_of(run, est, seed) / "metrics.jsonl").read_text().splitlines() if x.strip()]
        state = {k: (metrics[0].get(k), metrics[-1].get(k)) for k in metrics[-1] if k.startswith("mrgrpo/state/")}
        if state:
            print(f"\n{est}: " + "; ".join(f"{k.removeprefix('mrgrpo/state/')} {a} → {b}" for k, (a, b) in sorted(state.items())))


# The field's estimators (docs/estimators): the claim each paper makes, as (label, baseline,
# objective, lower is better); the ``-ext`` comparisons carry the extra components two of them need.
FIELD_CLAIMS = [
    ("mo_grpo", "grpo", "correct", False),
    ("saw(reward_mins=[0,0,0,0])", "grpo", "correct", False),
    ("saw(reward_mins=[0,0,0,0])", "gdpo", "correct", False),
    ("dvao", "grpo", "correct", False),
    ("gd2po", "gdpo", "correct", False),
    ("corpo(threshold=3.0)", "grpo", "correct", False),
    ("ddca(correctness=correct;length=length)", "grpo", "length", True),
    ("ddca(correctness=correct;length=length)", "grpo", "correct", False),
    ("constrained_grpo(constraints=[unformatted];limits=[0.05];lr=0.1)", "grpo", "unformatted", True),
    ("constrained_grpo(constraints=[unformatted];limits=[0.05];lr=0.1)", "grpo", "correct", False),
]
EXTRA = ["unformatted", "length"]


def field(outs: list[Path], max_seeds: int) -> None:
    """The field's claim family: OUTS are the ×1 comparison, its -ext one, the ×100 one and its
    -ext one. Each claim's paired difference (estimator − baseline, same seeds) on the held-out
    (eval) and training-curve views; Holm over the family of all claims × both scales, per view."""
    scales = {"×1": outs[:2], "×100": outs[2:4]}
    found: dict[tuple[str, str, str], tuple[dict, list[int]]] = {}
    for scale, pair in scales.items():
        for est, base, _, _ in FIELD_CLAIMS:
            out = next((o for o in pair if (run_dir_of(o, est, 0) / "result.json").is_file()), pair[0])
            found[(scale, est, base)] = load(out, sorted({est, base}), max_seeds)
    for view in ("eval", "curve"):
        table: dict[str, dict] = {}
        for scale in scales:
            for est, base, objective, _ in FIELD_CLAIMS:
                results, seeds = found[(scale, est, base)]
                table.setdefault(f"{est} − {base}: {objective}", {})[scale] = paired(
                    [results[(est, s)]["objectives"][view][objective] for s in seeds],
                    [results[(base, s)]["objectives"][view][objective] for s in seeds])
        m = holm_family(table)
        print(f"\n| claim ({view}; Holm over {m}) | " + " | ".join(scales) + " | lower is the claim |\n|---|---|---|---|")
        for (row, cells), (_, _, _, lower) in zip(table.items(), FIELD_CLAIMS):
            print(f"| {row} | " + " | ".join(cell(cells[s]) for s in scales) + f" | {'yes' if lower else ''} |")
    for scale, pair in scales.items():  # every objective of every field estimator against grpo
        for out in pair:
            ests = sorted({e for e, _, _, _ in FIELD_CLAIMS if (run_dir_of(out, e, 0) / "result.json").is_file()})
            if not ests:
                continue
            results, seeds = load(out, ["grpo", "gdpo", *ests] if (run_dir_of(out, "gdpo", 0) / "result.json").is_file() else ["grpo", *ests], max_seeds)
            names = OBJECTIVES + [o for o in EXTRA if results[("grpo", seeds[0])]["objectives"]["eval"].get(o) is not None]
            print(f"\n{scale} {out} ({len(seeds)} seeds), eval, mean ± 95% t interval:\n")
            print("| estimator | " + " | ".join(names) + " |\n" + "|---" * (1 + len(names)) + "|")
            for est in sorted({e for e, _ in results}, key=lambda e: (e not in ("grpo", "gdpo"), e)):
                print(f"| {est} | " + " | ".join(fmt_ci(*mean_ci([results[(est, s)]["objectives"]["eval"][o] for s in seeds])[:2]) for o in names) + " |")
            for est in ests:  # a stateful estimator's state at its last step, over seeds
                lasts = []
                for s in seeds:
                    lines = (run_dir_of(out, est, s) / "metrics.jsonl").read_text().splitlines()
                    lasts.append(json.loads(lines[-1]))
                keys = sorted(k for k in lasts[0] if k.startswith("mrgrpo/state/"))
                if keys:
                    print(f"\n{est}, last step over seeds: " + "; ".join(
                        f"{k.removeprefix('mrgrpo/state/')} {fmt_ci(*mean_ci([r[k] for r in lasts])[:2])}" for k in keys))


# The newest estimators (RVPO, NeMo-RL's GDPO, CTWA): docs/results.md "The newest estimators".
CTWA_OBJ_TARGETS = (1.0, 0.95)  # ctwa's defaults: component 0, then the others (raw units)
CTWA_RAISED = 0.01  # an objective "raised" by CTWA: mean final weight over seeds > initial by 1%


def worst(record: dict, view: str) -> float:
    """The lowest of the run's objectives (each divided by its range)."""
    values = record["objectives"][view]
    return min(values[name] for name in record["names"])


def shortfall(record: dict, view: str) -> float:
    """``Σ_k max(obj_target_k − objective_k, 0)``, ctwa's default objective targets divided by the ranges."""
    values = record["objectives"][view]
    total = 0.0
    for k, (name, (lo, hi)) in enumerate(zip(record["names"], record["ranges"])):
        target = (CTWA_OBJ_TARGETS[0] if k == 0 else CTWA_OBJ_TARGETS[1]) / (hi - lo)
        total += max(target - values[name], 0.0)
    return total


def logged_weights(out: Path, estimator: str, seeds: list[int]) -> tuple[list[float], list[float]]:
    """A stateful weighted estimator's weights at its first and last logged step, mean over seeds."""
    first, last = [], []
    for seed in seeds:
        rows = [json.loads(x) for x in (run_dir_of(out, estimator, seed) / "metrics.jsonl").read_text().splitlines() if x.strip()]
        rows = [r for r in rows if any(k.startswith("mrgrpo/state/weight/") for k in r)]
        keys = sorted((k for k in rows[-1] if k.startswith("mrgrpo/state/weight/")), key=lambda k: int(k.rsplit("/", 1)[1]))
        first.append([rows[0][k] for k in keys])
        last.append([rows[-1][k] for k in keys])
    return [sum(c) / len(c) for c in zip(*first)], [sum(c) / len(c) for c in zip(*last)]


def newest(outs: list[Path], max_seeds: int) -> None:
    """The newest estimators' claim family: OUTS are the ×1 and ×100 comparisons and their
    ``ctwa(lr=1)`` ones. Paired differences per claim, both views; Holm over all claims × scales."""
    scales = {"×1": (outs[0], outs[2]), "×100": (outs[1], outs[3])}
    ctwas = ["ctwa", "ctwa(lr=1)"]
    claims: list[tuple[str, str, str, Any, bool]] = [
        ("rvpo", "gdpo", "worst", worst, False),
        ("rvpo", "gdpo", "correct", None, False),
        ("gdpo_loo", "grpo", "correct", None, False),
        ("gdpo_loo(leave_one_out=false)", "grpo", "correct", None, False),
        ("gdpo_loo", "gdpo", "correct", None, False),
        ("ctwa", "grpo", "correct", None, False),
    ]
    raised: dict[tuple[str, str], list[str]] = {}
    for scale, (main, extra) in scales.items():
        for est in ctwas:
            out = main if (run_dir_of(main, est, 0) / "result.json").is_file() else extra
            results, seeds = load(out, [est], max_seeds)
            names = results[(est, seeds[0])]["names"]
            first, last = logged_weights(out, est, seeds)
            raised[(scale, est)] = [n for n, a, b in zip(names, first, last) if b > a * (1 + CTWA_RAISED)]
            print(f"{scale} {est}: weights (mean over {len(seeds)} seeds) first logged step "
                  + ", ".join(f"{n} {a:.4f}" for n, a in zip(names, first)) + "; last " + ", ".join(f"{n} {b:.4f}" for n, b in zip(names, last))
                  + f"; raised by > {CTWA_RAISED:.0%}: {raised[(scale, est)] or 'none'}")
    for est in ctwas:
        claims.append((est, "ctwa(lr=0)", "shortfall", shortfall, True))
        for objective in sorted({o for scale in scales for o in raised[(scale, est)]}):
            claims.append((est, "ctwa(lr=0)", objective, None, False))
    for view in ("eval", "curve"):
        table: dict[str, dict] = {}
        for scale, (main, extra) in scales.items():
            for est, base, label, metric, _ in claims:
                out_est = main if (run_dir_of(main, est, 0) / "result.json").is_file() else extra
                res_est, seeds_est = load(out_est, [est], max_seeds)
                res_base, seeds_base = load(main, [base], max_seeds)
                seeds = [s for s in seeds_est if s in seeds_base]
                value = (lambda r: metric(r, view)) if metric is not None else (lambda r: r["objectives"][view][label])
                table.setdefault(f"{est} − {base}: {label}", {})[scale] = paired(
                    [value(res_est[(est, s)]) for s in seeds], [value(res_base[(base, s)]) for s in seeds])
        m = holm_family(table)
        print(f"\n| claim ({view}; Holm over {m}) | " + " | ".join(scales) + " | lower is the claim |\n|---|---|---|---|")
        for (row, cells), (_, _, _, _, lower) in zip(table.items(), claims):
            print(f"| {row} | " + " | ".join(cell(cells[s]) for s in scales) + f" | {'yes' if lower else ''} |")
    for scale, (main, extra) in scales.items():  # every objective, both comparisons
        for out in (main, extra):
            summary = json.loads((out / "summary.json").read_text())
            results, seeds = load(out, summary["estimators"], max_seeds)
            print(f"\n{scale} {out} ({len(seeds)} seeds), eval, mean ± 95% t interval:\n")
            print("| estimator | " + " | ".join(OBJECTIVES + ["worst", "shortfall"]) + " |\n" + "|---" * (3 + len(OBJECTIVES)) + "|")
            for est in summary["estimators"]:
                cells = [fmt_ci(*mean_ci([results[(est, s)]["objectives"]["eval"][o] for s in seeds])[:2]) for o in OBJECTIVES]
                cells += [fmt_ci(*mean_ci([f(results[(est, s)], "eval") for s in seeds])[:2]) for f in (worst, shortfall)]
                print(f"| {est} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("outs", nargs="+", type=Path)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--estimators", default=",".join(ESTIMATORS))
    parser.add_argument("--one-seed", type=int, default=None, help="print every run of this seed in OUTS (one scale) instead")
    parser.add_argument("--field", action="store_true", help="the field estimators' claims: OUTS = x1, x1-ext, x100, x100-ext")
    parser.add_argument("--newest", action="store_true", help="rvpo, gdpo_loo and ctwa's claims: OUTS = x1, x100, x1-lr1, x100-lr1")
    args = parser.parse_args()
    if args.newest:
        newest(args.outs, args.seeds)
        return
    if args.field:
        field(args.outs, args.seeds)
        return
    if args.one_seed is not None:
        one_seed(args.outs, args.one_seed)
        return
    estimators = args.estimators.split(";") if ";" in args.estimators else [e for e in ESTIMATORS if e in args.estimators.split(",") or e == args.estimators]
    for out in args.outs:
        results, seeds = load(out, estimators, args.seeds)
        print(f"\n### {out} — complete seeds {seeds}\n")
        if not seeds:
            continue
        start = json.loads((out / "start.json").read_text())["objectives"] if (out / "start.json").is_file() else None
        print("| estimator (eval) | " + " | ".join(OBJECTIVES) + " |\n" + "|---" * 6 + "|")
        if start:
            print("| warm start (before RL) | " + " | ".join(fmt_ci(*mean_ci([start[str(s)][o] for s in seeds])[:2]) for o in OBJECTIVES) + " |")
        for est in estimators:
            print(f"| {est} | " + " | ".join(fmt_ci(*mean_ci([results[(est, s)]['objectives']['eval'][o] for s in seeds])[:2]) for o in OBJECTIVES) + " |")
        if start:
            print("\nRL gain over the warm start (eval − start, paired by seed):\n")
            print("\n".join(paired_table(results, seeds, estimators, "start", "eval", start)))
        for view in ("eval", "curve"):
            print(f"\nPaired vs grpo ({view}):\n")
            print("\n".join(paired_table(results, seeds, estimators[1:], "grpo", view)))
        if "sa_mrpo" in estimators and "gdpo" in estimators:  # SA-MRPO is GDPO with saturation weights
            for view in ("eval", "curve"):
                print(f"\nSA-MRPO vs its base gdpo ({view}):\n")
                print("\n".join(paired_table(results, seeds, ["sa_mrpo"], "gdpo", view)))
        if "corr_grpo" in estimators and "corr_grpo(numerator=standardized)" in estimators:
            print("\nStandardized numerator vs plain corr_grpo (eval):\n")
            print("\n".join(paired_table(results, seeds, ["corr_grpo(numerator=standardized)"], "corr_grpo", "eval")))
        diag = compare_diagnostics(out, estimators, seeds)
        print("\n| estimator | distinct advantages / reward profiles per group | saturation first→last 5 steps: format | close | correct | share of Var(total): low (median over steps) |\n|---|---|---|---|---|---|")
        for est, d in diag.items():
            sat = " | ".join(f"{d['saturation_first'][c]:.2f} → {d['saturation_last'][c]:.2f}" for c in ("format", "close", "correct"))
            print(f"| {est} | {d['distinct_advantages']:.2f} / {d['distinct_profiles']:.2f} | {sat} | {d['variance_share']['low']:.2f} |")


if __name__ == "__main__":
    main()
