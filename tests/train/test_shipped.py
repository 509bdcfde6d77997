"""Shipped example configs: names, look-up by name, `mrgrpo configs list | copy`."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mrgrpo.cli import app
from mrgrpo.errors import ConfigError
from mrgrpo.train import shipped
from mrgrpo.train.config import load_config, read_config_mapping

REPO = Path(__file__).resolve().parents[2]


def test_every_repository_config_is_shipped_under_its_name():
    names = set(shipped.available())
    on_disk = {p.relative_to(REPO / "configs").with_suffix("").as_posix() for p in (REPO / "configs").rglob("*.yaml")}
    assert names == on_disk and {"tiny", "smollm2_code", "testbed/scale1"} <= names


@pytest.mark.parametrize("text", ["tiny", "tiny.yaml", "configs/tiny.yaml", "./configs/tiny"])
def test_a_name_resolves_to_the_shipped_file_when_no_such_file_exists(text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here
    data, source = read_config_mapping(text)
    assert data["model"] == "tiny" and source == "shipped config tiny"


def test_a_local_file_wins_over_the_shipped_config_of_that_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text("model: tiny\nmax_steps: 7\n")
    assert load_config("tiny.yaml").max_steps == 7
    assert load_config("tiny").max_steps == 4  # no file "tiny": the shipped one


def test_an_unknown_name_is_one_line_listing_the_shipped_configs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"config file not found: nope .*shipped configs: .*smollm2_tool_call"):
        read_config_mapping("nope")


def test_configs_list_and_copy(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    listed = runner.invoke(app, ["configs", "list"])
    assert listed.exit_code == 0
    rows = dict(line.split(None, 1) for line in listed.output.splitlines())
    assert set(rows) == set(shipped.available()) | set(shipped.KITS) and rows["tiny"].startswith("The tiny preset")
    assert rows["verl"].startswith("(folder, copies to ./examples/verl)")
    done = runner.invoke(app, ["configs", "copy", "testbed/scale1"])
    assert done.exit_code == 0 and (tmp_path / "scale1.yaml").read_text() == (REPO / "configs/testbed/scale1.yaml").read_text()
    again = runner.invoke(app, ["configs", "copy", "testbed/scale1"])
    assert again.exit_code == 2 and "already exists; pass --force" in again.output
    forced = runner.invoke(app, ["configs", "copy", "tiny", "sub/mine.yaml", "--force"])
    assert forced.exit_code == 0 and (tmp_path / "sub/mine.yaml").is_file()
    missing = runner.invoke(app, ["configs", "copy", "nope"])
    assert missing.exit_code == 2 and "no shipped config 'nope'" in missing.output


def test_the_verl_kit_is_copied_as_a_folder_where_the_readme_runs_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    done = runner.invoke(app, ["configs", "copy", "verl"])
    assert done.exit_code == 0 and done.output.strip() == "examples/verl"
    kit = REPO / "examples" / "verl"
    for name in ("run.sh", "mrgrpo_math.yaml", "prepare_data.py", "README.md"):
        assert (tmp_path / "examples" / "verl" / name).read_bytes() == (kit / name).read_bytes(), name
    again = runner.invoke(app, ["configs", "copy", "verl"])
    assert again.exit_code == 2 and "already exists and is not empty; pass --force" in again.output
    elsewhere = runner.invoke(app, ["configs", "copy", "verl", "launch", "--force"])
    assert elsewhere.exit_code == 0 and (tmp_path / "launch" / "run.sh").is_file()
