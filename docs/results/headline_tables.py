"""Print the tables of docs/results.md's headline section from a finished comparison.

    python docs/results/headline_tables.py docs/results/smollm2-brevity10

Reads the comparison's ``runs/*/seed*/result.json`` and ``diagnostics.jsonl`` (``mrgrpo
compare``) and its ``start.json`` (``--start``), in the estimator order of its ``summary.json``.

* Held-out objectives per estimator (mean ± 95% t interval over seeds), the pretrained model first.
* The pre-registered family: held-out ``correctness`` of each estimator minus ``grpo``, paired by
  seed; the two-sided paired t-test's p and Holm's adjusted p over the family (the estimators
  other than the baseline: 5 comparisons).
* The secondary comparisons (every other objective, same pairing), Holm over their own family.
* Per estimator, from the runs' step-by-step diagnostics: each component's share of
  Var(weighted total) (median over steps, and the share of steps where the scaled component owns
  at least 90% of it, among steps where the total varies at all), each component's saturation
  over the first and last 5 steps, and the share of groups with a constant weighted total (no
  advantage, no gradient) over the first and last 5 steps.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mrgrpo.experiments.compare import compare_diagnostics, run_dir_of
from mrgrpo.experiments.stats import fmt_ci, holm_family, mean_ci, paired


def p_cell(d: dict) -> str:
    return f"{d['mean']:+.3f} ± {d['ci']:.3f} ({d['positive']}/{d['negative']}), p {d['p']:.4f}, Holm {d['p_holm']:.4f}"


def owned_steps(out: Path, estimator: str, seeds: list[int], component: str, share: float = 0.9) -> tuple[int, int]:
    """(steps where ``component`` owns ≥ ``share`` of Var(weighted total), steps where it varies)."""
    owned = varied = 0
    for seed in seeds:
        for line in (run_dir_of(out, estimator, seed) / "diagnostics.jsonl").read_text().splitlines():
            shares = json.loads(line).get("variance_share") or {}
            value = shares.get(component)
            if value is None:
                continue
            varied += 1
            owned += value >= share
    return owned, varied


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--primary", default="correctness", help="the pre-registered objective")
    parser.add_argument("--scaled", default="length", help="the component at the large scale")
    args = parser.parse_args()
    out: Path = args.out
    summary = json.loads((out / "summary.json").read_text())
    estimators, seeds, baseline = summary["estimators"], summary["seeds"], summary["baseline"]
    objectives = summary["objectives"]
    results = {(e, s): json.loads((run_dir_of(out, e, s) / "result.json").read_text()) for e in estimators for s in seeds}
    start = json.loads((out / "start.json").read_text())["objectives"] if (out / "start.json").is_file() else None

    def values(est: str, obj: str, view: str = "eval") -> list[float]:
        return [results[(est, s)]["objectives"][view][obj] for s in seeds]

    print(f"Held-out (eval) objectives ÷ range, mean ± 95% CI over seeds {seeds}:\n")
    print("| policy | " + " | ".join(objectives) + " |\n" + "|---" * (1 + len(objectives)) + "|")
    if start:
        print("| pretrained (before RL) | " + " | ".join(fmt_ci(*mean_ci([start[str(s)][o] for s in seeds])[:2]) for o in objectives) + " |")
    for est in estimators:
        print(f"| {est} | " + " | ".join(fmt_ci(*mean_ci(values(est, o))[:2]) for o in objectives) + " |")

    others = [e for e in estimators if e != baseline]
    primary = {e: {args.primary: paired(values(e, args.primary), values(baseline, args.primary))} for e in others}
    m = holm_family(primary)
    print(f"\nPre-registered: held-out {args.primary}, estimator − {baseline} paired by seed (Holm over {m}):\n")
    print(f"| estimator | {args.primary} − {baseline}: mean ± 95% CI (seeds > 0 / < 0), p, Holm p |\n|---|---|")
    for est in others:
        print(f"| {est} | {p_cell(primary[est][args.primary])} |")

    secondary_objectives = [o for o in objectives if o != args.primary]
    secondary = {e: {o: paired(values(e, o), values(baseline, o)) for o in secondary_objectives} for e in others}
    m = holm_family(secondary)
    print(f"\nSecondary: the other held-out objectives − {baseline} (Holm over {m}):\n")
    print("| estimator | " + " | ".join(secondary_objectives) + " |\n" + "|---" * (1 + len(secondary_objectives)) + "|")
    for est in others:
        print(f"| {est} | " + " | ".join(p_cell(secondary[est][o]) for o in secondary_objectives) + " |")

    if start:
        print("\nWhat RL added (held-out eval − pretrained, paired by seed; mean ± 95% CI):\n")
        print("| estimator | " + " | ".join(objectives) + " |\n" + "|---" * (1 + len(objectives)) + "|")
        for est in estimators:
            cells = [paired(values(est, o), [start[str(s)][o] for s in seeds]) for o in objectives]
            print(f"| {est} | " + " | ".join(f"{d['mean']:+.3f} ± {d['ci']:.3f}" for d in cells) + " |")

    names = summary["names"]
    diag = compare_diagnostics(out, estimators, seeds)
    print(f"\nTraining diagnostics per estimator (mean over seeds; saturation and constant groups over the first → last 5 steps):\n")
    print("| estimator | share of Var(weighted total), median over steps: " + " / ".join(names)
          + f" | steps where {args.scaled} owns ≥ 90% | saturation: " + " | ".join(names) + " | constant groups |")
    print("|---" * (4 + len(names)) + "|")
    for est, d in diag.items():
        shares = " / ".join(f"{d['variance_share'][n]:.2f}" if d["variance_share"][n] is not None else "—" for n in names)
        owned, varied = owned_steps(out, est, seeds, args.scaled)
        sat = " | ".join(f"{d['saturation_first'][n]:.2f} → {d['saturation_last'][n]:.2f}" for n in names)
        const = f"{d['constant_groups_first']:.2f} → {d['constant_groups_last']:.2f}"
        print(f"| {est} | {shares} | {owned}/{varied} | {sat} | {const} |")


if __name__ == "__main__":
    main()
