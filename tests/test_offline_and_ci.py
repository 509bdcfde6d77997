"""tests/conftest.py's rules hold: the hub is offline for every test, and under CI a broken
install fails instead of skipping."""

import os
import subprocess
import sys

import pytest


def test_the_hub_is_offline_here_and_in_subprocesses(tmp_path):
    import datasets.config
    import huggingface_hub
    import huggingface_hub.constants
    import huggingface_hub.errors

    assert huggingface_hub.constants.HF_HUB_OFFLINE and datasets.config.HF_DATASETS_OFFLINE
    with pytest.raises(huggingface_hub.errors.LocalEntryNotFoundError) as raised:  # refused without a request
        huggingface_hub.hf_hub_download("no-such-org/no-such-model", "config.json", cache_dir=tmp_path)
    assert isinstance(raised.value.__cause__, huggingface_hub.errors.OfflineModeIsEnabled)
    code = "import huggingface_hub.constants as c; print(c.HF_HUB_OFFLINE)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "True"


@pytest.fixture
def broken_package(tmp_path, monkeypatch):
    """An installed package whose import fails (as a dependency with a broken vendor SDK does)."""
    (tmp_path / "mrgrpo_test_broken").mkdir()
    (tmp_path / "mrgrpo_test_broken" / "__init__.py").write_text("raise ImportError('its SDK is missing')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "mrgrpo_test_broken"
    sys.modules.pop("mrgrpo_test_broken", None)


def test_under_ci_an_installed_package_that_fails_to_import_fails_the_test(broken_package, monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="installed but does not import.*its SDK is missing"):
        pytest.importorskip(broken_package)


def test_outside_ci_it_skips_and_a_missing_package_always_skips(broken_package, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="its SDK is missing"):
        pytest.importorskip(broken_package)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.skip.Exception):
        pytest.importorskip("mrgrpo_no_such_package_anywhere")
    assert pytest.importorskip("json") is sys.modules["json"] and os.environ["CI"] == "true"
