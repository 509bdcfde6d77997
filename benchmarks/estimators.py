"""Estimator speed against the peers' own code, measured side by side in one process.

N = 262,144 rollouts (32,768 groups of 8) x K = 7 components, float32 (the dtype TRL and verl
hand over), 1 torch thread by default, best of ``--repeats``. Peers, timed in the same run on
the same tensors:

* **verl 0.9.1** (the installed package, its own functions): ``compute_grpo_vectorized_outcome_
  advantage`` (``grpo_vectorized``: scatter-add over the uid index; the weighted sum of the
  components is included in its time, since verl gets one score per rollout) for grpo and, with
  ``norm_adv_by_std_in_grpo=False``, dr_grpo; ``compute_grpo_outcome_advantage`` (``grpo``, a
  per-uid Python loop) and ``compute_gdpo_outcome_advantage`` (``gdpo``, that loop once per
  component), timed once (they take seconds). verl gets integer group ids as a numpy array,
  its fastest input (its trainer passes uid strings, which it factorizes with ``np.unique``).
* **TRL 1.16**: the fixed-shape code of ``GRPOTrainer._generate_and_score_completions``
  (``view(-1, num_generations)``, ``torch.nanmean``, ``trl.trainer.utils.nanstd``),
  transcribed below because TRL runs it inline (there is no function to call): the
  ``sum_then_normalize`` branch for grpo (``scale_rewards="group"``) and dr_grpo (``"none"``,
  without the std TRL computes only for logging) and ``normalize_then_sum`` for gdpo.
  TRL's code needs contiguous groups of equal size, the layout its trainer always has.

mrgrpo runs ``compute_advantages`` end to end (validation, grouping, estimator, checks) on
contiguous ids (TRL's layout, detected) and on shuffled ids (verl's layout). Ratios are
mrgrpo / peer (< 1 = mrgrpo faster).

Every function is timed from the same cache state, twice: **warm** (right after an untimed
call of itself: its inputs and scratch memory are in the caches) and **cold** (right after a
write of twice the last-level cache, the state a training step leaves: the model ran in
between). Without this, a round-robin favours whichever function follows a call on the same
tensors (verl's dr_grpo after verl's grpo, for instance). Every mrgrpo result is checked against the float64
per-group loop oracle of ``mrgrpo.estimators.reference`` (max error relative to the largest
advantage, goal <= 1e-6), and against the peer's result where both compute the same thing.

The field's estimators (mo_grpo, corpo, dvao, gd2po, saw, ddca, constrained_grpo, rvpo, gdpo_loo, ctwa) are timed in
the same round-robin and reported against mrgrpo's own gdpo of the same layout (goal: within
2x), with their own oracle check (``--skip-field`` leaves them out).

    python benchmarks/estimators.py [--groups 32768] [--size 8] [--repeats 7] [--threads 1]
        [--device cpu|cuda] [--dtype float32|float64] [--skip-loops] [--skip-field]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

import mrgrpo
from mrgrpo.estimators import reference

K = 7
RANGES = [(0.0, 1.0)] * 5 + [(0.0, 10.0), (-1.0, 1.0)]
WEIGHTS = [0.05, 0.05, 0.05, 0.25, 0.60, 0.30, 0.20]
ESTIMATORS = ["grpo", "dr_grpo", "gdpo", "sa_mrpo", "corr_grpo", "sa_corr_grpo"]
#: The field's estimators, timed beside mrgrpo's gdpo in the same run (goal: within 2x of it).
FIELD = ["mo_grpo", "corpo", "dvao", "gd2po", "saw", "ddca", "constrained_grpo", "rvpo", "gdpo_loo", "ctwa"]


def field_setup(name: str, weights: list[float]) -> tuple[dict, list[float] | None]:
    """Options and weights for a field estimator on the benchmark batch: corpo's passing score
    0.5; ddca reads component 4 as correctness (> 0.5 = correct) and 5 as the length, without
    weights; constrained_grpo treats component 6 as a cost (its weight 1, multiplier 0.5)."""
    if name == "corpo":
        return {"threshold": 0.5}, weights
    if name == "ddca":
        return {"correctness": 4, "length": 5}, None
    if name == "constrained_grpo":
        return {"constraints": [6], "limits": [0.0], "init": 0.5}, weights[:6] + [1.0]
    return {}, weights


def make_batch(groups: int, size: int, seed: int = 0) -> tuple[np.ndarray, np.random.Generator]:
    """Three binary components (constant groups happen), four continuous ones of other scales."""
    rng = np.random.default_rng(seed)
    n = groups * size
    rewards = rng.random((n, K))
    rewards[:, :3] = rng.random((n, 3)) < 0.5
    rewards[:, 5] *= 10
    rewards[:, 6] = 2 * rewards[:, 6] - 1
    return rewards, rng


# --- TRL 1.16, GRPOTrainer._generate_and_score_completions (transcribed: it runs inline) -------


def trl_sum_then_normalize(rewards_per_func: torch.Tensor, weights: torch.Tensor, g: int, scale: str) -> torch.Tensor:
    from trl.trainer.utils import nanstd

    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable_mask] = torch.nan
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, g), dim=1).repeat_interleave(g, dim=0)
    advantages = rewards - mean_grouped_rewards
    if scale == "group":
        std_rewards = nanstd(rewards.view(-1, g), dim=1).repeat_interleave(g, dim=0)
        advantages = advantages / (std_rewards + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def trl_normalize_then_sum(rewards_per_func: torch.Tensor, weights: torch.Tensor, g: int) -> torch.Tensor:
    from trl.trainer.utils import nanstd

    k = rewards_per_func.shape[1]
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    grouped = rewards_per_func.view(-1, g, k)
    mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
    std_k = nanstd(grouped, dim=1, keepdim=True)
    reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, k)
    rewards = (reward_k * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable_mask] = torch.nan
    std_rewards = nanstd(rewards).expand_as(rewards)
    advantages = (rewards - torch.nanmean(rewards)) / (std_rewards + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


# --- verl 0.9.1, verl.trainer.ppo.core_algos (called as installed) --------------------------


def verl_peers(rewards: torch.Tensor, weights: torch.Tensor, ids: np.ndarray) -> dict[str, Callable[[], torch.Tensor]]:
    from verl.trainer.ppo import core_algos

    n = rewards.shape[0]
    mask = torch.ones(n, 1, dtype=rewards.dtype, device=rewards.device)

    def vectorized(norm: bool) -> torch.Tensor:
        scores = (rewards @ weights).unsqueeze(1)  # verl's one score per rollout
        adv, _ = core_algos.compute_grpo_vectorized_outcome_advantage(
            scores, mask, ids, epsilon=1e-4, norm_adv_by_std_in_grpo=norm
        )
        return adv.squeeze(1)

    def loop_grpo() -> torch.Tensor:
        adv, _ = core_algos.compute_grpo_outcome_advantage((rewards @ weights).unsqueeze(1).cpu(), mask.cpu(), ids, epsilon=1e-4)
        return adv.squeeze(1)

    def loop_gdpo() -> torch.Tensor:
        # verl reads the components from non_tensor_batch, placed at the last response token.
        keys = [f"r{k}" for k in range(rewards.shape[1])]
        columns = rewards.cpu().numpy()
        config = {"gdpo_reward_keys": keys, "gdpo_reward_weights": weights.cpu().tolist()}
        batch = {"prompts": torch.zeros(n, 1), "attention_mask": torch.ones(n, 2, dtype=torch.long)}
        adv, _ = core_algos.compute_gdpo_outcome_advantage(
            torch.zeros(n, 1), mask.cpu(), ids, epsilon=1e-4, config=config,
            non_tensor_batch={key: columns[:, k] for k, key in enumerate(keys)}, batch=batch,
        )
        return adv.squeeze(1)

    return {
        "grpo_vectorized": lambda: vectorized(True),
        "grpo_vectorized (no std)": lambda: vectorized(False),
        "grpo (loop)": loop_grpo,
        "gdpo (loop)": loop_gdpo,
    }


def last_level_cache_bytes() -> int:
    """Size of the CPU's largest cache (from sysfs; 32 MiB where it cannot be read)."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes, default=32 * 2**20)


def evictor(device: torch.device) -> Callable[[], None]:
    """A function that flushes the caches the next call would find warm: it writes a buffer of
    twice the last-level cache (the CPU's, or the GPU's L2 on CUDA)."""
    if device.type == "cuda":
        size = 2 * getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 * 2**20)
    else:
        size = 2 * last_level_cache_bytes()
    buffer = torch.empty(max(size, 64 * 2**20) // 4, dtype=torch.float32, device=device)
    return lambda: buffer.fill_(1.0)


def best_times(
    fns: dict[str, Callable[[], object]], repeats: int, sync: Callable[[], None], before: Callable[[str], None]
) -> dict[str, float]:
    """Best-of-``repeats`` seconds per function, timed round-robin (each round calls every
    function once, so a change in the machine's load hits mrgrpo and the peers alike), each
    timed call preceded by ``before(name)``: the cache state every function starts from."""
    best = {name: float("inf") for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            before(name)
            sync()
            start = time.perf_counter()
            fn()
            sync()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def once(fn: Callable[[], object], sync: Callable[[], None]) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    sync()
    return time.perf_counter() - start, out


def rel_error(ours: torch.Tensor, expected: np.ndarray) -> float:
    """Max |ours − expected| over max |expected| (both as float64)."""
    expected_t = torch.from_numpy(np.asarray(expected, dtype=np.float64))
    diff = (ours.detach().cpu().double() - expected_t).abs().max().item()
    return diff / max(expected_t.abs().max().item(), 1e-300)


STATES = {
    "warm": "each timed call right after an untimed call of the same function",
    "cold": "each timed call right after a write of twice the last-level cache",
}


def print_tables(
    timings: dict[str, dict[str, float]], t_trl: dict[str, float], t_verl: dict[str, float],
    loops: dict[str, float], ms: Callable[[float], str],
) -> None:
    print("contiguous groups (TRL's layout)")
    print(f"{'estimator':<13} {'mrgrpo':>10} {'TRL 1.16':>10} {'ratio':>7}   {'vs TRL gdpo':>11}")
    for name in ESTIMATORS:
        t = timings[name]["contiguous"]
        peer = t_trl.get(name, t_trl["gdpo"] if name == "sa_mrpo" else None)
        peer_s = f"{ms(peer):>10} {t / peer:>6.2f}x" if peer is not None else f"{'—':>10} {'':>7}"
        print(f"{name:<13} {ms(t):>10} {peer_s}   {t / t_trl['gdpo']:>10.2f}x")
    print("(sa_mrpo's TRL peer: TRL's normalize_then_sum, the same computation with fixed weights)")

    print("\nshuffled group ids (verl's layout)")
    print(f"{'estimator':<13} {'mrgrpo':>10} {'verl 0.9.1':>24} {'ratio':>8}")
    for name in ESTIMATORS:
        t = timings[name]["shuffled"]
        if name in t_verl:
            peer, label = t_verl[name], "grpo_vectorized"
        elif name == "gdpo" and "gdpo" in loops:
            peer, label = loops["gdpo"], "gdpo"
        else:
            peer, label = None, "—"
        peer_s = f"{label + ' ' + ms(peer):>24} {t / peer:>7.3g}x" if peer is not None else f"{label:>24} {'':>8}"
        print(f"{name:<13} {ms(t):>10} {peer_s}")
    if "grpo" in loops:
        print(f"verl's per-uid loop grpo: {ms(loops['grpo'])} (mrgrpo grpo {loops['grpo'] / timings['grpo']['shuffled']:.0f}x faster)")

    if "mo_grpo" in timings:
        print("\nthe field's estimators vs mrgrpo's gdpo in the same run (goal <= 2x)")
        print(f"{'estimator':<17} {'contiguous':>10} {'ratio':>7}   {'shuffled':>10} {'ratio':>7}")
        for name in FIELD:
            c, s = timings[name]["contiguous"], timings[name]["shuffled"]
            print(f"{name:<17} {ms(c):>10} {c / timings['gdpo']['contiguous']:>6.2f}x   "
                  f"{ms(s):>10} {s / timings['gdpo']['shuffled']:>6.2f}x")

    print("\nvs gdpo (goal <= 1.5x): the fastest gdpo of the layout (TRL's for contiguous groups, mrgrpo's own otherwise)")
    for name in ("sa_mrpo", "corr_grpo", "sa_corr_grpo"):
        c = timings[name]["contiguous"] / min(t_trl["gdpo"], timings["gdpo"]["contiguous"])
        s = timings[name]["shuffled"] / timings["gdpo"]["shuffled"]
        print(f"  {name:<13} contiguous {c:.2f}x   shuffled {s:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=32768)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--skip-loops", action="store_true", help="skip verl's per-uid loops (seconds each)")
    parser.add_argument("--skip-oracle", action="store_true", help="skip the float64 loop oracles (seconds each)")
    parser.add_argument("--skip-field", action="store_true", help="skip the field's estimators (mo_grpo, saw, ...)")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    rewards_np, rng = make_batch(args.groups, args.size)
    n = len(rewards_np)
    g = args.size
    contiguous_ids = np.repeat(np.arange(args.groups), g)
    perm = rng.permutation(n)
    shuffled_np, shuffled_ids = rewards_np[perm], contiguous_ids[perm]

    rewards = torch.from_numpy(rewards_np).to(device=device, dtype=dtype)
    shuffled = torch.from_numpy(shuffled_np).to(device=device, dtype=dtype)
    weights = torch.tensor(WEIGHTS, dtype=dtype, device=device)
    ids_contiguous = torch.arange(n, device=device) // g  # what MultiRewardGRPOTrainer passes
    ids_shuffled = torch.from_numpy(shuffled_ids).to(device)
    # the oracle sees exactly the values mrgrpo sees (after the cast to `dtype`)
    oracle_rewards = shuffled.double().cpu().numpy()

    print(
        f"N = {n:,} rollouts ({args.groups:,} groups of {g}) x K = {K}, {args.dtype}, {device.type}"
        + (f", {torch.get_num_threads()} torch thread(s)" if device.type == "cpu" else f" ({torch.cuda.get_device_name()})")
        + f"; best of {args.repeats}; torch {torch.__version__}"
    )

    def ours(name: str, r: torch.Tensor, ids: torch.Tensor) -> Callable[[], torch.Tensor]:
        if name in FIELD:
            options, w = field_setup(name, WEIGHTS)
            w_t = None if w is None else torch.tensor(w, dtype=dtype, device=device)
            return lambda: mrgrpo.compute_advantages(r, ids, name, w_t, **options)
        options = {"reward_ranges": RANGES} if name in ("sa_mrpo", "sa_corr_grpo") else {}
        return lambda: mrgrpo.compute_advantages(r, ids, name, weights, **options)

    timed = ESTIMATORS + ([] if args.skip_field else FIELD)

    trl = {
        "grpo": lambda: trl_sum_then_normalize(rewards, weights, g, "group"),
        "dr_grpo": lambda: trl_sum_then_normalize(rewards, weights, g, "none"),
        "gdpo": lambda: trl_normalize_then_sum(rewards, weights, g),
    }
    verl = verl_peers(shuffled, weights, shuffled_ids)
    fns: dict[str, Callable[[], object]] = {}
    for name in timed:
        fns[f"ours contiguous {name}"] = ours(name, rewards, ids_contiguous)
        fns[f"ours shuffled {name}"] = ours(name, shuffled, ids_shuffled)
    fns.update({f"trl {name}": fn for name, fn in trl.items()})
    fns["verl grpo"] = verl["grpo_vectorized"]
    fns["verl dr_grpo"] = verl["grpo_vectorized (no std)"]
    for fn in fns.values():  # warm-up (first-call allocations, lazy imports)
        fn()
    flush = evictor(device)
    states = {
        # the same call just before: its data and scratch are in the caches
        "warm": lambda name: fns[name](),
        # the caches flushed: a training step, where the model ran in between
        "cold": lambda name: flush(),
    }
    by_state = {state: best_times(fns, args.repeats, sync, before) for state, before in states.items()}
    errors: dict[str, float] = {}
    if not args.skip_oracle:
        for name in ESTIMATORS:
            options = {"reward_ranges": RANGES} if name in ("sa_mrpo", "sa_corr_grpo") else {}
            expected = reference.REFERENCES[name](oracle_rewards, shuffled_ids.tolist(), WEIGHTS, **options)
            errors[name] = rel_error(ours(name, shuffled, ids_shuffled)(), expected)
    field_errors: dict[str, float] = {}
    if not args.skip_oracle and not args.skip_field:
        for name in FIELD:
            options, w = field_setup(name, WEIGHTS)
            expected = reference.REFERENCES[name](oracle_rewards, shuffled_ids.tolist(), w, **options)
            field_errors[name] = rel_error(ours(name, shuffled, ids_shuffled)(), expected)

    # Same numbers as the peers (TRL's eps = 1e-4; verl given epsilon=1e-4, its std floor is 0).
    agree = {
        "grpo vs TRL": rel_error(ours("grpo", rewards, ids_contiguous)(), trl["grpo"]().double().cpu().numpy()),
        "gdpo vs TRL": rel_error(ours("gdpo", rewards, ids_contiguous)(), trl["gdpo"]().double().cpu().numpy()),
        "dr_grpo vs verl": rel_error(ours("dr_grpo", shuffled, ids_shuffled)(), verl["grpo_vectorized (no std)"]().double().cpu().numpy()),
    }
    loops: dict[str, float] = {}
    if not args.skip_loops:
        loops["grpo"], _ = once(verl["grpo (loop)"], sync)
        loops["gdpo"], _ = once(verl["gdpo (loop)"], sync)

    ms = lambda s: f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.1f} s"  # noqa: E731
    for state, best in by_state.items():
        print(f"\n=== caches {state}: {STATES[state]} ===")
        timings = {name: {"contiguous": best[f"ours contiguous {name}"], "shuffled": best[f"ours shuffled {name}"]} for name in timed}
        t_trl = {name: best[f"trl {name}"] for name in trl}
        t_verl = {"grpo": best["verl grpo"], "dr_grpo": best["verl dr_grpo"]}
        print_tables(timings, t_trl, t_verl, loops, ms)
    if errors:
        print("\nmax error vs the float64 loop oracle / max |advantage| (goal <= 1e-6): "
              + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()))
    if field_errors:
        print("the field's estimators, max error vs their float64 loop oracles / max |advantage| (goal <= 1e-6): "
              + ", ".join(f"{k} {v:.1e}" for k, v in field_errors.items()))
    print("agreement with the peers (same relative measure): " + ", ".join(f"{k} {v:.1e}" for k, v in agree.items()))


if __name__ == "__main__":
    main()
