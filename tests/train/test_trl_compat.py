"""The TRL internals the trainer relies on are checked at construction, naming the supported range."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from trl import GRPOTrainer

from mrgrpo.errors import MissingExtraError, UnsupportedVersionError
from mrgrpo.train import trl_compat
from mrgrpo.train.trainer import MultiRewardGRPOTrainer, MultiRewardMixin

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_installed_trl_is_supported():
    trl_compat.check_version()
    trl_compat.check_trainer_class(MultiRewardGRPOTrainer)


@pytest.mark.parametrize("version", ["1.5.1", "1.17.0", "0.29.1", "2.0.0"])
def test_unsupported_versions_are_refused_with_the_range(version, monkeypatch):
    monkeypatch.delenv(trl_compat.ALLOW_UNTESTED, raising=False)
    with pytest.raises(UnsupportedVersionError) as error:
        trl_compat.check_version(version)
    message = str(error.value)
    assert f"found trl {version}" in message
    assert "pip install 'trl>=1.6,<1.17'" in message and trl_compat.ALLOW_UNTESTED in message


@pytest.mark.parametrize("version", ["1.6.0", "1.10.0", "1.16.0", "1.16.1"])
def test_supported_versions_pass(version):
    trl_compat.check_version(version)


def test_the_override_lets_an_untested_release_through_with_a_warning(monkeypatch):
    monkeypatch.setenv(trl_compat.ALLOW_UNTESTED, "1")
    with pytest.warns(UserWarning, match="trying anyway"):
        trl_compat.check_version("1.17.0")


def test_construction_fails_before_anything_runs_on_an_unsupported_trl(monkeypatch):
    monkeypatch.delenv(trl_compat.ALLOW_UNTESTED, raising=False)
    monkeypatch.setattr(trl_compat, "trl_version", lambda: "1.5.1")
    with pytest.raises(UnsupportedVersionError, match=r"trl>=1\.6,<1\.17"):
        MultiRewardGRPOTrainer(model=None, reward_funcs=[], args=None)


def test_a_changed_internal_signature_is_refused(monkeypatch):
    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards", lambda self, inputs, prompts: None)
    with pytest.raises(UnsupportedVersionError, match=r"GRPOTrainer\._calculate_rewards"):
        trl_compat.check_trainer_class(MultiRewardGRPOTrainer)


def test_a_missing_internal_method_is_refused(monkeypatch):
    monkeypatch.delattr(GRPOTrainer, "_generate_and_score_completions")
    with pytest.raises(UnsupportedVersionError, match="_generate_and_score_completions is gone"):
        trl_compat.check_trainer_class(MultiRewardGRPOTrainer)


def test_the_mixin_needs_a_grpo_trainer_base():
    class NotATrainer(MultiRewardMixin):
        pass

    with pytest.raises(TypeError, match=r"class NotATrainer\(MultiRewardMixin, YourGRPOTrainer\)"):
        NotATrainer()


def test_without_trl_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "trl", None)  # what an environment without TRL looks like to import
    with pytest.raises(MissingExtraError, match=r"pip install 'mrgrpo\[trl\]'"):
        trl_compat.import_grpo()


def test_the_trl_extra_declares_exactly_the_supported_range():
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    (trl,) = [Requirement(r) for r in extras["trl"] if Requirement(r).name == "trl"]
    assert trl.specifier == trl_compat.SUPPORTED_TRL


def test_the_installed_trl_has_the_rollout_func_the_agent_trainer_relies_on():
    trl_compat.check_rollout_func()


def test_a_trl_that_drops_env_mask_is_refused_before_the_agent_trainer_is_built(monkeypatch):
    import inspect

    from mrgrpo.train.agent_rollout import AgentGRPOTrainer

    source = inspect.getsource(GRPOTrainer).replace('extra_fields.pop("env_mask"', 'extra_fields.pop("other_mask"')
    real_getsource = inspect.getsource
    monkeypatch.setattr(inspect, "getsource", lambda obj: source if obj is GRPOTrainer else real_getsource(obj))
    with pytest.raises(UnsupportedVersionError, match="no longer reads 'env_mask'"):
        AgentGRPOTrainer(model=None, reward_funcs=[], args=None)
