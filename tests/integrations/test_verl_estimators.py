"""Every registered estimator on verl's legacy trainer path, stateful estimators' state (carried,
logged, saved beside verl's checkpoint, restored on resume) on both trainers, a user's own
estimator named by ``algorithm.mrgrpo.import``, and the launcher's value checks before Ray.

Parametrized over ``mrgrpo.available_estimators()`` with the registered ``example_options``: an
estimator added later is covered without an edit here. verl's checkpoint I/O needs its GPU worker
groups, so verl's own ``_save_checkpoint`` / ``_load_checkpoint`` are replaced by stand-ins that do
what they do to the trainer (write the ``global_step_<n>`` folder; set ``global_steps``); mrgrpo's
wrapping of them is what runs.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="verl is not installed (optional extra mrgrpo[verl])")

from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo import core_algos, ray_trainer  # noqa: E402

import mrgrpo  # noqa: E402
import mrgrpo.integrations.verl as integration  # noqa: E402
from mrgrpo.errors import ConfigError  # noqa: E402
from mrgrpo.estimators import registry  # noqa: E402
from mrgrpo.integrations.verl import launch, patch  # noqa: E402
from mrgrpo.integrations.verl.state import STATE, STATE_FILE  # noqa: E402

from .test_verl import KEYS, algo, make_batch  # noqa: E402

WEIGHTS = [1.0, 0.5, 0.25]
VERL_EPS = 1e-6

#: The estimators the verl adapter runs: all but those that need a policy signal from the update
#: (their feedback), which it refuses (test_verl_refuses_an_estimator_that_needs_a_policy_signal).
VERL_ESTIMATORS = [n for n in mrgrpo.available_estimators() if mrgrpo.get_estimator(n).feedback is None]


def options_for(name):
    spec = mrgrpo.get_estimator(name)
    options = dict(spec.example_options)
    if spec.needs_ranges:
        options["reward_ranges"] = [[0.0, 1.0]] * len(KEYS)
    return options


def weights_for(name):
    """Configured weights, 1 on the components the roles name; none for ``uses_weights=False``."""
    spec = mrgrpo.get_estimator(name)
    if not spec.uses_weights:
        return None
    weights = list(WEIGHTS)
    for role in spec.roles:
        named = spec.example_options.get(role)
        for index in named if isinstance(named, list) else [] if named is None else [named]:
            weights[index] = 1.0
    return weights


def core(name, data, state=None, **options):
    """mrgrpo's core function on a batch's components, with verl's eps where the estimator has one."""
    rewards = np.stack([data.non_tensor_batch[k] for k in KEYS], 1)
    extra = {"eps": VERL_EPS} if "eps" in mrgrpo.get_estimator(name).options else {}
    return mrgrpo.compute_advantages_with_state(
        rewards, list(data.non_tensor_batch["uid"]), name, weights_for(name), state=state, **extra, **options
    )


def same_state(a, b, tol=1e-9) -> bool:
    """Two JSON states equal up to rounding (the adapter sums rows in another order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k], tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_state(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(a - b) <= tol * max(1.0, abs(a), abs(b))
    return a == b


def block(name, **options):
    return {"components": KEYS, "weights": weights_for(name), "options": {**options_for(name), **options}}


@pytest.fixture(autouse=True)
def fresh_state():
    STATE.reset()
    yield
    STATE.reset()


@pytest.mark.parametrize("name", VERL_ESTIMATORS)
def test_every_estimator_on_the_legacy_trainer_equals_the_core_function(name):
    data = make_batch(5)
    cfg = algo(adv_estimator=f"mrgrpo_{name}", mrgrpo=block(name))
    out = ray_trainer.compute_advantage(data, adv_estimator=cfg.adv_estimator, config=cfg)
    expected, _ = core(name, data, **options_for(name))
    expected = expected.float()[:, None] * data.batch["response_mask"]
    torch.testing.assert_close(out.batch["advantages"], expected)
    torch.testing.assert_close(out.batch["returns"], expected)


def stateful_cases():
    """Every stateful estimator, with the option that gives it state where it needs one."""
    cases = []
    for name in VERL_ESTIMATORS:
        spec = mrgrpo.get_estimator(name)
        if spec.stateful:
            cases.append((name, {"correlation_ema": 0.5} if "correlation_ema" in spec.options else {}))
    return cases


STATEFUL = stateful_cases()


def _legacy_step(name, data, extra):
    cfg = algo(adv_estimator=f"mrgrpo_{name}", mrgrpo=block(name, **extra))
    out = ray_trainer.compute_advantage(data, adv_estimator=cfg.adv_estimator, config=cfg)
    return out


@pytest.mark.parametrize("name,extra", STATEFUL, ids=[n for n, _ in STATEFUL])
def test_legacy_trainer_carries_the_state_and_logs_it_with_the_steps_metrics(name, extra):
    options = {**options_for(name), **extra}
    state = None
    for seed in (1, 2, 3):
        data = make_batch(seed)
        out = _legacy_step(name, data, extra)
        expected, state = core(name, data, state, **options)
        torch.testing.assert_close(out.batch["advantages"], expected.float()[:, None] * data.batch["response_mask"])
        assert same_state(STATE.state, state)
        out.batch["token_level_scores"] = out.batch["token_level_rewards"]
        metrics = ray_trainer.compute_data_metrics(batch=out, use_critic=False)  # as the fit loop calls it
        logged = {k: v for k, v in metrics.items() if k.startswith("mrgrpo/state/")}
        assert logged and logged == STATE.metrics
        if "steps" in state:
            assert metrics["mrgrpo/state/steps"] == state["steps"]


def _trainer_config(name, extra, tmp_path, resume_mode="auto"):
    return OmegaConf.create({
        "algorithm": {**algo(adv_estimator=f"mrgrpo_{name}", mrgrpo=block(name, **extra))},
        "trainer": {"default_local_dir": str(tmp_path / "ckpt"), "resume_mode": resume_mode, "resume_from_path": None},
        "actor_rollout_ref": {"rollout": {"n": 5}},
    })


def fake_save(self):
    """What verl's _save_checkpoint does to the disk that matters here: the step's folder."""
    folder = Path(self.config.trainer.default_local_dir) / f"global_step_{self.global_steps}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "latest").write_text(str(self.global_steps))


def fake_load(self):
    """What verl's _load_checkpoint does to the trainer: global_steps from the latest folder."""
    root = Path(self.config.trainer.default_local_dir)
    steps = sorted(int(p.name.split("_")[-1]) for p in root.glob("global_step_*")) if root.is_dir() else []
    self.global_steps = steps[-1] if steps else 0


@pytest.fixture
def legacy_checkpoints():
    """RayPPOTrainer with verl's checkpoint I/O stood in for, wrapped by mrgrpo's install()."""
    patch.uninstall()
    saved = ray_trainer.RayPPOTrainer._save_checkpoint, ray_trainer.RayPPOTrainer._load_checkpoint
    ray_trainer.RayPPOTrainer._save_checkpoint, ray_trainer.RayPPOTrainer._load_checkpoint = fake_save, fake_load
    patch.install()
    yield ray_trainer.RayPPOTrainer
    patch.uninstall()
    ray_trainer.RayPPOTrainer._save_checkpoint, ray_trainer.RayPPOTrainer._load_checkpoint = saved
    patch.install()


@pytest.mark.parametrize("name,extra", STATEFUL, ids=[n for n, _ in STATEFUL])
def test_legacy_trainer_saves_the_state_beside_verls_checkpoint_and_restores_it_on_resume(name, extra, tmp_path, legacy_checkpoints):
    assert hasattr(legacy_checkpoints._save_checkpoint, patch.ORIGINAL_ATTR)  # mrgrpo's wrap is in place
    trainer = legacy_checkpoints.__new__(legacy_checkpoints)  # verl's __init__ starts GPU workers
    trainer.config = _trainer_config(name, extra, tmp_path)
    trainer.global_steps = 0
    trainer._load_checkpoint()  # a fresh start: no state
    assert STATE.state is None
    options = {**options_for(name), **extra}
    state = None
    for step, seed in ((1, 1), (2, 2)):
        data = make_batch(seed)
        _legacy_step(name, data, extra)
        _, state = core(name, data, state, **options)
        trainer.global_steps = step
        trainer._save_checkpoint()
    saved = tmp_path / "ckpt" / "global_step_2" / STATE_FILE
    assert saved.is_file()
    # a new trainer process resumes: verl finds global_step_2, mrgrpo restores the state there
    STATE.reset()
    resumed = legacy_checkpoints.__new__(legacy_checkpoints)
    resumed.config = _trainer_config(name, extra, tmp_path)
    resumed._load_checkpoint()
    assert resumed.global_steps == 2 and STATE.state == json.loads(saved.read_text())["state"]
    assert same_state(STATE.state, state)
    data = make_batch(3)
    out = _legacy_step(name, data, extra)
    expected, _ = core(name, data, state, **options)  # continues, not restarted
    torch.testing.assert_close(out.batch["advantages"], expected.float()[:, None] * data.batch["response_mask"])
    # another estimator's saved state is refused, not silently used
    STATE.reset()
    other = legacy_checkpoints.__new__(legacy_checkpoints)
    other.config = _trainer_config(name, extra, tmp_path)
    other.config.algorithm.adv_estimator = "mrgrpo_grpo"
    with pytest.raises(ConfigError, match="saved by mrgrpo_"):
        other._load_checkpoint()


# ---- a user's own estimator, named once in the config -------------------------------------------


def write_user_module(tmp_path, monkeypatch):
    """A module that registers its own estimator (unique names: nothing is registered yet)."""
    tag = uuid.uuid4().hex[:8]
    module, estimator = f"my_estimators_{tag}", f"user_best_{tag}"
    (tmp_path / f"{module}.py").write_text(
        "import mrgrpo\n\n\n"
        f"@mrgrpo.register_estimator({estimator!r}, roles=('focus',), example_options={{'focus': 0}})\n"
        "def best(rewards, groups, weights, *, focus, scale=1.0):\n"
        "    \"\"\"A user's estimator: the focused component centered in its group, times scale.\"\"\"\n"
        "    return mrgrpo.compute_advantages(rewards[:, [focus]], groups, 'dr_grpo') * scale\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(core_algos, "ADV_ESTIMATOR_REGISTRY", dict(core_algos.ADV_ESTIMATOR_REGISTRY))
    monkeypatch.delitem(sys.modules, module, raising=False)
    return module, estimator


def test_a_users_estimator_named_in_the_config_runs_on_the_legacy_trainer(tmp_path, monkeypatch):
    module, estimator = write_user_module(tmp_path, monkeypatch)
    assert estimator not in mrgrpo.available_estimators()
    cfg = algo(
        adv_estimator=f"mrgrpo_{estimator}",
        mrgrpo={"components": KEYS, "import": [module], "options": {"focus": "length", "scale": 2.0}},
    )
    data = make_batch(4)
    out = ray_trainer.compute_advantage(data, adv_estimator=cfg.adv_estimator, config=cfg)
    rewards = np.stack([data.non_tensor_batch[k] for k in KEYS], 1)
    want = 2.0 * mrgrpo.compute_advantages(rewards[:, [2]], list(data.non_tensor_batch["uid"]), "dr_grpo")
    torch.testing.assert_close(out.batch["advantages"], want.float()[:, None] * data.batch["response_mask"])


def test_the_launcher_imports_the_users_module_and_lists_it_for_every_ray_worker(tmp_path, monkeypatch):
    from .test_verl_launch import example

    module, estimator = write_user_module(tmp_path, monkeypatch)
    monkeypatch.delenv(launch.ENV, raising=False)
    config = example(f"algorithm.adv_estimator=mrgrpo_{estimator}", f"+algorithm.mrgrpo.import=[{module}]",
                     "+algorithm.mrgrpo.options.focus=correctness")
    launch.prepare(config)
    assert os.environ[launch.ENV] == f"{module},mrgrpo.integrations.verl"
    # (the example lists the integration already: the module joins it; the lookup imports it again)
    assert config.ray_kwargs.ray_init.runtime_env.env_vars[launch.ENV] == f"mrgrpo.integrations.verl,{module}"
    assert f"mrgrpo_{estimator}" in core_algos.ADV_ESTIMATOR_REGISTRY
    with pytest.raises(ConfigError, match="'correctnes' is not a component"):  # roles checked by name
        launch.prepare(example(f"algorithm.adv_estimator=mrgrpo_{estimator}", f"+algorithm.mrgrpo.import=[{module}]",
                               "+algorithm.mrgrpo.options.focus=correctnes"))
    with pytest.raises(ConfigError, match="algorithm.mrgrpo.import: cannot import 'no_such_module_x'"):
        launch.prepare(example("+algorithm.mrgrpo.import=[no_such_module_x]"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # sa_mrpo without reward_ranges (and no suite to take them from)
        (["algorithm.adv_estimator=mrgrpo_sa_mrpo", "algorithm.mrgrpo.suite=null",
          "algorithm.mrgrpo.components=[a,b,c]"], "mrgrpo_sa_mrpo needs reward_ranges"),
        (["algorithm.adv_estimator=mrgrpo_sa_mrpo", "+algorithm.mrgrpo.options.reward_ranges=[[0,1],[1,0],[0,1]]"], "hi > lo"),
        (["algorithm.adv_estimator=mrgrpo_sa_mrpo", "+algorithm.mrgrpo.options.reward_ranges=[[0,1],[0,1]]"],
         "reward_ranges has 2 entries for 3 components"),
        (["algorithm.adv_estimator=mrgrpo_corr_grpo", "+algorithm.mrgrpo.options.shrinkage=2.0"], "shrinkage must be a number"),
        (["algorithm.adv_estimator=mrgrpo_grpo", "+algorithm.mrgrpo.options.scale=grup"], "scale must be one of"),
        (["algorithm.adv_estimator=mrgrpo_gdpo", "algorithm.norm_adv_by_std_in_grpo=false"], "has no meaning for mrgrpo_gdpo"),
    ],
)
def test_the_launcher_checks_option_values_before_ray_starts(overrides, message):
    from .test_verl_launch import example

    with pytest.raises(ConfigError, match=message):
        launch.prepare(example(*overrides))


@pytest.mark.parametrize("name", VERL_ESTIMATORS)
def test_the_launcher_accepts_every_estimator_with_its_example_options(name):
    from .test_verl_launch import example

    overrides = [f"algorithm.adv_estimator=mrgrpo_{name}"]
    for key, value in mrgrpo.get_estimator(name).example_options.items():
        overrides.append(f"+algorithm.mrgrpo.options.{key}={value}".replace(" ", ""))
    if not mrgrpo.get_estimator(name).uses_weights:
        overrides.append("algorithm.mrgrpo.weights=null")
    elif mrgrpo.get_estimator(name).roles:  # a role's component (a cost) weighs 1: the suite's 0.5 is refused
        overrides.append(f"algorithm.mrgrpo.weights=[{','.join(str(w) for w in weights_for(name))}]")
    launch.prepare(example(*overrides))
    assert integration.verl_name(name) in core_algos.ADV_ESTIMATOR_REGISTRY


def test_verl_refuses_an_estimator_that_needs_a_policy_signal():
    from .test_verl_launch import example

    assert "ctwa" not in VERL_ESTIMATORS
    with pytest.raises(ConfigError, match="mrgrpo_ctwa needs the policy signal measured after each update") as error:
        launch.prepare(example("algorithm.adv_estimator=mrgrpo_ctwa", "+algorithm.mrgrpo.options.cov_targets=0.05"))
    assert "\n" not in str(error.value)
