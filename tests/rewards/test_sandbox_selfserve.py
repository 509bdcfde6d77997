"""Efficiency measures the algorithm, not the harness: a program that serves its own end of the
judge's pipe (its top level answers every request itself, skipping the trusted server's work)
pays less harness time than the null program, down to the problem's bare program (one read and
one write per request). The most it can save, as a share of the reference's work, is deducted
from every score, and where that share is over ``max_harness_share`` (0.15) the problem is not
scored: the reference's own algorithm served this way scores no more than an exact copy, and at
most 0.10."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from mrgrpo.rewards import get_suite  # noqa: E402

ALGORITHM = '''
def f(n):
    total = 0
    for i in range(n):
        total += i * i
    return total
'''
# The reference's algorithm, with the candidate's end of the pipe served by the program itself:
# the sandbox's own frames and wire encoding, without the trusted server's flushing around
# every call. A call's arguments come as the judge's pickle of them.
SELF_SERVED = ALGORITHM + '''
import os, pickle, struct, sys
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
            name, args, kwargs = pickle.loads(payload)
            send(b"O", wire.encode(f(*args)))
        else:
            os._exit(0)
'''
# The leanest server a program can write: one read per request, the arguments read with
# pickle's C loader, the reply (an int) packed by hand and written with one write.
LEAN = ALGORITHM + '''
import sys
from _pickle import loads
from posix import read, write, _exit
from struct import Struct
pack = Struct(">IBBq").pack
wire = sys.modules.get("_mrgrpo_sandbox.wire")
if wire is not None:
    payload = wire.encode(None)
    write(4, len(payload).to_bytes(4, "big") + b"O" + payload)
    while True:
        data = read(3, 65536)
        if len(data) < 5:
            _exit(0)
        if data[4] == 67:  # C
            write(4, pack(9, 79, 105, f(*loads(data[5:])[1])))
        elif data[4] == 82:  # R
            payload = wire.encode(tuple(("f", "") for _ in wire.decode(data[5:])))
            write(4, len(payload).to_bytes(4, "big") + b"O" + payload)
        else:
            _exit(0)
'''
HEAVY = "def check(candidate):\n" + "".join(f"    assert candidate({n}) == {sum(i * i for i in range(n))}\n"
                                            for n in (60000, 70000, 80000, 90000))
# 100 calls of a few thousand steps each (as HumanEval/32's 100 bisections): the harness is a
# few percent of the reference's time, so the problem is scored, less that share.
MEDIUM = "def check(candidate):\n    for n in range(100):\n        assert candidate(3000 + n) == sum(i * i for i in range(3000 + n))\n"
# Many calls with little work each: the harness's cost is most of the reference's time.
LIGHT = "def check(candidate):\n    for n in range(300):\n        assert candidate(200 + n % 7) == sum(i * i for i in range(200 + n % 7))\n"
REFERENCE = ALGORITHM.lstrip()


def efficiencies(tests, programs, **options):
    suite = get_suite("code", components=("pass", "efficiency"), timeout=6, workers=2, **options)
    n = len(programs)
    columns = {"test": [tests] * n, "entry_point": ["f"] * n, "code_prefix": [""] * n,
               "test_format": ["humaneval"] * n, "reference": [REFERENCE] * n}
    return {c.name: c(["p"] * n, programs, **columns) for c in suite.components}


def test_self_served_pipes_pass_and_the_frames_are_the_sandbox_s():
    from mrgrpo.rewards.sandbox import Job, run

    for program in (SELF_SERVED, LEAN):
        result = run(Job(program, LIGHT, "humaneval", "f"))
        assert result.passed, (result, result.stderr[-2000:])


def test_self_served_reference_is_paid_no_more_than_a_copy():
    programs = [server + f"\n# copy {i}\n" for server in (SELF_SERVED, LEAN) for i in range(2)]
    for tests in (HEAVY, MEDIUM, LIGHT):
        got = efficiencies(tests, programs + [REFERENCE + "\n# an exact copy\n"])
        print("self-served efficiency (self-served x2, lean x2, copy):", got["efficiency"])
        assert got["pass"] == [1.0] * 5
        assert all(e is None or e <= 0.10 for e in got["efficiency"]), (tests[:40], got)
        if tests is MEDIUM:  # scored there (the share a self-served pipe could gain is a few percent)
            assert any(e is not None for e in got["efficiency"][:4]), got
    # the control: without the bound and its deduction the lean server is paid for the harness
    # it skipped (0.12-0.21 where scored). Up to three batches of four copies: a window can
    # abstain (disturbed) and runs can be charged milliseconds more one by one, and all four
    # copies of one batch abstained at load 1.1-1.5 (2026-12-04)
    for batch in range(3):
        unbounded = efficiencies(LIGHT, [LEAN + f"\n# copy {i} of batch {batch}\n" for i in range(4)],
                                 max_harness_share=None)
        print("self-served efficiency, light, unbounded:", unbounded["efficiency"])
        if any(e is not None and e > 0.10 for e in unbounded["efficiency"]):
            break
    assert any(e is not None and e > 0.10 for e in unbounded["efficiency"]), unbounded
