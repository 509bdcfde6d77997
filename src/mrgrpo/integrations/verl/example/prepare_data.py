"""Write reasoning-gym math tasks as verl parquet files (prompt, data_source, reward_model, extra_info).

    python examples/verl/prepare_data.py --out ~/data/mrgrpo_math --tasks chain_sum basic_arithmetic

The ``extra_info`` columns (task, task_config, task_entry) are what mrgrpo's math suite reads to
grade with the task's own scorer; ``reward_model.ground_truth`` is the reference answer.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from mrgrpo.data.reasoning_tasks import load_reasoning_gym


def verl_rows(split: Any, split_name: str) -> list[dict[str, Any]]:
    rows = []
    for index, item in enumerate(split):
        rows.append(
            {
                "data_source": f"mrgrpo/reasoning_gym/{item['task']}",
                "prompt": list(item["prompt"]),
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": item["answer"]},
                "extra_info": {
                    "split": split_name,
                    "index": index,
                    "id": item["id"],
                    "task": item["task"],
                    "task_config": item["task_config"],
                    "task_entry": item["task_entry"],
                },
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    import pandas as pd

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.expanduser("~/data/mrgrpo_math"))
    parser.add_argument("--tasks", nargs="+", default=["chain_sum"])
    parser.add_argument("--n-train", type=int, default=2000, help="items per task")
    parser.add_argument("--n-test", type=int, default=100, help="items per task")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    data = load_reasoning_gym(args.tasks, n_train=args.n_train, n_test=args.n_test, seed=args.seed)
    os.makedirs(args.out, exist_ok=True)
    for split in ("train", "test"):
        path = os.path.join(args.out, f"{split}.parquet")
        pd.DataFrame(verl_rows(data[split], split)).to_parquet(path)
        print(f"{path}: {len(data[split])} rows")


if __name__ == "__main__":
    main()
