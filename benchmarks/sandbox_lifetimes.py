"""What a run learns of when the run before it on its worker ended (docs/sandbox.md, lifetimes).

Pairs of runs on one worker (``run_many(workers=1)``): a writer spins until one of 30 steps of
3 ms in a 100 ms tick (its choice, at random), then ends; the reader that follows prints which
step of the tick its own start fell in. It prints what was sent and read, and how many pairs
were read exactly once the offset of the most common difference (the time a run takes to
start) is taken off. With ``--no-namespaces`` (namespaces refused, as Docker's default profile
does, as root: the jail) it then runs, on two workers, one run holding 0.15 s beside 40 short
ones that print when they started and the inode number of their root, the directory the caller
made for them: the numbers change once the long run has ended and its directory is gone.

    python benchmarks/sandbox_lifetimes.py [--pairs N] [--no-namespaces] [--seed S]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import mrgrpo.rewards.sandbox as sandbox  # noqa: E402
from mrgrpo.rewards.sandbox import Job, Limits, run_many  # noqa: E402

STEPS, STEP_S, TICK_S = 30, 0.003, 0.1
WRITER = f"""
import time
now = time.time()
target = (int(now / {TICK_S}) + 2) * {TICK_S} + STEP * {STEP_S}  # that step of the next tick but one
while time.time() < target:
    pass
def f(x):
    return x
"""
HOLDER = """
import time
end = time.time() + 0.15
while time.time() < end:
    pass
def f(x):
    return x
"""
READER = f"""
import os, time
print("STEP", int((time.time() % {TICK_S}) / {STEP_S}), "AT", time.time(), "ROOT", os.stat("/").st_ino)
def f(x):
    return x
"""
TESTS = "def check(candidate):\n    assert candidate(1) == 1\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--no-namespaces", action="store_true", help="refuse namespaces (the jail mode, as root)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.no_namespaces:
        sandbox._refused_layers = frozenset({"namespaces"})
    rng = random.Random(args.seed)
    sent = [rng.randrange(STEPS) for _ in range(args.pairs)]
    jobs = []
    for step in sent:
        jobs += [Job(WRITER.replace("STEP", str(step)), TESTS, "humaneval", "f", Limits()),
                 Job(READER, TESTS, "humaneval", "f", Limits())]
    results = run_many(jobs, workers=1)
    printed = [r.stdout.split() for r in results[1::2]]
    read = [int(words[1]) for words in printed]
    offsets = collections.Counter(r - s for s, r in zip(sent, read))  # (no wrap: the last step ends at 87 ms)
    offset = offsets.most_common(1)[0][0]
    exact = sum(r - offset == s for s, r in zip(sent, read))
    print(f"isolation: {results[0].isolation}; load average at the end: {os.getloadavg()[0]:.1f}")
    print("sent:", sent)
    print("read:", read)
    print("differences (read - sent):", dict(sorted(offsets.items())))
    print(f"read exactly after taking off {offset} step(s): {exact} of {len(sent)} "
          f"(chance: {len(sent) / STEPS:.1f})")
    if args.no_namespaces:
        results = run_many([Job(HOLDER, TESTS, "humaneval", "f", Limits())]
                           + [Job(READER, TESTS, "humaneval", "f", Limits())] * 40, workers=2)
        rows = [(float(r.stdout.split()[3]), int(r.stdout.split()[5])) for r in results[1:]]
        first = min(at for at, _ in rows)
        print("beside a run of 0.15 s, short runs' (start in ms, root inode):",
              [(round(1000 * (at - first)), root) for at, root in rows])


if __name__ == "__main__":
    main()
