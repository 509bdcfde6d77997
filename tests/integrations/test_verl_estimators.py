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

#: Every estimator runs on the legacy trainer; one with feedback from the policy update (ctwa)
#: moves its state after verl's actor update (test_ctwa_on_the_legacy_trainer_...), not at
#: compute_advantage, so the state tests below take the others.
VERL_ESTIMATORS = list(mrgrpo.available_estimators())
FEEDBACK = [n for n in VERL_ESTIMATORS if mrgrpo.get_estimator(n).feedback is not None]


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
        if spec.stateful and spec.feedback is None:
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


@pytest.mark.parametrize("name", FEEDBACK)
@pytest.mark.parametrize("use_v1", ["true", "false"])
def test_the_launcher_prepares_an_estimator_with_feedback_on_either_trainer(name, use_v1):
    """Its feedback runs after the actor update on the legacy trainer (the _update_actor wrap)
    and on v1 (the trainer subclass: test_verl_v1.test_ctwa_on_v1_...)."""
    from .test_verl_launch import example

    config = launch.prepare(example(f"algorithm.adv_estimator=mrgrpo_{name}", f"trainer.use_v1={use_v1}"))
    assert config.algorithm.adv_estimator == f"mrgrpo_{name}"


class LegacyTrainer:
    """What the feedback wrap uses of verl's legacy ``RayPPOTrainer``: its config and
    ``_compute_old_log_prob`` (here: the "updated actor's" log-probabilities chosen by the test,
    as verl returns them: a DataProto whose ``old_log_probs`` are the current actor's)."""

    def __init__(self, clip_low, clip_high, new_log_probs):
        self.config = OmegaConf.create({"actor_rollout_ref": {"actor": {
            "clip_ratio": 0.2, "clip_ratio_low": clip_low, "clip_ratio_high": clip_high}}})
        self.new_log_probs = new_log_probs
        self.updates = 0

    def _compute_old_log_prob(self, batch):
        from verl import DataProto

        return DataProto.from_dict(tensors={"old_log_probs": self.new_log_probs}), 0.0


@pytest.mark.parametrize("options", [
    {"cov_targets": [0.4, 0.3, 0.3], "gate_by_obj_targets": False, "lr": 0.5},
    {"cov_targets": 0.9, "use_corr_target": True, "gate_by_obj_targets": False, "base": "grpo", "lr": 0.2, "ema_tau": 0.5,
     "w_agg": "mean_unclipped"},
])
def test_ctwa_on_the_legacy_trainer_moves_its_weights_after_the_update_as_the_official_code(options):
    """Four training steps: compute_advantage (the incoming weights), then verl's _update_actor
    (wrapped: the updated actor's log-probabilities, the signal, the feedback). Each step's
    advantages and the weights after each update equal the loop oracle of the official code
    (mrgrpo.estimators.reference) fed the official signal computed row by row."""
    from mrgrpo.estimators import reference

    assert hasattr(ray_trainer.RayPPOTrainer._update_actor, patch.ORIGINAL_ATTR)  # (installed by the import)
    update = patch.wrap_update_actor(lambda self, batch: setattr(self, "updates", self.updates + 1) or "metrics")
    weights = [0.5, 0.3, 0.2]
    cfg = algo(adv_estimator="mrgrpo_ctwa", mrgrpo={"components": KEYS, "weights": weights, "options": options})
    log_w = list(np.log(np.array(weights) / sum(weights)))
    ema = None
    g = torch.Generator().manual_seed(3)
    moved = False
    for step in range(4):
        data = make_batch(10 + step)
        out = ray_trainer.compute_advantage(data, adv_estimator=cfg.adv_estimator, config=cfg)
        rewards = np.stack([data.non_tensor_batch[k] for k in KEYS], 1)
        uids = list(data.non_tensor_batch["uid"])
        want = reference.ctwa_advantages(rewards, uids, np.exp(log_w), options.get("base", "reinforce_pp"))
        mask = data.batch["response_mask"]
        got = (out.batch["advantages"].double() * mask).sum(1) / mask.sum(1)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
        old = -torch.rand(mask.shape, generator=g, dtype=torch.float64) * 3
        new = old + torch.randn(mask.shape, generator=g, dtype=torch.float64) * 0.3  # some tokens clipped
        data.batch["old_log_probs"] = old.float()
        trainer = LegacyTrainer(0.2, 0.28, new.float())
        assert update(trainer, data) == "metrics" and trainer.updates == 1
        s = reference.ctwa_signal(data.batch["advantages"].double(), old.float().double(), new.float().double(), mask.double(),
                                  0.2, 0.28, options.get("w_agg", "mean"))
        update_options = {k: v for k, v in options.items() if k != "base"}
        log_w, ema = reference.ctwa_update(log_w, ema, rewards, uids, s, **update_options)
        state = STATE.get("ctwa")
        np.testing.assert_allclose(state["log_weights"], log_w, rtol=0, atol=1e-6)
        np.testing.assert_allclose(state["ema"], ema, rtol=0, atol=1e-6)
        assert state["signal"] == "policy" and state["steps"] == step + 1
        assert out.meta_info[patch.estimator_state.METRICS_KEY]["mrgrpo/state/steps"] == step + 1  # logged with the step
        moved |= bool(np.any(np.abs(np.array(log_w) - np.log(np.array(weights) / sum(weights))) > 1e-3))
    assert moved, "the options must let the weights move, or the test cannot fail"


def test_without_an_actor_update_ctwa_keeps_its_weights():
    """A step with no actor update (verl's critic_warmup) measures no signal: the state stays."""
    options = {"cov_targets": 0.5, "gate_by_obj_targets": False, "lr": 1.0}
    cfg = algo(adv_estimator="mrgrpo_ctwa", mrgrpo={"components": KEYS, "weights": [0.5, 0.3, 0.2], "options": options})
    first = ray_trainer.compute_advantage(make_batch(1), adv_estimator=cfg.adv_estimator, config=cfg)
    second = ray_trainer.compute_advantage(make_batch(1), adv_estimator=cfg.adv_estimator, config=cfg)
    torch.testing.assert_close(first.batch["advantages"], second.batch["advantages"])
    assert STATE.get("ctwa") is None


def test_ctwa_on_the_legacy_trainer_resumes_with_the_weights_its_updates_reached(tmp_path, legacy_checkpoints):
    """Two steps with their updates, verl's checkpoint (mrgrpo writes the state beside it), a new
    trainer process resuming: the state is the one after the second update, and the third step's
    advantages use its weights (not the initial ones)."""
    from mrgrpo.estimators import reference

    options = {"cov_targets": [0.4, 0.3, 0.3], "gate_by_obj_targets": False, "lr": 0.5}
    config = _trainer_config("ctwa", {}, tmp_path)
    config.algorithm.mrgrpo.options = options
    config.algorithm.mrgrpo.weights = [0.5, 0.3, 0.2]
    config.actor_rollout_ref.actor = {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28}
    trainer = legacy_checkpoints.__new__(legacy_checkpoints)
    trainer.config = config
    trainer.global_steps = 0
    trainer._load_checkpoint()
    update = patch.wrap_update_actor(lambda self, batch: None)
    g = torch.Generator().manual_seed(4)
    for step in (1, 2):
        data = make_batch(20 + step)
        ray_trainer.compute_advantage(data, adv_estimator=config.algorithm.adv_estimator, config=config.algorithm)
        old = -torch.rand(data.batch["response_mask"].shape, generator=g) * 3
        data.batch["old_log_probs"] = old
        trainer._compute_old_log_prob = lambda batch, new=old + torch.randn(old.shape, generator=g) * 0.3: (
            __import__("verl").DataProto.from_dict(tensors={"old_log_probs": new}), 0.0)
        update(trainer, data)
        trainer.global_steps = step
        trainer._save_checkpoint()
    reached = json.loads(json.dumps(STATE.get("ctwa")))
    assert reached["steps"] == 2 and reached["signal"] == "policy"
    STATE.reset()
    resumed = legacy_checkpoints.__new__(legacy_checkpoints)
    resumed.config = config
    resumed._load_checkpoint()
    assert resumed.global_steps == 2 and STATE.get("ctwa") == reached
    data = make_batch(23)
    out = ray_trainer.compute_advantage(data, adv_estimator=config.algorithm.adv_estimator, config=config.algorithm)
    rewards = np.stack([data.non_tensor_batch[k] for k in KEYS], 1)
    want = reference.ctwa_advantages(rewards, list(data.non_tensor_batch["uid"]), np.exp(reached["log_weights"]))
    mask = data.batch["response_mask"]
    np.testing.assert_allclose(((out.batch["advantages"].double() * mask).sum(1) / mask.sum(1)).numpy(), want, rtol=1e-5, atol=1e-5)
    first = reference.ctwa_advantages(rewards, list(data.non_tensor_batch["uid"]), np.array([0.5, 0.3, 0.2]))
    assert not np.allclose(want, first, atol=1e-3)  # (the weights did move: the test can fail)
