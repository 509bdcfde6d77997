"""Estimator throughput: vectorized vs a per-group Python loop, and variable- vs fixed-size groups.

N = 262,144 rollouts (32,768 groups of 8) x K = 7 components, float64, CPU. For every
estimator it times, in the same run:

* ``loop``: the per-group oracle in ``mrgrpo.estimators.reference`` (a dict from group id to
  rows, numpy per group, as verl's reference GRPO does) — the baseline;
* ``fixed``: ``compute_advantages`` on contiguous groups of 8 (TRL's layout; reshaped to
  ``[groups, 8, K]`` internally);
* ``variable``: ``compute_advantages`` on the same rows with shuffled group ids (segment sums
  over a group index), and on truly variable group sizes (4..12, mean 8).

and prints the ratios: loop / variable (goal ≥ 50×) and variable / fixed (goal ≤ 3×).

    python benchmarks/estimators.py [--groups 32768] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import mrgrpo
from mrgrpo.estimators import reference

K = 7
RANGES = [(0.0, 1.0)] * 5 + [(0.0, 10.0), (-1.0, 1.0)]


def make_batch(groups: int, size: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = groups * size
    rewards = rng.random((n, K))
    rewards[:, :3] = rng.random((n, 3)) < 0.5  # binary components: constant groups happen
    rewards[:, 5] *= 10
    return rewards, rng


def verl_style_group_loop(totals: torch.Tensor, index: list, scale: bool, eps: float = 1e-4) -> torch.Tensor:
    """The loop verl's reference GRPO runs (``compute_grpo_outcome_advantage``): scores gathered
    per group id in a dict of tensors, torch mean/std per group, then a pass over rollouts."""
    id2score: dict = {}
    for i in range(len(totals)):
        id2score.setdefault(index[i], []).append(totals[i])
    id2mean, id2std = {}, {}
    for idx, scores in id2score.items():
        stacked = torch.stack(scores)
        id2mean[idx] = stacked.mean() if len(scores) > 1 else torch.tensor(0.0, dtype=totals.dtype)
        id2std[idx] = stacked.std() if len(scores) > 1 else torch.tensor(1.0, dtype=totals.dtype)
    out = totals.clone()
    for i in range(len(totals)):
        out[i] = out[i] - id2mean[index[i]]
        if scale:
            out[i] = out[i] / (id2std[index[i]] + eps)
    return out


def best_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=32768)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    args = parser.parse_args()

    if args.threads:
        # On a shared 2-core machine, multi-threaded kernels stall when a thread is descheduled.
        torch.set_num_threads(args.threads)
    rewards, rng = make_batch(args.groups, args.size)
    n = len(rewards)
    fixed_ids = np.repeat(np.arange(args.groups), args.size)
    shuffled = rng.permutation(n)
    shuffled_rewards, shuffled_ids = rewards[shuffled], fixed_ids[shuffled]
    sizes = rng.integers(4, 13, size=args.groups)
    variable_ids = rng.permutation(np.repeat(np.arange(args.groups), sizes))[:n]
    if len(variable_ids) < n:
        variable_ids = np.concatenate([variable_ids, np.full(n - len(variable_ids), args.groups)])
    weights = np.array([0.05, 0.05, 0.05, 0.25, 0.60, 0.30, 0.20])

    t_rewards = torch.from_numpy(rewards)
    t_shuffled_rewards = torch.from_numpy(shuffled_rewards)
    t_fixed_ids, t_shuffled_ids, t_variable_ids = (torch.from_numpy(x) for x in (fixed_ids, shuffled_ids, variable_ids))

    print(f"N = {n:,} rollouts ({args.groups:,} groups of {args.size}) x K = {K}, float64, "
          f"{torch.get_num_threads()} torch threads; best of {args.repeats}")
    header = f"{'estimator':<10} {'loop s':>8} {'fixed ms':>9} {'shuffled ms':>12} {'varsize ms':>11} {'loop/shuffled':>14} {'shuffled/fixed':>15} {'varsize/fixed':>14}"
    print(header)
    print("-" * len(header))
    for name in ["grpo", "dr_grpo", "gdpo", "sa_mrpo", "corr_grpo", "sa_corr_grpo"]:
        options = {"reward_ranges": RANGES} if name in ("sa_mrpo", "sa_corr_grpo") else {}

        def fixed():
            return mrgrpo.compute_advantages(t_rewards, t_fixed_ids, name, weights, **options)

        def shuffled_run():
            return mrgrpo.compute_advantages(t_shuffled_rewards, t_shuffled_ids, name, weights, **options)

        def variable():
            return mrgrpo.compute_advantages(t_rewards, t_variable_ids, name, weights, **options)

        def loop():
            return reference.REFERENCES[name](shuffled_rewards, shuffled_ids.tolist(), weights, **options)

        # The loop is the baseline: one timed run is enough (it takes seconds).
        start = time.perf_counter()
        slow = loop()
        t_loop = time.perf_counter() - start
        fast = shuffled_run().numpy()
        assert np.allclose(fast, slow, rtol=1e-8, atol=1e-8), f"{name}: vectorized result differs from the loop"
        t_fixed = best_time(fixed, args.repeats)
        t_shuffled = best_time(shuffled_run, args.repeats)
        t_variable = best_time(variable, args.repeats)
        print(
            f"{name:<10} {t_loop:>8.2f} {t_fixed * 1e3:>9.1f} {t_shuffled * 1e3:>12.1f} {t_variable * 1e3:>11.1f} "
            f"{t_loop / t_shuffled:>13.0f}x {t_shuffled / t_fixed:>14.2f}x {t_variable / t_fixed:>13.2f}x"
        )
    print("goals: loop/shuffled >= 50x (vectorized vs per-group loop); shuffled/fixed and varsize/fixed <= 3x")

    # verl's own reference loop (torch ops per rollout and per group) for the single-total estimators.
    totals = t_shuffled_rewards @ torch.from_numpy(weights)
    index = shuffled_ids.tolist()
    print("\nverl-style loop (dict of per-group torch tensors, as verl's compute_grpo_outcome_advantage):")
    for name, scale in (("grpo", True), ("dr_grpo", False)):
        start = time.perf_counter()
        verl_style_group_loop(totals, index, scale)
        t_verl = time.perf_counter() - start
        t_fast = best_time(lambda: mrgrpo.compute_advantages(t_shuffled_rewards, t_shuffled_ids, name, weights), args.repeats)
        print(f"{name:<10} verl-style loop {t_verl:6.2f} s   vectorized (shuffled) {t_fast * 1e3:6.1f} ms   ratio {t_verl / t_fast:6.0f}x")


if __name__ == "__main__":
    main()
