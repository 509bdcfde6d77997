"""Share of GRPO step time spent in mrgrpo's advantage + diagnostics code (goal: < 1%).

Runs a few steps of the ``train`` job on each preset and reads the run's ``metrics.jsonl``:
``mrgrpo/seconds`` (time measured inside ``MultiRewardGRPOTrainer`` around
``compute_advantages``, ``diagnose`` and its metric logging) over the step's wall time (the
difference of consecutive ``time_s``). The first step is excluded: it carries warm-up costs.
Each preset is measured at the default settings (``diagnostics_every`` =
:data:`mrgrpo.train.config.DEFAULT_DIAGNOSTICS_EVERY`, 10) and with ``mrgrpo.diagnose`` every step
(``--every``, default 1), in the same process. The load average is printed beside each result:
on a shared machine the step time, and so the share, moves with it. Usage::

    python benchmarks/train_overhead.py                    # tiny and smollm2
    python benchmarks/train_overhead.py --presets tiny --steps 50 --estimator gdpo --every 5
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

from mrgrpo.train.config import DEFAULT_DIAGNOSTICS_EVERY, apply_overrides, load_config, validate_config
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
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="tiny,smollm2")
    parser.add_argument("--steps", type=int, default=None, help="measured steps (default 50 tiny, 5 otherwise)")
    parser.add_argument("--estimator", default="corr_grpo")
    parser.add_argument("--every", type=int, default=1, help="the diagnostics_every measured besides the default")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    for preset in args.presets.split(","):
        steps = args.steps or (50 if preset == "tiny" else 5)
        for every in sorted({DEFAULT_DIAGNOSTICS_EVERY, args.every}, reverse=True):
            results.append(measure(preset, steps, args.estimator, every))
            r = results[-1]
            if not args.json:
                print(
                    f"{r['preset']:>8} {r['estimator']} diagnostics_every={every}"
                    f"{' (default)' if every == DEFAULT_DIAGNOSTICS_EVERY else ''}: step {r['mean_step_s']:.3f} s, "
                    f"mrgrpo {r['mean_mrgrpo_ms']:.2f} ms -> {r['share_percent']:.3f}% of step time over "
                    f"{r['steps']} steps (goal < 1% at the default); load average {r['load_average_1m']}",
                    flush=True,
                )
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
