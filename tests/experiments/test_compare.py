"""End to end on the tiny preset: compare (2 estimators × 2 seeds × 2 steps), resume, analyze."""

import json
from pathlib import Path

import pytest

from mrgrpo.experiments.analyze import run_analyze
from mrgrpo.experiments.compare import RESULT_FILE, load_compare_config, run_compare, run_dir_of

CONFIG = Path(__file__).parents[2] / "configs" / "testbed" / "scale1.yaml"
FAST = [
    "max_steps=2", "save_steps=2", "task.size=8", "task.eval_size=2",
    "trainer.num_generations=4", "trainer.per_device_train_batch_size=8", "trainer.max_completion_length=6",
    "experiment.warm_start.steps=2", "experiment.eval.samples=2", "experiment.eval.max_new_tokens=6",
]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    summary = run_compare(CONFIG, ["grpo", "gdpo"], [0, 1], out, overrides=FAST, log=lambda *_: None)
    return out, summary


def test_compare_writes_table_plots_and_paired_differences(compared):
    out, summary = compared
    text = (out / "compare.md").read_text()
    for needle in ("| estimator | correct | format | close | low | total |", "Paired difference vs grpo", "**"):
        assert needle in text
    assert (out / "curves.png").stat().st_size > 0 and (out / "pareto.png").stat().st_size > 0
    assert summary["views"] == ["eval", "curve", "end"]
    cell = summary["table"]["eval"]["gdpo"]["correct"]
    assert cell["n"] == 2 and 0.0 <= cell["mean"] <= 1.0
    assert summary["paired"]["eval"]["gdpo"]["total"]["n"] == 2
    # paired design: both estimators of a seed start from the same warm-start model
    for seed in (0, 1):
        models = {json.loads((run_dir_of(out, e, seed) / RESULT_FILE).read_text())["seed"] for e in ("grpo", "gdpo")}
        assert models == {seed}
        assert (out / "warm_start" / f"seed{seed}" / "config.json").is_file()


def test_interrupted_compare_resumes_without_rerunning_finished_runs(compared):
    out, _ = compared
    finished = run_dir_of(out, "grpo", 0) / RESULT_FILE
    before = finished.stat().st_mtime_ns
    interrupted = run_dir_of(out, "gdpo", 1)
    (interrupted / RESULT_FILE).unlink()  # as if killed after training, before its result was written
    logs = []
    run_compare(CONFIG, ["grpo", "gdpo"], [0, 1], out, overrides=FAST, log=logs.append)
    assert "3 already finished" in logs[0]
    assert finished.stat().st_mtime_ns == before
    assert (interrupted / RESULT_FILE).is_file()


def test_analyze_a_logged_run(compared):
    out, _ = compared
    run = run_dir_of(out, "grpo", 0)
    lines = (run / "rollouts.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 8 and json.loads(lines[0])["step"] == 1
    report = run_analyze(run)
    data = json.loads((run / "analysis" / "analysis.json").read_text())
    assert report.is_file() and "sa_mrpo" in data["estimators"]  # ranges come from the run
    assert data["steps"] == [1, 2]


def test_experiment_section_is_validated(tmp_path):
    from mrgrpo.train.config import ConfigError

    train, experiment = load_compare_config(CONFIG)
    assert "experiment" not in train and experiment.warm_start.steps > 0
    with pytest.raises(ConfigError):
        load_compare_config(CONFIG, ["trainer.not_a_field=1"])
    with pytest.raises(Exception, match="warm_strat"):
        load_compare_config(CONFIG, ["experiment.warm_strat=1"])


def test_estimator_variants_with_options():
    from mrgrpo.experiments.compare import estimator_spec, parse_estimators

    labels = parse_estimators("grpo, corr_grpo(shrinkage=auto;pooling=batch),corr_grpo(min_corr_sum=0.5)")
    assert labels == ["grpo", "corr_grpo(shrinkage=auto;pooling=batch)", "corr_grpo(min_corr_sum=0.5)"]
    assert estimator_spec(labels[1]) == ("corr_grpo", {"shrinkage": "auto", "pooling": "batch"})
    assert estimator_spec(labels[2]) == ("corr_grpo", {"min_corr_sum": 0.5})
    with pytest.raises(ValueError, match="no option"):
        estimator_spec("grpo(shrinkage=auto)")
    with pytest.raises(ValueError, match="unknown estimator"):
        estimator_spec("nope")


def test_summary_records_the_platform(compared):
    _, summary = compared
    platform = summary["platform"]
    assert platform["cpu_capability"] and platform["threads"] >= 1 and platform["torch"]
    assert set(platform["env"]) <= {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY", "MKL_CBWR"}


def test_extra_components_at_weight_zero_leave_a_run_unchanged(tmp_path):
    # the field-estimator runs of docs/results.md pair ddca/constrained_grpo (which need a length
    # and a cost) with GRPO: the extra components at weight 0 must not change GRPO's run
    extra = ["rewards.options.extra=[unformatted,length]", "rewards.weights.unformatted=0", "rewards.weights.length=0"]
    plain = run_compare(CONFIG, ["grpo"], [0], tmp_path / "plain", overrides=FAST, log=lambda *_: None)
    with_extra = run_compare(CONFIG, ["grpo"], [0], tmp_path / "extra", overrides=FAST + extra, log=lambda *_: None)
    a, b = (json.loads((run_dir_of(tmp_path / d, "grpo", 0) / RESULT_FILE).read_text()) for d in ("plain", "extra"))
    assert b["names"] == a["names"] + ["unformatted", "length"]
    assert {n: b["curves"][n] for n in a["names"]} == a["curves"]
    assert b["curves"]["unformatted"] == [1.0 - f for f in a["curves"]["format"]]
    assert with_extra["table"]["eval"]["grpo"]["total"] == plain["table"]["eval"]["grpo"]["total"]


def test_every_estimator_is_bound_to_the_suite_before_the_first_run(tmp_path):
    # ddca uses no weights: format's 0.5 is refused (not dropped) before any run or directory exists
    from mrgrpo.errors import ConfigError

    out = tmp_path / "c"
    with pytest.raises(ConfigError, match=r"ddca does not use the weights of component\(s\) \[1\]"):
        run_compare(CONFIG, ["grpo", "ddca(correctness=correct;length=close)"], [0], out,
                    overrides=[*FAST, "rewards.weights.format=0.5"], log=lambda *_: None)
    assert not out.exists()


def test_figure_is_redrawn_from_the_committed_results(compared, tmp_path):
    from typer.testing import CliRunner

    from mrgrpo.cli import app
    from mrgrpo.experiments.compare import draw_figure, load_records

    out, _ = compared
    records, estimators = load_records(out)
    assert estimators == ["grpo", "gdpo"] and sorted((r["estimator"], r["seed"]) for r in records) == [
        ("gdpo", 0), ("gdpo", 1), ("grpo", 0), ("grpo", 1)]
    assert draw_figure(out, tmp_path / "two.png", ["low", "correct"]).stat().st_size > 0
    with pytest.raises(ValueError, match=r"unknown \['speed'\]"):
        draw_figure(out, tmp_path / "bad.png", ["speed"])
    result = CliRunner().invoke(app, ["figure", str(out), "--out", str(tmp_path / "cli.png"), "-k", "correct,low"])
    assert result.exit_code == 0 and (tmp_path / "cli.png").stat().st_size > 0, result.output
    result = CliRunner().invoke(app, ["figure", str(tmp_path), "--out", str(tmp_path / "none.png")])
    assert result.exit_code == 2 and "summary.json: not found" in result.output and len(result.output.strip().splitlines()) == 1


def test_first_seed_and_start_reach_the_comparison(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from mrgrpo.cli import app
    from mrgrpo.experiments import compare

    calls = {}
    monkeypatch.setattr(compare, "run_compare", lambda config, names, seeds, out, **kw: (kw["before_runs"](), calls.setdefault("seeds", seeds)))
    monkeypatch.setattr(compare, "evaluate_start", lambda config, out, seeds, overrides=None: calls.setdefault("start", seeds))
    args = ["compare", "-c", str(CONFIG), "-e", "grpo", "-n", "3", "--first-seed", "100", "--start", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert calls == {"seeds": [100, 101, 102], "start": [100, 101, 102]}


def test_start_on_a_fresh_comparison_is_evaluated_from_the_warm_starts_it_makes(tmp_path):
    """``--start`` on an experiment with warm starts: they are made first, then evaluated, then
    the runs start (evaluating before they exist used to fail with no warm start there)."""
    from typer.testing import CliRunner

    from mrgrpo.cli import app

    args = ["compare", "-c", str(CONFIG), "-e", "grpo", "-n", "1", "--start", "--out", str(tmp_path)]
    for item in FAST:
        args += ["--set", item]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    start = json.loads((tmp_path / "start.json").read_text())
    assert start["seeds"] == [0] and 0.0 <= start["objectives"]["0"]["correct"] <= 1.0
    assert (tmp_path / "warm_start" / "seed0" / "config.json").is_file()
    assert (run_dir_of(tmp_path, "grpo", 0) / RESULT_FILE).is_file()
