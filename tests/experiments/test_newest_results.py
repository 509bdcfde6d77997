"""docs/results/newest: the newest estimators (rvpo, gdpo_loo, ctwa) on the learnable testbed.

The committed run results are complete, each comparison's summary is what its runs give, the
``ctwa(lr=1)`` comparisons' GRPO runs equal the main comparisons' (same host, code and seeds:
the check the design announced), and the claim tables in docs/results/newest/tables.md are what
``docs/results/claim_tables.py --newest`` prints from those files.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mrgrpo.experiments.compare import load_records, summarize

ROOT = Path(__file__).parents[2]
NEWEST = ROOT / "docs" / "results" / "newest"
COMPARISONS = {
    "new-x1": ["grpo", "gdpo", "rvpo", "gdpo_loo", "gdpo_loo(leave_one_out=false)", "ctwa", "ctwa(lr=0)"],
    "new-x100": ["grpo", "gdpo", "rvpo", "gdpo_loo", "gdpo_loo(leave_one_out=false)", "ctwa", "ctwa(lr=0)"],
    "new-x1-lr1": ["grpo", "ctwa(lr=1)"],
    "new-x100-lr1": ["grpo", "ctwa(lr=1)"],
}


@pytest.mark.parametrize("name", sorted(COMPARISONS))
def test_each_comparison_is_complete_and_its_summary_is_what_its_runs_give(name):
    out = NEWEST / name
    committed = json.loads((out / "summary.json").read_text())
    records, estimators = load_records(out)
    assert estimators == COMPARISONS[name] and committed["seeds"] == [0, 1, 2, 3, 4]
    assert len(records) == 5 * len(estimators)
    for record in records:
        assert record["steps"] == 30 and all(len(curve) == 30 for curve in record["curves"].values())
    summary = summarize(records, estimators, committed["seeds"])
    for key in ("names", "objectives", "ranges", "weights", "views", "table", "paired", "steps"):
        assert summary[key] == committed[key], key
    assert committed["platform"]["threads"] == 1


@pytest.mark.parametrize("scale", ["x1", "x100"])
def test_the_lr1_comparisons_grpo_runs_equal_the_main_ones(scale):
    main, _ = load_records(NEWEST / f"new-{scale}")
    again, _ = load_records(NEWEST / f"new-{scale}-lr1")
    first = {r["seed"]: r for r in main if r["estimator"] == "grpo"}
    for record in (r for r in again if r["estimator"] == "grpo"):
        assert record["objectives"] == first[record["seed"]]["objectives"]
        assert record["curves"] == first[record["seed"]]["curves"]


def test_the_claim_tables_are_what_the_committed_runs_print():
    outs = [f"docs/results/newest/{name}" for name in ("new-x1", "new-x100", "new-x1-lr1", "new-x100-lr1")]
    printed = subprocess.run([sys.executable, "docs/results/claim_tables.py", "--newest", *outs], cwd=ROOT,
                             capture_output=True, text=True, timeout=300, check=True).stdout
    text = (NEWEST / "tables.md").read_text()
    committed = text.split("```\n", 1)[1].rsplit("```", 1)[0]
    assert printed.strip() == committed.strip()
    assert "| rvpo − gdpo: worst |" in printed and "| ctwa(lr=1) − ctwa(lr=0): shortfall |" in printed
