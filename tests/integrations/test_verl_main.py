"""``python -m mrgrpo.integrations.verl``: its --help explains ``algorithm.mrgrpo``; a mistake is one line, exit 2."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mrgrpo

pytest.importorskip("verl.trainer.main_ppo", reason="verl is not installed (optional extra mrgrpo[verl])")

from mrgrpo.integrations.verl import __main__ as entry  # noqa: E402
from mrgrpo.integrations.verl.config import MrgrpoVerlConfig  # noqa: E402


def test_help_names_every_algorithm_mrgrpo_key_with_its_meaning(capsys):
    entry.main(["--help"])
    text = capsys.readouterr().out
    assert "algorithm.adv_estimator=mrgrpo_<name>" in text and "mrgrpo_corr_grpo" in text
    described = entry.attribute_help(MrgrpoVerlConfig.__doc__)
    for field in dataclasses.fields(MrgrpoVerlConfig):
        assert f"  {field.name} (default " in text, field.name
        assert len(described[field.name]) > 20, field.name  # a meaning, not just the name
    assert '"token": that normalization is replaced' in " ".join(text.split())  # both choices are shown


def test_attribute_help_reads_wrapped_entries():
    doc = """Settings.

    Attributes:
        alpha: the first line
            goes on here. A second sentence.
        beta: ``x`` or ``y``.
    """
    assert entry.attribute_help(doc) == {"alpha": "the first line goes on here. A second sentence.", "beta": "x or y."}
    assert entry.attribute_help(doc, limit=10)["alpha"] == "the first line goes on here."


@pytest.mark.slow  # a fresh interpreter importing verl: ~20 s
def test_a_misspelled_key_is_one_line_and_exit_2_not_hydras_traceback(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "MRGRPO_DEBUG", "VERL_USE_EXTERNAL_MODULES")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(mrgrpo.__file__).parents[1]), env.get("PYTHONPATH", "")])  # this mrgrpo
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "mrgrpo.integrations.verl", "algorithm.adv_estimator=mrgrpo_gdpo",
         "+algorithm.mrgrpo.wieghts=[1,2]"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert errors == ["error: algorithm.mrgrpo has unknown key(s) ['wieghts']; known keys: ['components', 'eps', "
                      "'import', 'normalization', 'options', 'singleton_groups', 'suite', 'suite_options', 'weights']"]
    assert "Error executing job" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow  # a fresh interpreter: ~10 s
def test_the_launcher_without_verl_is_one_line_naming_the_extra(tmp_path):
    # a sitecustomize hides verl the way Python sees a missing package, in a real `python -m` run
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['verl'] = None\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MRGRPO_DEBUG", "VERL_USE_EXTERNAL_MODULES")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(Path(mrgrpo.__file__).parents[1]), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "mrgrpo.integrations.verl", "--help"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "pip install" in errors[0] and "verl" in errors[0], result.stderr[-2000:]
