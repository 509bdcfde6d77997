"""Every registered estimator through the command line: ``mrgrpo advantages``, ``mrgrpo diagnose``
and ``mrgrpo estimators``, compared with the core function on the same batch.

Parametrized over ``mrgrpo.available_estimators()`` with each estimator's registered
``example_options`` (given as ``--option key=value``): an estimator added later is covered here with no
edit.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import mrgrpo
from mrgrpo.cli import app
from mrgrpo.rollouts import read_reward_jsonl

NAMES = ["correct", "format", "length"]


@pytest.fixture
def batch_file(tmp_path):
    rng = np.random.default_rng(3)
    path = tmp_path / "batch.jsonl"
    lines = []
    for i in range(24):
        record = {"group_id": f"g{i % 6}"}
        record.update({n: float(v) for n, v in zip(NAMES, rng.integers(0, 5, 3) / 4)})
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


def cli_options(name):
    spec = mrgrpo.get_estimator(name)
    args = []
    for key, value in spec.example_options.items():
        args += ["--option", f"{key}={json.dumps(value)}"]
    if spec.needs_ranges:
        args += ["--ranges", ",".join(["0:1"] * len(NAMES))]
    return args


def core(name, path):
    batch = read_reward_jsonl(path)
    spec = mrgrpo.get_estimator(name)
    options = dict(spec.example_options)
    if spec.needs_ranges:
        options["reward_ranges"] = [(0.0, 1.0)] * len(NAMES)
    return batch, mrgrpo.compute_advantages(batch.rewards, batch.group_ids, name, **options)


@pytest.mark.parametrize("name", mrgrpo.available_estimators())
def test_mrgrpo_advantages_runs_every_estimator_as_the_core_function_does(name, batch_file, tmp_path):
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["advantages", str(batch_file), "-e", name, *cli_options(name), "--out", str(out)])
    assert result.exit_code == 0, result.output
    written = [json.loads(line)[f"advantage_{name}"] for line in out.read_text().splitlines()]
    _, expected = core(name, batch_file)
    np.testing.assert_allclose(written, expected.tolist(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", mrgrpo.available_estimators())
def test_mrgrpo_diagnose_runs_every_estimator_as_the_core_function_does(name, batch_file):
    result = CliRunner().invoke(app, ["diagnose", str(batch_file), "-e", name, *cli_options(name), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    batch, expected = core(name, batch_file)
    direct = mrgrpo.diagnose(
        batch.rewards, batch.group_ids, names=batch.names, advantages={name: expected},
        reward_ranges=[(0.0, 1.0)] * len(NAMES),
    )
    assert report["advantage_collapse"]["distinct_advantages"][name] == direct["advantage_collapse"]["distinct_advantages"][name]


def test_diagnose_takes_roles_by_component_name(batch_file):
    """Options naming components take the JSONL's component names where the command knows them."""
    spec = mrgrpo.get_estimator("constrained_grpo") if "constrained_grpo" in mrgrpo.available_estimators() else None
    if spec is None:
        pytest.skip("no estimator with roles registered")
    role = spec.roles[0]
    by_name = CliRunner().invoke(
        app, ["diagnose", str(batch_file), "-e", "constrained_grpo", "--option", f"{role}=[format]", "--option", "limits=[0.5]", "--json"]
    )
    by_index = CliRunner().invoke(
        app, ["diagnose", str(batch_file), "-e", "constrained_grpo", "--option", f"{role}=[1]", "--option", "limits=[0.5]", "--json"]
    )
    assert by_name.exit_code == 0 and by_index.exit_code == 0, by_name.output + by_index.output
    assert json.loads(by_name.stdout)["advantage_collapse"] == json.loads(by_index.stdout)["advantage_collapse"]


def test_advantages_takes_roles_by_component_name(batch_file, tmp_path):
    outs = []
    for role_value in ("[format]", "[1]"):
        out = tmp_path / f"out{len(outs)}.jsonl"
        result = CliRunner().invoke(app, [
            "advantages", str(batch_file), "-e", "constrained_grpo", "--option", f"constraints={role_value}", "--option", "limits=[0.5]",
            "--out", str(out),
        ])
        assert result.exit_code == 0, result.output
        outs.append(out.read_text())
    assert outs[0] == outs[1]
    result = CliRunner().invoke(app, ["advantages", str(batch_file), "-e", "constrained_grpo", "--option", "constraints=[size]", "--option", "limits=[0.5]"])
    assert result.exit_code == 2 and "'size' is not a component; the components are ['correct', 'format', 'length']" in result.output


def test_a_bad_option_value_is_one_line_and_exit_2(batch_file):
    result = CliRunner().invoke(app, ["advantages", str(batch_file), "-e", "corr_grpo", "--option", "shrinkage=2.0"])
    assert result.exit_code == 2, result.output
    assert "shrinkage must be a number in [0, 1]" in result.output and "Traceback" not in result.output


def test_mrgrpo_estimators_lists_every_estimator_with_options_defaults_and_traits():
    result = CliRunner().invoke(app, ["estimators", "--json"])
    assert result.exit_code == 0, result.output
    listed = {row["name"]: row for row in json.loads(result.stdout)}
    assert sorted(listed) == mrgrpo.available_estimators()
    for name, row in listed.items():
        spec = mrgrpo.get_estimator(name)
        assert row["traits"] == spec.traits() and row["example_options"] == spec.example_options
        assert set(row["options"]) == set(spec.options)
        for key in spec.required:
            assert row["options"][key] == "<required>"
    assert listed["grpo"]["options"]["scale"] == "group" and listed["grpo"]["traits"]["scale_option"] == "scale"
    table = CliRunner().invoke(app, ["estimators"], env={"COLUMNS": "240"})
    assert table.exit_code == 0
    for name in listed:
        assert name in table.output
    assert "needs ranges" in table.output and "stateful" in table.output


def test_the_cli_reads_a_stateful_estimators_first_step(batch_file, tmp_path):
    """A one-off batch through the CLI is the first step of a stateful estimator (state None)."""
    stateful = [n for n in mrgrpo.available_estimators() if mrgrpo.get_estimator(n).stateful]
    assert stateful
    for name in stateful:
        out = tmp_path / f"{name}.jsonl"
        result = CliRunner().invoke(app, ["advantages", str(batch_file), "-e", name, *cli_options(name), "--out", str(out)])
        assert result.exit_code == 0, result.output
        batch = read_reward_jsonl(batch_file)
        options = dict(mrgrpo.get_estimator(name).example_options)
        if mrgrpo.get_estimator(name).needs_ranges:
            options["reward_ranges"] = [(0.0, 1.0)] * len(NAMES)
        first, _ = mrgrpo.compute_advantages_with_state(batch.rewards, batch.group_ids, name, state=None, **options)
        written = torch.tensor([json.loads(line)[f"advantage_{name}"] for line in out.read_text().splitlines()])
        torch.testing.assert_close(written, first.float(), rtol=1e-6, atol=1e-7)


def test_advantages_refuses_weights_an_estimator_does_not_use(batch_file):
    weights = ",".join(["0.5"] * len(NAMES))
    result = CliRunner().invoke(app, ["advantages", str(batch_file), "-e", "ddca", "--weights", weights])
    assert result.exit_code == 2 and "ddca does not use the weights" in result.output and "in --weights" in result.output
