"""Efficiency measures the algorithm, not the harness: a program that serves its own end of the
judge's pipe (its top level answers every request itself, skipping the trusted server's work)
pays less harness time than the null program, and can gain at most the harness's share of the
reference's work. ``efficiency`` abstains where that share is over ``max_harness_share`` (0.10),
so the reference's own algorithm served this way scores at most 0.10."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from mrgrpo.rewards import get_suite  # noqa: E402

# The reference's algorithm, with the candidate's end of the pipe served by the program itself
# (the frames the sandbox's own modules read and write, without the trusted server's
# restoring of builtins and flushing around every call).
SELF_SERVED = '''
import os, struct, sys
def f(n):
    total = 0
    for i in range(n):
        total += i * i
    return total
wire = sys.modules.get("_mrgrpo_sandbox.wire")
def read_exact(k):
    data = b""
    while len(data) < k:
        chunk = os.read(3, k - len(data))
        if not chunk:
            os._exit(0)
        data += chunk
    return data
def send(kind, payload):
    os.write(4, struct.pack(">I", len(payload)) + kind + payload)
if wire is not None:
    send(b"O", wire.encode(None))  # the reply to the load request this top level runs in
    while True:
        header = read_exact(5)
        kind, size = header[4:5], struct.unpack(">I", header[:4])[0]
        payload = read_exact(size) if size else b""
        if kind == b"R":
            send(b"O", wire.encode(tuple(("f", "") for _ in wire.decode(payload))))
        elif kind == b"C":
            name, args, kwargs = wire.decode(payload)
            send(b"O", wire.encode(f(*args)))
        else:
            os._exit(0)
'''
HEAVY = "def check(candidate):\n" + "".join(f"    assert candidate({n}) == {sum(i * i for i in range(n))}\n"
                                            for n in (60000, 70000, 80000, 90000))
# Many calls with little work each: the harness's cost is most of the reference's time.
LIGHT = "def check(candidate):\n    for n in range(300):\n        assert candidate(400 + n % 7) == sum(i * i for i in range(400 + n % 7))\n"
REFERENCE = "def f(n):\n    total = 0\n    for i in range(n):\n        total += i * i\n    return total\n"


def efficiencies(tests, programs, **options):
    suite = get_suite("code", components=("pass", "efficiency"), timeout=6, workers=2, **options)
    n = len(programs)
    columns = {"test": [tests] * n, "entry_point": ["f"] * n, "code_prefix": [""] * n,
               "test_format": ["humaneval"] * n, "reference": [REFERENCE] * n}
    return {c.name: c(["p"] * n, programs, **columns) for c in suite.components}


def test_self_served_pipe_passes_and_the_frames_are_the_sandbox_s():
    from mrgrpo.rewards.sandbox import Job, run

    result = run(Job(SELF_SERVED, LIGHT, "humaneval", "f"))
    assert result.passed, (result, result.stderr[-2000:])


def test_self_served_reference_gains_at_most_the_harness_share():
    programs = [SELF_SERVED + f"\n# copy {i}\n" for i in range(2)]
    heavy = efficiencies(HEAVY, programs)
    assert heavy["pass"] == [1.0, 1.0]
    assert all(e is None or e <= 0.10 for e in heavy["efficiency"]), heavy  # the harness is ~0% of the work there
    light = efficiencies(LIGHT, programs)
    assert light["pass"] == [1.0, 1.0]
    assert light["efficiency"] == [None, None], light  # the harness is most of the work: abstains
    # the control: without the bound the same programs are paid for the harness they skipped
    unbounded = efficiencies(LIGHT, programs, max_harness_share=None)
    print("self-served efficiency, heavy:", heavy["efficiency"], "light, unbounded:", unbounded["efficiency"])
    assert any(e is not None and e > 0.10 for e in unbounded["efficiency"]), unbounded
