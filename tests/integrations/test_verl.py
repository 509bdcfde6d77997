"""mrgrpo estimators inside verl 0.9.x, checked against verl's own estimators and trainer path."""

import importlib
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip(
    "verl.trainer.ppo.ray_trainer", reason="verl is not installed (optional extra mrgrpo[verl]; see examples/verl/README.md)"
)

from omegaconf import OmegaConf  # noqa: E402  (verl brings omegaconf)
from verl import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos, ray_trainer  # noqa: E402

import mrgrpo  # noqa: E402
import mrgrpo.integrations.verl as integration  # noqa: E402
from mrgrpo.errors import ConfigError, InputError  # noqa: E402
from mrgrpo.rewards import get_suite  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "verl" / "mrgrpo_math.yaml"
KEYS = ["correctness", "format", "length"]


def make_batch(seed=0, groups=4, group_size=5, prompt_len=3, resp_len=9, components=KEYS):
    """A DataProto as verl's trainer builds it: right-padded responses, the outcome reward on the
    last valid token, uid per prompt (shuffled, non-contiguous), per-component scores as numpy
    columns in non_tensor_batch (from reward_extra_info)."""
    g = torch.Generator().manual_seed(seed)
    n = groups * group_size
    lengths = torch.randint(1, resp_len + 1, (n,), generator=g)
    response_mask = (torch.arange(resp_len)[None, :] < lengths[:, None]).float()
    attention_mask = torch.cat([torch.ones(n, prompt_len), response_mask], dim=1).long()
    comps = {k: torch.rand(n, generator=g).round(decimals=1).numpy().astype(np.float64) for k in components}
    comps[components[0]] = (torch.rand(n, generator=g) > 0.5).double().numpy()  # a binary one
    score = sum(comps.values())
    token_level = torch.zeros(n, resp_len)
    token_level[torch.arange(n), lengths - 1] = torch.as_tensor(score, dtype=torch.float32)
    perm = torch.randperm(n, generator=g).numpy()
    uid = np.array([f"uid-{i // group_size}" for i in perm], dtype=object)
    tensors = {
        "prompts": torch.zeros(n, prompt_len, dtype=torch.long),
        "responses": torch.zeros(n, resp_len, dtype=torch.long),
        "attention_mask": attention_mask,
        "response_mask": response_mask,
        "token_level_rewards": token_level,
    }
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uid, **comps})


def algo(**kw):
    base = {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True, "gamma": 1.0, "lam": 1.0}
    return OmegaConf.create({**base, **kw})


def run(data, estimator, config, compute=None):
    compute = compute or ray_trainer.compute_advantage
    out = compute(
        data,
        adv_estimator=estimator,
        norm_adv_by_std_in_grpo=config.get("norm_adv_by_std_in_grpo", True),
        config=config,
    )
    return out.batch["advantages"].clone()


# ---- registry ---------------------------------------------------------------------------------


def test_every_estimator_resolves_in_verl_registry():
    for name in mrgrpo.available_estimators():
        fn = core_algos.get_adv_estimator_fn(f"mrgrpo_{name}")
        assert callable(fn)
    assert core_algos.get_adv_estimator_fn("mrgrpo_corr_grpo")
    assert core_algos.get_adv_estimator_fn("grpo") is core_algos.compute_grpo_outcome_advantage  # verl's untouched


def test_reimport_is_idempotent_and_wraps_once():
    before = dict(core_algos.ADV_ESTIMATOR_REGISTRY)
    wrapper = ray_trainer.compute_advantage
    importlib.reload(integration)
    assert core_algos.ADV_ESTIMATOR_REGISTRY.keys() == before.keys()
    assert ray_trainer.compute_advantage is wrapper
    original = wrapper._mrgrpo_original
    assert not hasattr(original, "_mrgrpo_original")  # not a wrapper of a wrapper


def test_register_all_picks_up_estimators_registered_later():
    from mrgrpo.estimators import registry

    @mrgrpo.register_estimator("zz_test_mean")
    def zz_test_mean(rewards, groups, weights):
        return torch.nan_to_num(rewards) @ weights - 1.0

    try:
        assert "mrgrpo_zz_test_mean" in integration.register_all()
        data = make_batch()
        adv = run(data, "mrgrpo_zz_test_mean", algo(mrgrpo={"components": KEYS}))
        expected = torch.as_tensor(np.stack([data.non_tensor_batch[k] for k in KEYS], 1).sum(1) - 1.0).float()
        torch.testing.assert_close(adv, expected[:, None] * data.batch["response_mask"])
    finally:
        registry._REGISTRY.pop("zz_test_mean", None)
        core_algos.ADV_ESTIMATOR_REGISTRY.pop("mrgrpo_zz_test_mean", None)


def test_taken_name_raises_like_verl():
    saved = core_algos.ADV_ESTIMATOR_REGISTRY["mrgrpo_grpo"]
    core_algos.ADV_ESTIMATOR_REGISTRY["mrgrpo_grpo"] = lambda **kw: None
    try:
        with pytest.raises(ValueError, match="already been registered"):
            integration.register_all()
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY["mrgrpo_grpo"] = saved


# ---- equality with verl's own estimators -----------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("norm", [True, False])
def test_mrgrpo_grpo_equals_verl_grpo(seed, norm):
    data = make_batch(seed)
    kw = dict(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        norm_adv_by_std_in_grpo=norm,
    )
    verl_adv, _ = core_algos.compute_grpo_outcome_advantage(**kw)
    ours, returns = core_algos.get_adv_estimator_fn("mrgrpo_grpo")(**kw, config=algo(norm_adv_by_std_in_grpo=norm))
    torch.testing.assert_close(ours, verl_adv, atol=1e-5, rtol=1e-5)
    assert ours is returns or torch.equal(ours, returns)
    # and through the trainer's compute_advantage with the scalar fallback (no components: K = 1)
    cfg = algo(norm_adv_by_std_in_grpo=norm)
    torch.testing.assert_close(run(make_batch(seed), "mrgrpo_grpo", cfg), run(make_batch(seed), "grpo", cfg), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mrgrpo_gdpo_with_token_whitening_equals_verl_gdpo(seed):
    weights = [1.0, 0.5, 0.25]
    cfg = algo(
        gdpo_reward_keys=KEYS,
        gdpo_reward_weights=weights,
        mrgrpo={"components": KEYS, "weights": weights, "normalization": "token"},
    )
    verl_adv = run(make_batch(seed), "gdpo", cfg)
    ours = run(make_batch(seed), "mrgrpo_gdpo", cfg)
    torch.testing.assert_close(ours, verl_adv, atol=1e-5, rtol=1e-5)
    # verl's gdpo_reward_keys / weights alone are enough (fallbacks of algorithm.mrgrpo)
    fallback = algo(gdpo_reward_keys=KEYS, gdpo_reward_weights=weights, mrgrpo={"normalization": "token"})
    torch.testing.assert_close(run(make_batch(seed), "mrgrpo_gdpo", fallback), verl_adv, atol=1e-5, rtol=1e-5)


def test_default_gdpo_normalizes_per_rollout_not_per_token():
    data = make_batch(3)
    cfg = algo(gdpo_reward_keys=KEYS, mrgrpo={"components": KEYS})
    ours = run(make_batch(3), "mrgrpo_gdpo", cfg)
    verl_adv = run(make_batch(3), "gdpo", cfg)
    assert not torch.allclose(ours, verl_adv, atol=1e-3)  # lengths differ: the conventions differ
    rewards = np.stack([data.non_tensor_batch[k] for k in KEYS], 1)
    expected = mrgrpo.compute_advantages(rewards, list(data.non_tensor_batch["uid"]), "gdpo", eps=1e-6)
    mask = data.batch["response_mask"]
    torch.testing.assert_close(ours, expected.float()[:, None] * mask)
    per_rollout = ours.sum(1) / mask.sum(1)
    assert abs(per_rollout.mean().item()) < 1e-5  # zero mean over rollouts, not over tokens


@pytest.mark.parametrize("norm", [True, False])
def test_singleton_groups_score_reproduces_verls_value_for_a_group_of_one(norm):
    data = make_batch(8)
    uid = data.non_tensor_batch["uid"].copy()
    uid[0], uid[1] = "solo-a", "solo-b"  # two groups of one
    data.non_tensor_batch["uid"] = uid
    cfg = algo(norm_adv_by_std_in_grpo=norm)
    verl_adv = run(data, "grpo", cfg)
    assert verl_adv[0].abs().sum() > 0  # verl: the raw score (/(1 + eps) with std scaling)
    ours = run(data, "mrgrpo_grpo", algo(norm_adv_by_std_in_grpo=norm, mrgrpo={"singleton_groups": "score"}))
    torch.testing.assert_close(ours, verl_adv, atol=1e-5, rtol=1e-5)
    default = run(data, "mrgrpo_grpo", cfg)
    assert (default[:2] == 0).all()  # mrgrpo's convention: no peer, no signal
    torch.testing.assert_close(default[2:], verl_adv[2:], atol=1e-5, rtol=1e-5)
    with pytest.raises(ConfigError, match="singleton_groups must be one of"):
        run(data, "mrgrpo_grpo", algo(mrgrpo={"singleton_groups": "raw"}))


# ---- the trainer's call path -------------------------------------------------------------------


@pytest.mark.parametrize("estimator", ["corr_grpo", "sa_mrpo", "grpo", "dr_grpo"])
def test_trainer_compute_advantage_end_to_end(estimator):
    weights = [1.0, 0.5, 0.5]
    options = {"reward_ranges": [[0, 3]] * 3, "gamma": 1.0} if estimator == "sa_mrpo" else {}
    cfg = algo(adv_estimator=f"mrgrpo_{estimator}", mrgrpo={"components": KEYS, "weights": weights, "options": options})
    data = make_batch(5)
    rewards = np.stack([data.non_tensor_batch[k] for k in KEYS], 1)
    uid = list(data.non_tensor_batch["uid"])
    defaults = mrgrpo.get_estimator(estimator).options
    extra = {"eps": 1e-6} if "eps" in defaults else {}
    expected = mrgrpo.compute_advantages(rewards, uid, estimator, weights=weights, **extra, **options)
    expected = expected.float()[:, None] * data.batch["response_mask"]
    out = ray_trainer.compute_advantage(data, adv_estimator=cfg.adv_estimator, config=cfg)
    torch.testing.assert_close(out.batch["advantages"], expected)
    torch.testing.assert_close(out.batch["returns"], expected)
    assert (out.batch["advantages"][data.batch["response_mask"] == 0] == 0).all()


def test_aliases_imported_by_name_are_wrapped():
    """Modules that did ``from ray_trainer import compute_advantage`` before or after install."""
    import sys
    import types

    integration.uninstall()
    original = ray_trainer.compute_advantage
    early = types.ModuleType("early_importer")
    early.compute_advantage = original
    sys.modules["early_importer"] = early
    try:
        integration.install()
        assert early.compute_advantage is ray_trainer.compute_advantage is not original
        assert ray_trainer.compute_advantage._mrgrpo_original is original
        late = types.ModuleType("late_importer")
        exec("from verl.trainer.ppo.ray_trainer import compute_advantage", late.__dict__)
        assert late.compute_advantage is ray_trainer.compute_advantage
    finally:
        sys.modules.pop("early_importer")
        integration.install()
    try:  # verl's v1 trainer imports it by name (needs the transfer_queue package)
        from verl.trainer.ppo.v1 import utils as v1_utils
    except ImportError:
        return
    assert v1_utils.compute_advantage is ray_trainer.compute_advantage


def test_sa_mrpo_ranges_come_from_the_suite():
    data = make_batch(6)
    for k in KEYS:  # the math suite's components live in [0, 1]
        data.non_tensor_batch[k] = np.clip(data.non_tensor_batch[k], 0, 1)
    cfg = algo(mrgrpo={"suite": "math"})
    out = run(data, "mrgrpo_sa_mrpo", cfg)
    suite = get_suite("math")
    rewards = np.stack([data.non_tensor_batch[k] for k in suite.names], 1)
    expected = mrgrpo.compute_advantages(
        rewards, list(data.non_tensor_batch["uid"]), "sa_mrpo", weights=list(suite.weights),
        reward_ranges=suite.reward_ranges, eps=1e-6,
    )
    torch.testing.assert_close(out, expected.float()[:, None] * data.batch["response_mask"])


def test_none_scores_are_unscored_components():
    data = make_batch(7)
    col = data.non_tensor_batch["format"].astype(object)
    col[0] = None
    data.non_tensor_batch["format"] = col
    out = run(data, "mrgrpo_gdpo", algo(mrgrpo={"components": KEYS}))
    assert torch.isfinite(out).all()


def test_clear_errors():
    data = make_batch()
    with pytest.raises(InputError, match=r"'accuracy'.*available non_tensor_batch keys: \['correctness', 'format', 'length', 'uid'\]"):
        run(data, "mrgrpo_gdpo", algo(mrgrpo={"components": ["accuracy"]}))
    with pytest.raises(ValueError, match="unknown key"):
        run(make_batch(), "mrgrpo_gdpo", algo(mrgrpo={"component": KEYS}))
    with pytest.raises(ValueError, match="has no option"):
        run(make_batch(), "mrgrpo_gdpo", algo(mrgrpo={"options": {"gama": 1}}))
    with pytest.raises(ValueError, match="does not have"):
        run(make_batch(), "mrgrpo_corr_grpo", algo(mrgrpo={"normalization": "token", "components": KEYS}))
    with pytest.raises(ValueError, match="3 entries for 2"):
        run(make_batch(), "mrgrpo_gdpo", algo(mrgrpo={"components": KEYS[:2], "weights": [1, 1, 1]}))
    # verl's unwrapped path (wrapper not imported in the trainer process): a clear hint
    original = ray_trainer.compute_advantage._mrgrpo_original
    with pytest.raises(ValueError, match="VERL_USE_EXTERNAL_MODULES"):
        run(make_batch(), "mrgrpo_gdpo", algo(mrgrpo={"components": KEYS}), original)


# ---- the example config --------------------------------------------------------------------------


def test_example_config_loads_and_fits_verls_schema():
    cfg = OmegaConf.load(EXAMPLE)
    assert cfg.algorithm.adv_estimator in integration.register_all()
    settings = integration.MrgrpoVerlConfig.from_algorithm_config(cfg.algorithm)
    assert settings.suite == cfg.reward.custom_reward_function.reward_kwargs.suite
    assert settings.suite_options == dict(cfg.reward.custom_reward_function.reward_kwargs.suite_options)
    assert "use_v1" not in cfg.trainer  # verl's default trainer (v1)
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES == "mrgrpo.integrations.verl"
    # every key the example sets exists in verl's full default config, except our own additions
    import verl

    full = OmegaConf.load(Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml")
    ours = {"algorithm.mrgrpo", "reward.custom_reward_function.reward_kwargs", "ray_kwargs.ray_init.runtime_env.env_vars"}

    def walk(node, reference, prefix):
        for key in node:
            path = f"{prefix}{key}"
            if path in ours or path in {"hydra", "defaults"}:
                continue
            assert key in reference, f"{path} is not a verl config key"
            if OmegaConf.is_dict(node[key]) and OmegaConf.is_dict(reference[key]):
                walk(node[key], reference[key], path + ".")

    walk(OmegaConf.to_container(cfg, resolve=False), OmegaConf.to_container(full, resolve=False), "")
    # the estimator and its settings run on a batch carrying the suite's components
    data = make_batch(components=get_suite("math").names)
    out = run(data, cfg.algorithm.adv_estimator, OmegaConf.merge(algo(), cfg.algorithm))
    assert torch.isfinite(out).all() and out.abs().sum() > 0


def test_docs_name_every_algorithm_mrgrpo_setting():
    import dataclasses
    import re

    from mrgrpo.integrations.verl.config import KEYS

    fields = {KEYS.get(f.name, f.name) for f in dataclasses.fields(integration.MrgrpoVerlConfig)}  # config keys
    readme = (EXAMPLE.parents[2] / "README.md").read_text()
    listed = re.search(r"`algorithm\.mrgrpo` \(([^)]*)\)", readme).group(1)
    assert set(re.findall(r"`(\w+)`", listed)) == fields
    assert set(OmegaConf.load(EXAMPLE).algorithm.mrgrpo) == fields  # the example shows them all


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"weights": [1, "heavy"]}, r"^algorithm\.mrgrpo\.weights\.1: input should be a valid number.*, got 'heavy'$"),
        ({"eps": "small"}, r"^algorithm\.mrgrpo\.eps: input should be a valid number.*, got 'small'$"),
        ({"suite": 3}, r"^algorithm\.mrgrpo\.suite: input should be a valid string, got 3$"),
        ({"components": ["a", 1]}, r"^algorithm\.mrgrpo\.components must be a non-empty list of key names"),
    ],
)
def test_a_setting_of_the_wrong_type_is_one_config_error_line(block, message):
    # the settings are typed (a pydantic dataclass): a wrong type is refused with the key's name
    with pytest.raises(ConfigError, match=message) as caught:
        integration.MrgrpoVerlConfig.from_algorithm_config(OmegaConf.create({"mrgrpo": block}))
    assert "\n" not in str(caught.value)


def test_settings_are_read_as_typed_values_from_omegaconf():
    settings = integration.MrgrpoVerlConfig.from_algorithm_config(
        OmegaConf.create({"mrgrpo": {"components": ["a", "b"], "weights": [1, 2], "import": "mine", "options": None}})
    )
    assert settings.components == ("a", "b") and settings.weights == (1.0, 2.0)
    assert all(isinstance(w, float) for w in settings.weights)
    assert settings.imports == ("mine",) and settings.options == {}
