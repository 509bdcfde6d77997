"""The feedback protocol on TRL: MultiRewardGRPOTrainer measures ctwa's policy signal after the
update and moves its state; checked over several steps against an independent recomputation
(a hand-written forward pass, a per-token loop for the signal, the loop oracle of the update),
against the on-policy limit where the policy does not move, and across resume (mrgrpo train)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import TrainerCallback

from mrgrpo.estimators import reference
from mrgrpo.estimators.registry import compute_advantages_with_state
from mrgrpo.tasks import task_rows
from mrgrpo.train import MultiRewardGRPOTrainer
from mrgrpo.train.config import TaskConfig
from mrgrpo.train.presets import load_model

from .conftest import tiny_grpo_config
from .test_parity import ScriptedReward

N = 8  # rollouts per step: 2 prompts x 4 generations
OPTIONS = {"cov_targets": [0.5, 0.4, 0.3], "gate_by_obj_targets": False, "lr": 0.5, "ema_tau": 0.5}
WEIGHTS = [0.5, 0.3, 0.2]


def _logps(model, pending, temperature):
    """Per-token log-probabilities of the completion tokens, by hand (one plain forward)."""
    with torch.no_grad():
        logits = model(input_ids=pending["input_ids"], attention_mask=pending["attention_mask"]).logits.double()
    k = pending["logits_to_keep"]
    logits = logits[:, -k - 1:-1, :] / temperature
    tokens = pending["input_ids"][:, -k:]
    return torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


class Recording(MultiRewardGRPOTrainer):
    """Records each training batch's rewards, advantages and, independently, the sampling
    policy's log-probabilities (right after generation) and the updated policy's (after the
    optimizer step, before the trainer's own feedback runs)."""

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            pending = self._pending_feedback
            self.record.append({
                "rewards": self.last_rewards.double().numpy().copy(),
                "advantages": pending["advantages"].double().numpy().copy(),
                "mask": pending["mask"].bool().numpy().copy(),
                "old": _logps(self.model, pending, self.temperature).numpy(),
                "state_before": self.estimator_state,
            })
        return output


class MeasureAfterUpdate(TrainerCallback):
    def __init__(self):
        self.trainer = None

    def on_step_end(self, args, state, control, **kwargs):
        trainer = self.trainer
        if trainer._pending_feedback is not None:  # (this callback runs before the trainer's own)
            trainer.record[-1]["new"] = _logps(trainer.model, trainer._pending_feedback, trainer.temperature).numpy()
        return control


def _train(tmp_path, steps, learning_rate, epsilon, options=OPTIONS):
    loaded = load_model("tiny")
    measure = MeasureAfterUpdate()
    args = tiny_grpo_config(
        tmp_path, max_steps=steps, per_device_train_batch_size=N, num_generations=4, reward_weights=WEIGHTS,
        learning_rate=learning_rate, epsilon=epsilon,
    )
    trainer = Recording(
        model=loaded.model, reward_funcs=[ScriptedReward(i) for i in range(3)], args=args,
        train_dataset=task_rows(TaskConfig(size=8, eval_size=1), "train", chat=True),
        processing_class=loaded.tokenizer, estimator="ctwa", estimator_options=options, callbacks=[measure],
    )
    measure.trainer = trainer
    trainer.record = []
    trainer.train()
    return trainer


@pytest.mark.parametrize("w_agg", ["mean", "sum"])
def test_policy_signal_and_state_over_several_steps_match_an_independent_recomputation(tmp_path, w_agg):
    """The signal token by token as the official compute_ctwa_stats (w_agg "mean", the official
    config's, and "sum"), from log-probabilities measured by hand, then the loop oracle's update."""
    options = {**OPTIONS, "w_agg": w_agg}
    trainer = _train(tmp_path, steps=3, learning_rate=5e-3, epsilon=0.02, options=options)
    ids = list(np.arange(N) // 4)
    log_w = list(np.log(np.asarray(WEIGHTS) / sum(WEIGHTS)))
    ema = None
    clipped = 0
    assert len(trainer.record) == 3
    for step, rec in enumerate(trainer.record):
        # the step's advantages come from the weights before its own update
        expected_adv = reference.ctwa_advantages(rec["rewards"], ids, np.exp(log_w))
        np.testing.assert_allclose(rec["advantages"], expected_adv, rtol=0, atol=1e-5)
        token_advantages = rec["advantages"][:, None] * np.ones(rec["mask"].shape)
        signal = reference.ctwa_signal(token_advantages, rec["old"], rec["new"], rec["mask"], 0.02, 0.02, w_agg)
        ratio = np.exp(np.clip(rec["new"] - rec["old"], -20, 20))[rec["mask"]]
        clipped += int(((ratio > 1.02) | (ratio < 0.98)).sum())
        assert np.abs(ratio - 1).max() > 1e-4  # the policy moved: s is not the on-policy limit
        log_w, ema = reference.ctwa_update(log_w, ema, rec["rewards"], ids, signal, **options)
        after = trainer.record[step + 1]["state_before"] if step + 1 < len(trainer.record) else trainer.estimator_state
        assert after["signal"] == "policy" and after["steps"] == step + 1
        np.testing.assert_allclose(after["log_weights"], log_w, rtol=0, atol=1e-5)
        np.testing.assert_allclose(after["ema"], ema, rtol=0, atol=1e-5)
    np.testing.assert_allclose(trainer.last_policy_signal.numpy(), signal, rtol=0, atol=1e-5)
    assert clipped > 0, "some tokens should be clipped (epsilon 0.02), or the clip test goes untested"
    assert any(abs(a - b) > 1e-3 for a, b in zip(log_w, np.log(np.asarray(WEIGHTS)))), "the weights should move"
    logged = trainer.state.log_history
    assert any("mrgrpo/state/weight/0" in entry for entry in logged)
    assert any("mrgrpo/feedback_seconds" in entry for entry in logged)


def test_without_a_policy_change_the_trainer_gives_the_on_policy_limit(tmp_path):
    trainer = _train(tmp_path, steps=2, learning_rate=0.0, epsilon=0.2)
    state = None
    for rec in trainer.record:
        adv, state = compute_advantages_with_state(
            torch.from_numpy(rec["rewards"]), list(np.arange(N) // 4), "ctwa", WEIGHTS, state=state, **OPTIONS
        )
        np.testing.assert_allclose(rec["advantages"], adv.numpy(), rtol=0, atol=1e-6)
    final = trainer.estimator_state
    assert final["signal"] == "policy" and state["signal"] == "on_policy_limit"
    np.testing.assert_allclose(final["log_weights"], state["log_weights"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(final["ema"], state["ema"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(trainer.last_policy_signal.numpy(), trainer.record[-1]["advantages"], rtol=0, atol=1e-6)


def test_an_estimator_without_feedback_holds_nothing(tmp_path):
    loaded = load_model("tiny")
    args = tiny_grpo_config(tmp_path, max_steps=1, per_device_train_batch_size=N, num_generations=4)
    trainer = MultiRewardGRPOTrainer(
        model=loaded.model, reward_funcs=[ScriptedReward(i) for i in range(3)], args=args,
        train_dataset=task_rows(TaskConfig(size=8, eval_size=1), "train", chat=True),
        processing_class=loaded.tokenizer, estimator="gdpo",
    )
    trainer.train()
    assert trainer._pending_feedback is None and trainer.last_policy_signal is None
    assert not any("mrgrpo/feedback_seconds" in entry for entry in trainer.state.log_history)


@pytest.mark.slow  # (two processes under torchrun, about a minute on 2 cores)
def test_two_processes_gather_the_signal_of_the_whole_batch_and_keep_one_state(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("feedback_two_processes.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[2] / "src"), env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script), str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2] and len(ranks[0]["record"]) == 2
    options = {"cov_targets": [0.5, 0.4, 0.3], "gate_by_obj_targets": False, "lr": 0.5, "ema_tau": 0.5}  # (the script's)
    for first, second in zip(ranks[0]["record"], ranks[1]["record"]):
        # the signal of the whole gathered batch, process 0's rows first, the same on both
        assert len(first["signal"]) == 8 and first["signal"] == second["signal"]
        np.testing.assert_allclose(first["signal"], first["local_signal"] + second["local_signal"], rtol=0, atol=1e-12)
        assert first["rewards"] == second["rewards"] and first["state_after"] == second["state_after"]
        before = first["state_before"]
        log_w = list(np.log([0.5, 0.3, 0.2])) if before is None else before["log_weights"]
        expected, ema = reference.ctwa_update(log_w, None if before is None else before["ema"], np.array(first["rewards"]),
                                              list(np.arange(8) // 4), np.array(first["signal"]), **options)
        # (1e-6: TRL holds the weights in float32, the oracle starts from 0.5, 0.3, 0.2 exactly)
        np.testing.assert_allclose(first["state_after"]["log_weights"], expected, rtol=0, atol=1e-6)
        np.testing.assert_allclose(first["state_after"]["ema"], ema, rtol=0, atol=1e-6)
