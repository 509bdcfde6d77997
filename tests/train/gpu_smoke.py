"""GPU smoke check of the TRL integration (run by hand on a CUDA machine; not collected by pytest).

    PYTHONPATH=src python tests/train/gpu_smoke.py

Tiny preset on CUDA, scripted rewards: MultiRewardGRPOTrainer's advantages (grpo, gdpo) equal
stock GRPOTrainer's at the loss, and corr_grpo/sa_mrpo train with diagnostics on the GPU batch.
"""

from __future__ import annotations

import sys
import time

import torch

sys.path.insert(0, "tests/train")


def main() -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from mrgrpo.train.tiny import build_model, build_tokenizer
    from mrgrpo.train.trainer import MultiRewardGRPOTrainer
    from test_parity import ScriptedReward, _capture, Captured

    print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0))
    rows = [{"prompt": [{"role": "user", "content": f"State the final answer: {a} + 3 ="}]} for a in range(16)]
    dataset = Dataset.from_list(rows)

    def run(cls, trl_args, **kwargs):
        tokenizer = build_tokenizer()
        args = GRPOConfig(
            output_dir="/tmp/gpu_smoke", max_steps=3, per_device_train_batch_size=8, num_generations=4,
            max_completion_length=8, learning_rate=1e-3, report_to="none", save_strategy="no",
            logging_steps=1, disable_tqdm=True, reward_weights=[1.0, 0.5, 2.0], seed=0, bf16=False, **trl_args,
        )
        trainer = _capture(cls)(
            model=build_model(tokenizer), reward_funcs=[ScriptedReward(i) for i in range(3)], args=args,
            train_dataset=dataset, processing_class=tokenizer, **kwargs,
        )
        trainer.captured = Captured()
        trainer.train()
        assert next(trainer.model.parameters()).is_cuda
        return trainer

    ok = True
    for aggregation, estimator in (("sum_then_normalize", "grpo"), ("normalize_then_sum", "gdpo")):
        stock = run(GRPOTrainer, {"multi_objective_aggregation": aggregation}).captured
        ours = run(MultiRewardGRPOTrainer, {}, estimator=estimator).captured
        for a, b in zip(stock.advantages, ours.advantages):
            diff = (a - b).abs().max().item()
            print(f"{estimator}: device {b.device}, max |diff| vs stock = {diff:.2e}")
            ok &= diff < 1e-5
    for estimator in ("corr_grpo", "sa_mrpo"):
        start = time.perf_counter()
        trainer = run(MultiRewardGRPOTrainer, {}, estimator=estimator)
        print(f"{estimator}: 3 steps in {time.perf_counter() - start:.1f} s, mrgrpo {1000 * trainer.mrgrpo_seconds:.1f} ms, "
              f"diag keys {len(trainer.last_diagnostics or {})}")
    print("GPU SMOKE", "OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
