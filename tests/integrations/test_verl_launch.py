"""python -m mrgrpo.integrations.verl: verl's main_ppo with the integration loaded everywhere."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl.trainer.main_ppo", reason="verl is not installed (optional extra mrgrpo[verl])")

from hydra import compose, initialize_config_dir  # noqa: E402

from mrgrpo.errors import ConfigError  # noqa: E402
from mrgrpo.integrations.verl import launch  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "verl"


def example(*overrides):
    with initialize_config_dir(config_dir=str(EXAMPLES), version_base=None):
        return compose(config_name="mrgrpo_math", overrides=["reward.custom_reward_function.path=x.py", *overrides])


def test_module_list_gets_the_integration_once():
    assert launch.with_module(None) == "mrgrpo.integrations.verl"
    assert launch.with_module("a, b") == "a,b,mrgrpo.integrations.verl"
    assert launch.with_module("mrgrpo.integrations.verl,a") == "mrgrpo.integrations.verl,a"


def test_example_composes_with_verls_defaults_and_is_prepared(monkeypatch):
    monkeypatch.delenv(launch.ENV, raising=False)
    config = example("ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=other")
    assert config.trainer.use_v1 is True  # verl 0.9's default trainer
    assert config.algorithm.adv_estimator == "mrgrpo_gdpo"
    launch.prepare(config)
    assert os.environ[launch.ENV] == "mrgrpo.integrations.verl"
    assert config.ray_kwargs.ray_init.runtime_env.env_vars[launch.ENV] == "other,mrgrpo.integrations.verl"


def test_prepare_adds_the_runtime_env_where_the_config_has_none(monkeypatch):
    monkeypatch.setenv(launch.ENV, "mine")
    import verl.trainer

    with initialize_config_dir(config_dir=str(Path(verl.trainer.__file__).parent / "config"), version_base=None):
        config = compose(config_name="ppo_trainer", overrides=["algorithm.adv_estimator=mrgrpo_grpo"])
    launch.prepare(config)
    assert config.ray_kwargs.ray_init.runtime_env.env_vars[launch.ENV] == "mrgrpo.integrations.verl"
    assert os.environ[launch.ENV] == "mine,mrgrpo.integrations.verl"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algorithm.adv_estimator=mrgrpo_nope", "not an mrgrpo estimator"),
        ("+algorithm.mrgrpo.options.gama=1", "has no option"),
        ("algorithm.mrgrpo.normalization=tokens", "normalization must be one of"),
    ],
)
def test_bad_settings_fail_before_ray_starts(override, message):
    with pytest.raises(ConfigError, match=message):
        launch.prepare(example(override))


@pytest.mark.slow  # a fresh interpreter importing verl: ~30 s
def test_the_entry_point_runs_verls_main_and_fails_fast_on_a_typo(tmp_path):
    """The real command line: Hydra composes verl's config, prepare() refuses before ray.init.
    (It runs in tmp_path: Hydra writes its outputs/ directory into the working directory.)"""
    env = {k: v for k, v in os.environ.items() if k != launch.ENV}
    result = subprocess.run(
        [sys.executable, "-m", "mrgrpo.integrations.verl", "algorithm.adv_estimator=mrgrpo_gdpo",
         "+algorithm.mrgrpo.components=[a,a]"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert result.returncode != 0
    assert "algorithm.mrgrpo.components has duplicates: ['a', 'a']" in result.stderr + result.stdout
    assert "ray init kwargs" not in result.stdout  # verl's run_ppo never started


@pytest.mark.slow  # a fresh interpreter importing verl: ~30 s
def test_a_fresh_process_importing_verl_gets_the_integration_from_the_env_var():
    """What every Ray process does: `import verl` with VERL_USE_EXTERNAL_MODULES set loads the
    estimators, the legacy wrap and the v1 trainer subclasses (no circular-import trap)."""
    code = (
        "import verl\n"
        "from verl.trainer.ppo import core_algos, ray_trainer\n"
        "from verl.trainer.ppo.v1 import get_trainer_cls\n"
        "from mrgrpo.integrations.verl.v1 import MrgrpoAdvantageMixin\n"
        "assert 'mrgrpo_corr_grpo' in core_algos.ADV_ESTIMATOR_REGISTRY\n"
        "assert hasattr(ray_trainer.compute_advantage, '_mrgrpo_original')\n"
        "assert all(issubclass(get_trainer_cls(m), MrgrpoAdvantageMixin) for m in ('sync', 'colocate_async', 'separate_async'))\n"
        "print('loaded')\n"
    )
    env = {**os.environ, launch.ENV: launch.MODULE}
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("loaded")
