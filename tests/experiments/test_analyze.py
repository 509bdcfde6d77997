import json
import random

import pytest
import torch

from mrgrpo.experiments.analyze import effective_weights, group_standardize, run_analyze, spearman


def _write_rollouts(path, scale_b: float, steps: int = 3, groups: int = 4, size: int = 6):
    rng = random.Random(0)
    with path.open("w") as f:
        for step in range(1, steps + 1):
            for g in range(groups):
                for _ in range(size):
                    f.write(json.dumps({"step": step, "group_id": f"{step}:{g}", "a": float(rng.random() < 0.5),
                                        "b": scale_b * rng.random()}) + "\n")


def test_effective_weight_of_a_scaled_component(tmp_path):
    # b independent of a, on a scale 100x larger: GRPO's advantage is almost only b; GDPO weighs both alike.
    path = tmp_path / "rollouts.jsonl"
    _write_rollouts(path, scale_b=100.0)
    report = run_analyze(path, out=tmp_path / "out", estimators="grpo,gdpo,corr_grpo")
    data = json.loads((tmp_path / "out" / "analysis.json").read_text())
    assert report.name == "analysis.md" and report.is_file()
    assert (tmp_path / "out" / "effective_weights.png").is_file() and (tmp_path / "out" / "diagnostics.png").is_file()
    shares = {e: data["effective_weights"][e]["share"] for e in data["estimators"]}
    assert shares["grpo"][1] > 0.95
    assert 0.35 < shares["gdpo"][0] < 0.65
    assert data["skipped"] == []
    text = report.read_text()
    assert "Sign agreement" in text and "Rank correlation" in text


def test_estimators_needing_ranges_are_skipped_without_them(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    _write_rollouts(path, scale_b=1.0, steps=1)
    run_analyze(path, out=tmp_path / "o", estimators="grpo,sa_mrpo")
    assert json.loads((tmp_path / "o" / "analysis.json").read_text())["skipped"] == ["sa_mrpo"]
    run_analyze(path, out=tmp_path / "p", estimators="grpo,sa_mrpo", ranges="0:1,0:1")
    assert json.loads((tmp_path / "p" / "analysis.json").read_text())["estimators"] == ["grpo", "sa_mrpo"]


def test_estimators_with_required_options_are_skipped(tmp_path):
    # corpo needs its passing score, constrained_grpo its costs and limits: the replay has neither
    path = tmp_path / "rollouts.jsonl"
    _write_rollouts(path, scale_b=1.0, steps=1)
    report = run_analyze(path, out=tmp_path / "o", estimators="grpo,corpo,constrained_grpo")
    data = json.loads((tmp_path / "o" / "analysis.json").read_text())
    assert data["estimators"] == ["grpo"] and data["skipped"] == ["corpo", "constrained_grpo"]
    assert "skipped (no ranges, or options with no default): corpo, constrained_grpo" in report.read_text()


def test_group_standardize_and_exact_fit():
    rewards = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 5.0], [1.0, 3.0]], dtype=torch.float64)
    z = group_standardize(rewards, ["x", "x", "y", "y"])
    # group x: a = (0, 1) -> z = (-0.7071, 0.7071); b constant -> 0. group y: a = (0, 1), b = (5, 3)
    assert z[:, 0].tolist() == pytest.approx([-0.7071068, 0.7071068, -0.7071068, 0.7071068])
    assert z[:2, 1].tolist() == [0.0, 0.0]
    beta, r2 = effective_weights(2 * z[:, 0] - z[:, 1], z)
    assert beta == pytest.approx([2.0, -1.0]) and r2 == pytest.approx(1.0)
    assert spearman(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 15.0])) == pytest.approx(0.5)


def test_missing_source_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no rollouts.jsonl"):
        run_analyze(tmp_path)


def test_cli_analyze(tmp_path):
    from typer.testing import CliRunner

    from mrgrpo.cli import app

    path = tmp_path / "rollouts.jsonl"
    _write_rollouts(path, scale_b=1.0, steps=1)
    result = CliRunner().invoke(app, ["analyze", str(path), "--estimators", "grpo,gdpo", "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r" / "analysis.md").is_file()
    bad = CliRunner().invoke(app, ["analyze", str(tmp_path / "missing.jsonl")])
    assert bad.exit_code == 2


def test_the_report_says_where_the_weights_came_from(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    _write_rollouts(path, scale_b=1.0, steps=1)
    run_analyze(path, out=tmp_path / "o", estimators="grpo")
    assert "the run's weights were not found, pass --weights" in (tmp_path / "o" / "analysis.md").read_text()
    (tmp_path / "result.json").write_text(json.dumps({"names": ["a", "b"], "weights": [1.0, 0.25], "ranges": [[0, 1], [0, 1]]}))
    run_analyze(path, out=tmp_path / "p", estimators="grpo")
    data = json.loads((tmp_path / "p" / "analysis.json").read_text())
    assert data["weights"] == [1.0, 0.25] and data["weights_source"] == "the run's"
    run_analyze(path, out=tmp_path / "q", estimators="grpo", weights="2,1")
    assert json.loads((tmp_path / "q" / "analysis.json").read_text())["weights_source"] == "--weights"


def test_all_skips_and_names_estimators_that_refuse_the_runs_weights(tmp_path):
    # ddca uses no weights: it refuses a run's 1/0.5 rather than drop them; `-e all` replays the others
    from typer.testing import CliRunner

    from mrgrpo.cli import app

    path = tmp_path / "rollouts.jsonl"
    _write_rollouts(path, scale_b=1.0, steps=1)
    result = CliRunner().invoke(app, ["analyze", str(path), "--out", str(tmp_path / "o"), "--weights", "1,0.5"])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "o" / "analysis.json").read_text())
    assert "ddca" not in data["estimators"] and "grpo" in data["estimators"] and "ddca" in data["skipped"]
    assert "does not use the weights of component(s) [1]" in data["refused"]["ddca"]
    assert "skipped ddca: ddca does not use the weights" in result.stderr
    assert "skipped ddca: ddca does not use the weights" in (tmp_path / "o" / "analysis.md").read_text()
    # named alone, the refusal is the command's one-line error
    result = CliRunner().invoke(app, ["analyze", str(path), "--out", str(tmp_path / "p"), "--weights", "1,0.5", "-e", "ddca"])
    assert result.exit_code == 2 and "ddca does not use the weights" in result.output
