"""Share of GRPO step time spent in mrgrpo's advantage + diagnostics code (goal: < 1%).

Runs a few steps of the ``train`` job on each preset and reads the run's ``metrics.jsonl``:
``mrgrpo/seconds`` (time measured inside ``MultiRewardGRPOTrainer`` around
``compute_advantages``, ``diagnose`` and its metric logging) over the step's wall time (the
difference of consecutive ``time_s``). The first step is excluded: it carries warm-up costs.
Each preset is measured with ``diagnostics_every`` = 1 (``mrgrpo.diagnose`` every step) and
with ``--every`` (default 10), in the same process. Usage::

    python benchmarks/train_overhead.py                    # tiny and smollm2
    python benchmarks/train_overhead.py --presets tiny --steps 50 --estimator gdpo --every 5
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from mrgrpo.train.config import apply_overrides, load_config, validate_config
from mrgrpo.train.defaults import TINY_CONFIG
from mrgrpo.train.job import run_train


def measure(preset: str, steps: int, estimator: str, every: int = 1) -> dict:
    overrides = [
        f"max_steps={steps + 1}", f"save_steps={steps + 100}", f"estimator={estimator}", "max_wall_seconds=null",
        f"diagnostics_every={every}",
    ]
    if preset == "tiny":
        config = validate_config(apply_overrides(TINY_CONFIG, overrides))
    else:
        config = load_config(None, overrides + [f"model={preset}"])
    with tempfile.TemporaryDirectory() as out:
        run_train(config, out=f"{out}/run", quiet=True)
        with open(f"{out}/run/metrics.jsonl") as f:
            records = [json.loads(line) for line in f]
    measured = [
        (later["time_s"] - earlier["time_s"], later["mrgrpo/seconds"]) for earlier, later in zip(records, records[1:])
    ]
    step_s = sum(s for s, _ in measured)
    ours_s = sum(m for _, m in measured)
    return {
        "preset": preset,
        "estimator": estimator,
        "diagnostics_every": every,
        "steps": len(measured),
        "mean_step_s": step_s / len(measured),
        "mean_mrgrpo_ms": 1000 * ours_s / len(measured),
        "share_percent": 100 * ours_s / step_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="tiny,smollm2")
    parser.add_argument("--steps", type=int, default=None, help="measured steps (default 50 tiny, 5 otherwise)")
    parser.add_argument("--estimator", default="corr_grpo")
    parser.add_argument("--every", type=int, default=10, help="the diagnostics_every measured besides 1")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    for preset in args.presets.split(","):
        steps = args.steps or (50 if preset == "tiny" else 5)
        for every in sorted({1, args.every}):
            results.append(measure(preset, steps, args.estimator, every))
            r = results[-1]
            if not args.json:
                print(
                    f"{r['preset']:>8} {r['estimator']} diagnostics_every={every}: step {r['mean_step_s']:.3f} s, "
                    f"mrgrpo {r['mean_mrgrpo_ms']:.2f} ms -> {r['share_percent']:.3f}% of step time over "
                    f"{r['steps']} steps (goal < 1%)",
                    flush=True,
                )
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
