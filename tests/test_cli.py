"""The mrgrpo command line: worked examples, JSONL batches, errors."""

import json

from typer.testing import CliRunner

from mrgrpo.cli import app

runner = CliRunner()


def test_examples_print_the_papers_numbers():
    result = runner.invoke(app, ["advantages", "--example", "corrgrpo-fig2"])
    assert result.exit_code == 0, result.output
    assert "-1.8607" in result.output and "-1.0954" in result.output and "0.4307" in result.output
    result = runner.invoke(app, ["advantages", "--example", "sa-mrpo-sign-flip"])
    assert result.exit_code == 0, result.output
    assert "-0.6966" in result.output and "0.6140" in result.output


def test_unknown_example_is_a_clear_error():
    result = runner.invoke(app, ["advantages", "--example", "nope"])
    assert result.exit_code == 2
    assert "corrgrpo-fig2" in result.output


def write_batch(path):
    rows = [
        {"group_id": "a", "correct": 1, "format": 1.0},
        {"group_id": "a", "correct": 0, "format": 0.5},
        {"group_id": "b", "correct": 1, "format": None},
        {"group_id": "b", "correct": 0, "format": 1.0},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_advantages_on_jsonl_writes_output(tmp_path):
    src, out = tmp_path / "batch.jsonl", tmp_path / "adv.jsonl"
    write_batch(src)
    result = runner.invoke(app, ["advantages", str(src), "-e", "grpo,corr_grpo", "--weights", "1,0.5", "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 4 and {"advantage_grpo", "advantage_corr_grpo"} <= set(lines[0])
    assert abs(sum(line["advantage_corr_grpo"] for line in lines[:2])) < 1e-6


def test_advantages_all_with_ranges_includes_sa_mrpo(tmp_path):
    src = tmp_path / "batch.jsonl"
    write_batch(src)
    result = runner.invoke(app, ["advantages", str(src), "--ranges", "0:1,0:1", "-o", "gamma=1"])
    assert result.exit_code == 0, result.output
    assert "sa_mrpo" in result.output


def test_diagnose_prints_tables_and_json(tmp_path):
    src = tmp_path / "batch.jsonl"
    write_batch(src)
    result = runner.invoke(app, ["diagnose", str(src)])
    assert result.exit_code == 0, result.output
    assert "correlation" in result.output
    result = runner.invoke(app, ["diagnose", str(src), "--json"])
    assert json.loads(result.stdout)["num_groups"] == 2  # the schema line goes to stderr


def test_bad_jsonl_and_options_are_clear_errors(tmp_path):
    src = tmp_path / "batch.jsonl"
    src.write_text('{"correct": 1}\n')
    result = runner.invoke(app, ["advantages", str(src)])
    assert result.exit_code == 2 and "group_id" in result.output
    write_batch(src)
    result = runner.invoke(app, ["advantages", str(src), "-e", "grpo", "-o", "gamma=1"])
    assert result.exit_code == 2 and "gamma" in result.output
    result = runner.invoke(app, ["advantages", str(src), "-e", "sa_mrpo"])
    assert result.exit_code == 2 and "--ranges" in result.output


def test_estimators_lists_all():
    result = runner.invoke(app, ["estimators"])
    assert result.exit_code == 0
    for name in ["grpo", "dr_grpo", "gdpo", "sa_mrpo", "corr_grpo"]:
        assert name in result.output
