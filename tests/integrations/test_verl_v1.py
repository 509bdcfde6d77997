"""mrgrpo estimators on verl's v1 trainer: verl's own ``_compute_advantage`` on a real TransferQueue.

Rows are put into a real ``transfer_queue`` (local Ray, SimpleStorage) the way verl's v1 agent
loop writes them: key ``{uid}_{session_id}_{index}``, jagged ``responses`` / ``response_mask`` /
``rm_scores``, per-component scores in ``extra_fields["reward_extra_info"]`` (copied from the
session's final output to its earlier ones, as the agent loop does). The trainer is verl's
registered v1 class (``get_trainer_cls``), built without ``__init__`` (which starts GPU workers):
``_compute_advantage`` itself is verl's code, unchanged, reading and writing the queue.
"""

import uuid

import numpy as np
import pytest
import torch

tq = pytest.importorskip("transfer_queue", reason="transferqueue is not installed (verl's v1 trainer needs it)")
pytest.importorskip("verl.trainer.ppo.v1", reason="verl's v1 trainer is not importable")

import ray  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from transfer_queue import KVBatchMeta  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.v1 import get_trainer_cls, trainer_base  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402

import mrgrpo  # noqa: E402
import mrgrpo.integrations.verl as integration  # noqa: E402
from mrgrpo.errors import ConfigError, InputError  # noqa: E402
from mrgrpo.integrations.verl import v1  # noqa: E402
from mrgrpo.rewards import get_suite  # noqa: E402

#: The estimators the v1 trainer runs: every one (one with feedback from the policy update, ctwa,
#: computes a step's advantages from its incoming state; its update: test_ctwa_on_v1_... below).
VERL_ESTIMATORS = mrgrpo.available_estimators()

KEYS = ["correctness", "format", "length"]
WEIGHTS = [1.0, 0.5, 0.25]
VERL_EPS = 1e-6


@pytest.fixture(scope="module", autouse=True)
def queue():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, object_store_memory=96 * 2**20, log_to_driver=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield
    tq.close()
    if started:
        ray.shutdown()


def put_batch(seed, prompts=3, sessions=4, max_turns=1, max_len=7, padding=0, singleton=False, as_fields=False, empty_final=False):
    """Write one batch as verl's v1 agent loop does; returns (meta, rows) with rows[i] = dict of the
    row's uid, session key, components, score and response mask (in the batch's key order)."""
    g = torch.Generator().manual_seed(seed)
    partition = f"train-{uuid.uuid4().hex[:8]}"
    fields, keys, tags, rows = [], [], [], []
    groups = [(f"p_{seed}_{i}", sessions) for i in range(prompts)] + ([(f"solo_{seed}", 1)] if singleton else [])
    for uid, n in groups:
        for s in range(n):
            comps = {k: float(torch.randint(0, 5, (1,), generator=g)) / 4 for k in KEYS}
            if n == 1:
                comps = {k: 1.0 for k in KEYS}  # a group of one with a nonzero score
            score = sum(w * comps[k] for k, w in zip(KEYS, WEIGHTS))
            turns = int(torch.randint(1, max_turns + 1, (1,), generator=g))
            empty = empty_final and uid == groups[0][0] and s == 0  # final output without a model token
            turns = max(turns, 2) if empty else turns
            for t in range(turns):
                length = int(torch.randint(1, max_len + 1, (1,), generator=g))
                mask = (torch.rand(length, generator=g) > 0.3).long()
                mask[-1] = 0 if empty and t == turns - 1 else 1
                if empty and t == turns - 1:
                    mask[:] = 0
                rm = torch.zeros(length)
                rm[-1] = score
                field = {
                    "uid": uid,
                    "prompts": torch.zeros(3, dtype=torch.long),
                    "responses": torch.arange(length),
                    "response_mask": mask,
                    "rm_scores": rm,
                    "extra_fields": {"reward_extra_info": dict(comps), "turn": t},
                }
                if as_fields:
                    field.update(comps)
                    field["extra_fields"] = {}
                fields.append(field)
                keys.append(f"{uid}_{s}_{t}")
                tags.append({"status": "success", "seq_len": 3 + length})
                rows.append({"uid": uid, "session": f"{uid}_{s}", "turn": t, "comps": comps, "score": score, "mask": mask})
    if padding:  # verl's upsample_batch_to_divisible_size: copies of row 0, zero mask, own uid
        pad_uid = f"pad{uuid.uuid4().hex}"
        for i in range(padding):
            field = dict(fields[0], uid=pad_uid, response_mask=torch.zeros(1, dtype=torch.long), rm_scores=torch.zeros(1), responses=torch.zeros(1, dtype=torch.long))
            fields.append(field)
            keys.append(f"{pad_uid}_{i}_0")
            tags.append({"status": "success", "seq_len": 4, "is_padding": True})
            rows.append({"uid": pad_uid, "session": f"{pad_uid}_{i}", "turn": 0, "comps": None, "score": 0.0, "mask": torch.zeros(1, dtype=torch.long)})
    order = torch.randperm(len(keys), generator=g).tolist()  # _balance_batch reorders rows
    keys, fields, tags, rows = ([x[i] for i in order] for x in (keys, fields, tags, rows))
    tq.kv_batch_put(keys=keys, partition_id=partition, fields=list_of_dict_to_tensordict(fields), tags=tags)
    return KVBatchMeta(partition_id=partition, keys=keys, tags=tags), rows


def trainer(adv_estimator, mode="sync", rollout_n=4, **algorithm):
    cls = get_trainer_cls(mode)
    t = cls.__new__(cls)  # verl's __init__ starts GPU worker groups; _compute_advantage needs only config
    base = {"adv_estimator": adv_estimator, "use_kl_in_reward": False, "gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True}
    t.config = OmegaConf.create({"algorithm": {**base, **algorithm}, "actor_rollout_ref": {"rollout": {"n": rollout_n}}})
    return t


def advantages(meta, estimator, **algorithm):
    trainer(estimator, **algorithm)._compute_advantage(meta, metrics={})
    out = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["advantages", "returns"])
    return out["advantages"].to_padded_tensor(0.0), out["returns"].to_padded_tensor(0.0)


def expected(rows, estimator, weights=WEIGHTS, **options):
    """mrgrpo.compute_advantages on each session's final output, grouped by uid, broadcast."""
    final = {}
    for i, row in enumerate(rows):
        if row["comps"] is not None and (row["session"] not in final or rows[final[row["session"]]]["turn"] < row["turn"]):
            final[row["session"]] = i
    sessions = list(final)
    rewards = torch.tensor([[rows[final[s]]["comps"][k] for k in KEYS] for s in sessions], dtype=torch.float64)
    uids = [rows[final[s]]["uid"] for s in sessions]
    per_session = dict(zip(sessions, mrgrpo.compute_advantages(rewards, uids, estimator, weights=weights, **options).tolist()))
    width = max(len(r["mask"]) for r in rows)
    out = torch.zeros(len(rows), width, dtype=torch.float64)
    for i, row in enumerate(rows):
        out[i, : len(row["mask"])] = per_session.get(row["session"], 0.0) * row["mask"].double()
    return out


def options_for(estimator):
    """verl's eps where the estimator has one, plus its registered example options (and ranges)."""
    spec = mrgrpo.get_estimator(estimator)
    options = {"eps": VERL_EPS} if "eps" in spec.options else {}
    options.update(spec.example_options)
    if spec.needs_ranges:
        options["reward_ranges"] = [[0.0, 1.0]] * len(KEYS)
    return options


def weights_for(estimator):
    """The weights an estimator computes with: the configured ones with weight 1 on the
    components its roles name (a role's component enters through its role, e.g. a cost through
    its multiplier), or none (all ones) for one registered with ``uses_weights=False``, to which
    the adapter passes none."""
    spec = mrgrpo.get_estimator(estimator)
    if not spec.uses_weights:
        return None
    weights = list(WEIGHTS)
    for role in spec.roles:
        named = spec.example_options.get(role)
        for index in named if isinstance(named, list) else [] if named is None else [named]:
            weights[index] = 1.0
    return weights


# ---- the trainers ------------------------------------------------------------------------------


def test_every_v1_trainer_is_wrapped_and_verls_own_estimators_are_untouched():
    for name, cls in trainer_base.TRAINER_REGISTRY.items():
        assert issubclass(cls, v1.MrgrpoAdvantageMixin), name
        assert cls.__mro__[2] is cls._mrgrpo_base  # directly over verl's class
    before = dict(trainer_base.TRAINER_REGISTRY)
    v1.install()  # idempotent
    assert trainer_base.TRAINER_REGISTRY == before
    v1.uninstall()
    try:
        assert not any(issubclass(c, v1.MrgrpoAdvantageMixin) for c in trainer_base.TRAINER_REGISTRY.values())
    finally:
        assert integration.install_v1()
    assert get_trainer_cls("sync")._mrgrpo_base.__name__ == "PPOTrainerSync"


# ---- every estimator equals mrgrpo.compute_advantages on the same components and uids ----------


@pytest.mark.parametrize("estimator", VERL_ESTIMATORS)
def test_single_turn_batch_every_estimator(estimator):
    meta, rows = put_batch(seed=1, prompts=3, sessions=4)
    options = options_for(estimator)
    mrgrpo_block = {"components": KEYS, "weights": weights_for(estimator), "options": {k: v for k, v in options.items() if k != "eps"}}
    adv, returns = advantages(meta, f"mrgrpo_{estimator}", mrgrpo=mrgrpo_block)
    want = expected(rows, estimator, weights=weights_for(estimator), **options)
    torch.testing.assert_close(adv.double(), want, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(returns, adv)
    assert adv.abs().sum() > 0


@pytest.mark.parametrize("estimator", VERL_ESTIMATORS)
def test_multi_turn_batch_every_estimator_sessions_grouped_by_prompt(estimator):
    """Several sessions per prompt, 1-3 outputs per session, verl's padding rows, shuffled order:
    one row per session's final output, grouped by uid, broadcast to the session's outputs."""
    meta, rows = put_batch(seed=2, prompts=3, sessions=4, max_turns=3, padding=3)
    assert len(rows) > len({r["session"] for r in rows})  # some sessions have several outputs
    options = options_for(estimator)
    mrgrpo_block = {"components": KEYS, "weights": weights_for(estimator), "options": {k: v for k, v in options.items() if k != "eps"}}
    adv, _ = advantages(meta, f"mrgrpo_{estimator}", mrgrpo=mrgrpo_block)
    want = expected(rows, estimator, weights=weights_for(estimator), **options)
    torch.testing.assert_close(adv.double(), want, atol=1e-6, rtol=1e-5)
    # every output of a session carries the same advantage on its response tokens
    for session in {r["session"] for r in rows}:
        values = {round(float(adv[i, : len(r["mask"])][r["mask"].bool()][0]), 6) for i, r in enumerate(rows) if r["session"] == session and r["mask"].any()}
        assert len(values) <= 1
    padding = [i for i, r in enumerate(rows) if r["comps"] is None]
    assert padding and (adv[padding] == 0).all()


def test_components_written_as_fields_of_their_own():
    """A colocated reward model's reward_extra_info reaches the queue as fields, not extra_fields."""
    meta, rows = put_batch(seed=3, as_fields=True)
    adv, _ = advantages(meta, "mrgrpo_gdpo", mrgrpo={"components": KEYS, "weights": WEIGHTS})
    torch.testing.assert_close(adv.double(), expected(rows, "gdpo", eps=VERL_EPS), atol=1e-6, rtol=1e-5)


def test_suite_supplies_components_weights_and_ranges():
    meta, rows = put_batch(seed=4)
    suite = get_suite("math")
    assert list(suite.names) == KEYS
    adv, _ = advantages(meta, "mrgrpo_sa_mrpo", mrgrpo={"suite": "math", "options": {"gamma": 1.0}})
    want = expected(rows, "sa_mrpo", weights=list(suite.weights), reward_ranges=suite.reward_ranges, gamma=1.0, eps=VERL_EPS)
    torch.testing.assert_close(adv.double(), want, atol=1e-6, rtol=1e-5)


# ---- equal to verl's own estimators on the v1 path ---------------------------------------------


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("max_turns", [1, 3])
def test_mrgrpo_grpo_equals_verls_grpo_on_v1(norm, max_turns):
    """verl's grpo on v1 (its own multi-trajectory path) vs mrgrpo_grpo on the scalar score."""
    meta, rows = put_batch(seed=5 + max_turns, max_turns=max_turns, padding=2, empty_final=max_turns > 1)
    ours, _ = advantages(meta, "mrgrpo_grpo", norm_adv_by_std_in_grpo=norm)
    verls, _ = advantages(meta, "grpo", norm_adv_by_std_in_grpo=norm)
    torch.testing.assert_close(ours, verls, atol=1e-5, rtol=1e-5)
    assert ours.abs().sum() > 0


@pytest.mark.parametrize("singleton", [False, True])
def test_mrgrpo_gdpo_token_normalization_equals_verls_gdpo(singleton):
    """verl's compute_gdpo_outcome_advantage, handed the same components and uids as on the
    legacy trainer (on v1, verl's own gdpo never receives them), vs mrgrpo_gdpo through v1."""
    meta, rows = put_batch(seed=9, singleton=singleton)
    block = {"components": KEYS, "weights": WEIGHTS, "normalization": "token"}
    if singleton:
        block["singleton_groups"] = "score"
    ours, _ = advantages(meta, "mrgrpo_gdpo", mrgrpo=block)
    mask = torch.zeros_like(ours)
    for i, r in enumerate(rows):
        mask[i, : len(r["mask"])] = r["mask"].float()
    prompt_len = 3
    lengths = torch.tensor([len(r["mask"]) for r in rows])
    attention = torch.cat([torch.ones(len(rows), prompt_len), (torch.arange(mask.shape[1]) < lengths[:, None]).float()], 1).long()
    verls, _ = core_algos.compute_gdpo_outcome_advantage(
        token_level_rewards=torch.zeros_like(mask),
        response_mask=mask,
        index=np.array([r["uid"] for r in rows], dtype=object),
        config=OmegaConf.create({"gdpo_reward_keys": KEYS, "gdpo_reward_weights": WEIGHTS}),
        non_tensor_batch={k: np.array([r["comps"][k] for r in rows]) for k in KEYS},
        batch={"prompts": torch.zeros(len(rows), prompt_len), "attention_mask": attention},
    )
    torch.testing.assert_close(ours, verls, atol=1e-5, rtol=1e-5)
    if singleton:  # mrgrpo's default (a group of one gets 0) shifts the whitening of every row
        default, _ = advantages(meta, "mrgrpo_gdpo", mrgrpo={**block, "singleton_groups": "zero"})
        others = [i for i, r in enumerate(rows) if not r["uid"].startswith("solo")]
        assert not torch.allclose(default[others], verls[others], atol=1e-3)


# ---- errors ---------------------------------------------------------------------------------------


def test_missing_component_names_the_row_and_its_keys():
    meta, _ = put_batch(seed=10)
    with pytest.raises(InputError, match=r"'accuracy'.*reward_extra_info has \['correctness', 'format', 'length'\]"):
        advantages(meta, "mrgrpo_gdpo", mrgrpo={"components": ["accuracy"]})


def test_singleton_score_with_rollout_normalization_is_refused():
    meta, _ = put_batch(seed=11)
    with pytest.raises(ConfigError, match="normalization='token'"):
        advantages(meta, "mrgrpo_gdpo", mrgrpo={"components": KEYS, "singleton_groups": "score"})


def test_verls_own_gdpo_cannot_see_the_components_on_v1():
    """Why mrgrpo_gdpo (normalization: token) is the way to run GDPO on v1: v1's _compute_advantage
    fetches neither the components nor the prompts/attention_mask verl's gdpo reads."""
    meta, _ = put_batch(seed=12)
    with pytest.raises(KeyError, match="prompts"):
        advantages(meta, "gdpo", gdpo_reward_keys=KEYS)


@pytest.mark.parametrize("mode", ["sync", "colocate_async", "separate_async"])
def test_every_trainer_mode_hands_over_the_components(mode):
    meta, rows = put_batch(seed=13, max_turns=2)
    block = {"components": KEYS, "weights": WEIGHTS}
    trainer("mrgrpo_gdpo", mode=mode, mrgrpo=block)._compute_advantage(meta, metrics={})
    adv = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["advantages"])["advantages"]
    torch.testing.assert_close(adv.to_padded_tensor(0.0).double(), expected(rows, "gdpo", eps=VERL_EPS), atol=1e-6, rtol=1e-5)


# ---- stateful estimators and a user's own estimator on v1 --------------------------------------

from mrgrpo.integrations.verl.state import STATE, STATE_FILE  # noqa: E402

from .test_verl_estimators import STATEFUL, _trainer_config, fake_load, fake_save, same_state, write_user_module  # noqa: E402
from .test_verl_estimators import options_for as state_options  # noqa: E402
from .test_verl_estimators import weights_for as state_weights  # noqa: E402


@pytest.mark.parametrize("name,extra", STATEFUL, ids=[n for n, _ in STATEFUL])
def test_v1_trainer_carries_logs_saves_and_restores_the_state(name, extra, tmp_path, monkeypatch):
    STATE.reset()
    try:
        cls = get_trainer_cls("sync")
        assert issubclass(cls, v1.MrgrpoAdvantageMixin)
        base = cls.__dict__[v1._BASE_ATTR]
        monkeypatch.setattr(base, "_save_checkpoint", fake_save)
        monkeypatch.setattr(base, "_load_checkpoint", fake_load)
        trainer = cls.__new__(cls)
        trainer.config = _trainer_config(name, extra, tmp_path)
        trainer.config.actor_rollout_ref.rollout.n = 4
        trainer.config.algorithm.use_kl_in_reward = False
        trainer.global_steps = 0
        trainer._load_checkpoint()
        assert STATE.state is None
        options = {**state_options(name), **extra}
        state = None
        for step in (1, 2):
            meta, rows = put_batch(seed=10 + step, prompts=3, sessions=4)
            metrics = {}
            trainer._compute_advantage(meta, metrics)
            final = [r for r in rows if r["comps"] is not None]
            rewards = torch.tensor([[r["comps"][k] for k in KEYS] for r in final], dtype=torch.float64)
            extra_eps = {"eps": VERL_EPS} if "eps" in mrgrpo.get_estimator(name).options else {}  # verl's
            _, state = mrgrpo.compute_advantages_with_state(
                rewards, [r["uid"] for r in final], name, state_weights(name), state=state, **extra_eps, **options
            )
            assert same_state(STATE.state, state)
            assert {k: v for k, v in metrics.items() if k.startswith("mrgrpo/state/")} == STATE.metrics != {}
            trainer.global_steps = step
            trainer._save_checkpoint()
        assert (tmp_path / "ckpt" / "global_step_2" / STATE_FILE).is_file()
        STATE.reset()
        resumed = cls.__new__(cls)
        resumed.config = trainer.config
        resumed._load_checkpoint()
        assert resumed.global_steps == 2 and same_state(STATE.state, state)
    finally:
        STATE.reset()



def test_a_users_estimator_named_in_the_config_runs_on_the_v1_trainer(tmp_path, monkeypatch):
    module, estimator = write_user_module(tmp_path, monkeypatch)
    if True:
        meta, rows = put_batch(seed=21, prompts=3, sessions=4)
        mrgrpo_block = {"components": KEYS, "import": [module], "options": {"focus": "format"}}
        adv, _ = advantages(meta, f"mrgrpo_{estimator}", mrgrpo=mrgrpo_block)
        final = [r for r in rows if r["comps"] is not None]
        per = mrgrpo.compute_advantages(
            torch.tensor([[r["comps"]["format"]] for r in final], dtype=torch.float64), [r["uid"] for r in final], "dr_grpo"
        )
        width = max(len(r["mask"]) for r in rows)
        want = torch.zeros(len(rows), width, dtype=torch.float64)
        for i, (row, value) in enumerate(zip(rows, per.tolist())):
            want[i, : len(row["mask"])] = value * row["mask"].double()
        torch.testing.assert_close(adv.double(), want, atol=1e-6, rtol=1e-5)




class UpdatingWorkers:
    """verl's actor worker group as the v1 trainer calls it: ``update_actor`` (counted) and
    ``compute_log_prob``, which writes each row's log-probabilities of the whole sequence (3
    prompt tokens + its response, left-shifted by one as verl's model output is) into the queue's
    ``log_probs`` field: the updated policy's, here ``new[key]`` per response token."""

    def __init__(self, new):
        self.new, self.updates, self.calls = new, 0, []

    def update_actor(self, batch):
        self.updates += 1
        return {"metrics": {"mfu": [0.0], "pg_loss": [0.1]}}

    def compute_log_prob(self, batch):
        self.calls.append(dict(batch.extra_info))
        sequences = []
        for key in batch.keys:
            response = self.new[key]
            full = torch.zeros(3 + len(response))
            full[2: 2 + len(response)] = response  # response_from_nested takes [end - len - 1, end - 1)
            sequences.append(full)
        tq.kv_batch_put(keys=list(batch.keys), partition_id=batch.partition_id,
                        fields=TensorDict({"log_probs": torch.nested.as_nested_tensor(sequences, layout=torch.jagged)}, batch_size=len(batch.keys)))
        return batch


def ctwa_trainer(block, tmp_path, mode="sync"):
    cls = get_trainer_cls(mode)
    t = cls.__new__(cls)
    base = {"adv_estimator": "mrgrpo_ctwa", "use_kl_in_reward": False, "gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True, "mrgrpo": block}
    t.config = OmegaConf.create({
        "algorithm": base,
        "actor_rollout_ref": {
            "rollout": {"n": 4, "temperature": 1.0},
            "actor": {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "ppo_mini_batch_size": 4,
                      "ppo_epochs": 1, "data_loader_seed": 0, "shuffle": False, "calculate_entropy": False, "entropy_coeff": 0.0},
        },
        "trainer": {"default_local_dir": str(tmp_path / "ckpt"), "resume_mode": "auto", "resume_from_path": None, "critic_warmup": 0},
    })
    t.global_steps = 0
    return t


def session_signal_loop(rows, keys, advantages, old, new, low, high, w_agg):
    """The official completion weight of each session over all its outputs' response tokens,
    token by token: Σ Â·ρ·1[unclipped], divided as w_agg says (all tokens, unclipped + 1e-8, 1)."""
    total, tokens, unclipped_tokens = {}, {}, {}
    for i, (row, key) in enumerate(zip(rows, keys)):
        mask = row["mask"].tolist()
        a_row = advantages[i][: len(mask)].tolist()
        a = sum(x * m for x, m in zip(a_row, mask)) / max(sum(mask), 1)
        session = row["session"]
        total.setdefault(session, 0.0), tokens.setdefault(session, 0), unclipped_tokens.setdefault(session, 0)
        for t, m in enumerate(mask):
            if not m:
                continue
            ratio = np.exp(np.clip(float(new[key][t]) - float(old[key][t]), -20.0, 20.0))
            unclipped = ratio <= 1 + high if a >= 0 else ratio >= 1 - low
            total[session] += a * ratio * float(unclipped)
            tokens[session] += 1
            unclipped_tokens[session] += int(unclipped)
    if w_agg == "mean":
        return {s: (total[s] / tokens[s] if tokens[s] else 0.0) for s in total}
    if w_agg == "mean_unclipped":
        return {s: total[s] / (unclipped_tokens[s] + 1e-8) for s in total}
    return dict(total)


@pytest.mark.parametrize("mode,w_agg", [("sync", "mean"), ("separate_async", "sum")])
def test_ctwa_on_v1_moves_its_weights_after_the_update_per_session_and_resumes(mode, w_agg, tmp_path, monkeypatch):
    """Four v1 steps on multi-turn batches: each step's advantages use the incoming weights (the
    official loop oracle on the sessions' final outputs); after verl's _update_actor the updated
    actor's log-probs come from compute_log_prob (adapter on, no entropy), each session's signal
    is the mean over all its outputs' tokens, and the weights and EMA after every update equal the
    oracle's. The state is saved with verl's checkpoint after step 2 and a resumed trainer goes on
    from it."""
    from mrgrpo.estimators import reference

    STATE.reset()
    cls = get_trainer_cls(mode)
    base_cls = cls.__dict__[v1._BASE_ATTR]
    monkeypatch.setattr(base_cls, "_save_checkpoint", fake_save)
    monkeypatch.setattr(base_cls, "_load_checkpoint", fake_load)
    weights = [0.5, 0.3, 0.2]
    targets = [0.4, 0.3, 0.3] if w_agg == "mean" else [5.0, 4.0, 4.0]  # "sum" scales s by the tokens
    options = {"cov_targets": targets, "gate_by_obj_targets": False, "lr": 0.5, "w_agg": w_agg}
    block = {"components": KEYS, "weights": weights, "options": options}
    log_w, ema = list(np.log(np.array(weights) / sum(weights))), None
    g = torch.Generator().manual_seed(5)
    t = ctwa_trainer(block, tmp_path, mode)
    t._load_checkpoint()
    try:
        for step in range(1, 5):
            if step == 3:  # a new trainer process resumes from the step-2 checkpoint
                STATE.reset()
                t = ctwa_trainer(block, tmp_path, mode)
                t._load_checkpoint()
                assert t.global_steps == 2 and STATE.state["steps"] == 2
            meta, rows = put_batch(seed=40 + step, prompts=3, sessions=4, max_turns=3)
            old = {k: -torch.rand(len(r["mask"]), generator=g) * 3 for k, r in zip(meta.keys, rows)}
            new = {k: old[k] + torch.randn(len(r["mask"]), generator=g) * 0.3 for k, r in zip(meta.keys, rows)}
            tq.kv_batch_put(keys=list(meta.keys), partition_id=meta.partition_id, fields=TensorDict(
                {"old_log_probs": torch.nested.as_nested_tensor([old[k] for k in meta.keys], layout=torch.jagged)}, batch_size=len(meta.keys)))
            metrics = {}
            t._compute_advantage(meta, metrics)
            final = {}
            for i, row in enumerate(rows):
                if row["session"] not in final or rows[final[row["session"]]]["turn"] < row["turn"]:
                    final[row["session"]] = i
            sessions = sorted(final)
            rewards = np.array([[rows[final[s]]["comps"][k] for k in KEYS] for s in sessions])
            uids = [rows[final[s]]["uid"] for s in sessions]
            want = dict(zip(sessions, reference.ctwa_advantages(rewards, uids, np.exp(log_w))))
            adv = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["advantages"])["advantages"].to_padded_tensor(0.0).double()
            for i, row in enumerate(rows):
                torch.testing.assert_close(adv[i, : len(row["mask"])], want[row["session"]] * row["mask"].double(), atol=1e-5, rtol=1e-5)
            t.actor_rollout_wg = UpdatingWorkers(new)
            t._update_actor(meta, metrics)
            assert t.actor_rollout_wg.updates == 1 and len(t.actor_rollout_wg.calls) == 1
            call = t.actor_rollout_wg.calls[0]
            assert call["calculate_entropy"] is False and call["no_lora_adapter"] is False and call["compute_loss"] is False
            assert meta.extra_info["calculate_entropy"] is False and "no_lora_adapter" not in meta.extra_info  # put back
            per_session = session_signal_loop(rows, list(meta.keys), adv, old, new, 0.2, 0.28, w_agg)
            log_w, ema = reference.ctwa_update(log_w, ema, rewards, uids, np.array([per_session[s] for s in sessions]), **options)
            state = STATE.get("ctwa")
            np.testing.assert_allclose(state["log_weights"], log_w, rtol=0, atol=1e-6)
            np.testing.assert_allclose(state["ema"], ema, rtol=0, atol=1e-6)
            assert state["signal"] == "policy" and state["steps"] == step
            assert metrics["mrgrpo/state/steps"] == step and "actor/pg_loss" in metrics
            t.global_steps = step
            t._save_checkpoint()
        assert np.max(np.abs(np.array(log_w) - np.log(np.array(weights) / sum(weights)))) > 1e-3  # the weights moved
    finally:
        STATE.reset()
