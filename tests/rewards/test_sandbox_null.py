"""The null program of efficiency timing: a recording run keeps what the reference answered, the
null program built from it makes the tests take the same path (same calls, same replies), and
timing runs see the same inputs every time."""

from __future__ import annotations

from mrgrpo.rewards.code import CodeExecutor
from mrgrpo.rewards.sandbox import Job, Limits, null_job, run, run_alone
from mrgrpo.rewards.sandbox.child.wire import decode, encode
from mrgrpo.rewards.sandbox.null import bare_job, bare_program, null_program
from mrgrpo.rewards.sandbox.results import _read_report

LIMITS = Limits(wall_s=10.0, cpu_s=5)

# Inputs drawn at random by the judge (HumanEval/38 and /50 do this), an expected exception, a
# module-level value the tests read.
RANDOM_TESTS = """
import random

def check(candidate):
    for _ in range(20):
        n = random.randint(0, 1000)
        assert candidate(n) == [n, n + 1]
    try:
        candidate(-1)
        assert False
    except ValueError:
        pass
    assert LIMIT == 1000
"""
REFERENCE = "LIMIT = 1000\n\ndef f(n):\n    if n < 0:\n        raise ValueError('negative')\n    return [n, n + 1]\n"


def recorded(job: Job) -> bytes:
    [result] = run_alone([job], 1, record=True)[0]
    assert result.passed, result
    assert result.record, "a passing recording run carries its record"
    return result.record


def test_the_null_program_replays_the_reference_on_random_inputs():
    job = Job(REFERENCE, RANDOM_TESTS, "humaneval", "f", LIMITS)
    record = recorded(job)
    answers, replies = decode(record)
    # what the program answered for each name the tests look up (others, like the attribute
    # ``randint``, it does not define)
    asked = dict(answers)
    assert asked["LIMIT"] == ("v", 1000) and asked["f"] == ("f", "")
    assert all(answer == ("x", "not defined") for name, answer in asked.items() if name not in ("LIMIT", "f"))
    assert len(replies) == 21 and replies[-1] == (False, ("ValueError", "negative"))
    null = null_job(job, record)
    assert null is not None and "[n, n + 1]" not in null.program  # it replays, it does not compute
    results = run_alone([null], 3)[0]
    assert all(r.passed for r in results), results  # timing runs draw the same inputs every time
    assert run(null).verdict.value == "failed"  # a verdict run draws fresh ones: the replay is wrong


def test_verdict_runs_carry_no_record():
    job = Job(REFERENCE, RANDOM_TESTS, "humaneval", "f", LIMITS)
    assert run(job).record is None
    assert run_alone([job], 1)[0][0].record is None


def test_the_null_program_keeps_the_context_and_every_name():
    context = "import math\n\ndef helper(x):\n    return math.sqrt(x)\n\ndef g(x):\n    \"\"\"Stub.\"\"\"\n"
    program = context + "def g(x):\n    return helper(x) * 2\n"
    tests = "def check(candidate):\n    assert candidate(4) == 4.0\n    assert abs(helper(9) - 3) < 1e-9\n"
    job = Job(program, tests, "humaneval", "g", LIMITS, context)
    null = null_job(job, recorded(job))
    assert null.program.startswith(context.rstrip())  # the context's loading is the harness's cost too
    assert all(r.passed for r in run_alone([null], 2)[0])
    # assert-style tests calling two functions by name: both replay from one sequence
    tests = "assert add(1, 2) == 3\nassert mul(2, 3) == 6\nassert add(mul(1, 1), 1) == 2\n"
    job = Job("def add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n", tests, "assert", None, LIMITS)
    null = null_job(job, recorded(job))
    assert "return a + b" not in null.program
    assert all(r.passed for r in run_alone([null], 2)[0])


def test_the_stdio_null_program_prints_each_case_output():
    cases = [("3\n", "6\n"), ("5\n", "10\n")]
    job = Job("print(int(input()) * 2)\n", cases, "stdio", None, LIMITS)
    null = null_job(job, recorded(job))
    assert "input" not in null.program
    assert all(r.passed for r in run_alone([null], 2)[0])


def test_the_bare_program_answers_as_the_reference_from_its_own_end_of_the_pipe():
    # random inputs, an expected exception, a module-level value; assert-style tests; stdio
    job = Job(REFERENCE, RANDOM_TESTS, "humaneval", "f", LIMITS)
    bare = bare_job(job, recorded(job))
    assert bare is not None and "[n, n + 1]" not in bare.program and "def f" not in bare.program
    assert all(r.passed for r in run_alone([bare], 2)[0])
    tests = "assert add(1, 2) == 3\nassert mul(2, 3) == 6\n"
    job = Job("def add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n", tests, "assert", None, LIMITS)
    assert all(r.passed for r in run_alone([bare_job(job, recorded(job))], 2)[0])
    job = Job("print(int(input()) * 2)\n", [("3\n", "6\n"), ("5\n", "10\n")], "stdio", None, LIMITS)
    assert all(r.passed for r in run_alone([bare_job(job, recorded(job))], 2)[0])
    context = "import math\n\ndef helper(x):\n    return math.sqrt(x)\n\ndef g(x):\n    \"\"\"Stub.\"\"\"\n"
    job = Job(context + "def g(x):\n    return helper(x) * 2\n", "def check(candidate):\n    assert candidate(4) == 4.0\n",
              "humaneval", "g", LIMITS, context)
    bare = bare_program(job, recorded(job))
    assert bare.startswith(context.rstrip())  # it loads the context: every program does
    assert bare_program(job, b"not plain data") is None and bare_job(job, None) is None


def test_the_executor_measures_the_harness_a_program_could_skip():
    # 400 calls with little work each: the trusted server's cost per call against the bare
    # program's one read and one write
    tests = "def check(candidate):\n    for n in range(400):\n        assert candidate([n, 1]) == n + 1\n"
    reference = Job("def f(xs):\n    return xs[0] + xs[1]\n", tests, "humaneval", "f", LIMITS)
    executor = CodeExecutor(LIMITS, reference_repeats=5)
    executor.timings([reference], reference=True)
    [null] = executor.nulls([reference])
    runs = executor.timed_runs
    [avoidable] = executor.harness([reference])
    assert executor.timed_runs == runs and runs == 5 + 2 * 5  # the reference's, then null and bare interleaved
    assert null.best is not None and 0.0 < avoidable < 1.0, avoidable
    no_null = Job("def f(xs):\n    return xs[0] + xs[1]\n", tests, "humaneval", "f", LIMITS, "# untimed\n")
    assert executor.harness([no_null]) == [0.0]  # never timed: no null program, nothing to deduct


def test_unreplayable_records_give_no_null_program():
    big = "def check(candidate):\n    for n in range(3):\n        assert len(candidate(n)) == 200000\n"
    [result] = run_alone([Job("def f(n):\n    return 'x' * 200000\n", big, "humaneval", "f", LIMITS)], 1, record=True)[0]
    assert result.passed and result.record is None  # 600 KB of answers: over what a record keeps
    job = Job(REFERENCE, RANDOM_TESTS, "humaneval", "f", LIMITS)
    assert null_job(job, None) is None
    assert null_program(job, b"not plain data") is None
    bad_name = encode(((("os.system", ("f", "")),), ()))
    assert null_program(job, bad_name) is None


def test_the_record_line_is_accepted_only_right_before_done():
    head = ["iso chroot", "loaded 5", "case 0 ok"]
    done = "done 1 10 10"
    read = _read_report(head + ["record 00ff", done], 1)
    assert read is not None and read[5] == b"\x00\xff"
    assert _read_report(head + [done], 1)[5] is None
    assert _read_report(["iso chroot", "loaded 5", "record 00", "case 0 ok", done], 1) is None  # before a case
    assert _read_report(head + ["record 00", "record 00", done], 1) is None  # twice
    assert _read_report(head + [done, "record 00"], 1) is None  # after the last line
    assert _read_report(head + ["record zz", done], 1) is None  # not hex


def test_the_executor_times_the_null_program_per_problem():
    executor = CodeExecutor(LIMITS, reference_repeats=3, timing_repeats=2)
    heavy = "def check(candidate):\n" + "".join(f"    assert candidate({n}) == {sum(range(n))}\n" for n in (200000, 300000))
    reference = Job("def f(n):\n    t = 0\n    for i in range(n):\n        t += i\n    return t\n", heavy, "humaneval", "f", LIMITS)
    [ref] = executor.timings([reference], reference=True)
    [null] = executor.nulls([reference])
    assert ref.best is not None and null.best is not None
    assert null.best < ref.best / 4  # the loop is the reference's work, not the harness's
    runs = executor.timed_runs
    executor.nulls([reference])
    assert executor.timed_runs == runs  # cached
    copy = Job(reference.program + "# copy\n", heavy, "humaneval", "f", LIMITS)
    r, n, g = executor.time_against([(reference, copy)])[0]  # the program's window: its own runs of both
    assert 2 <= g.repeats <= 2 + executor.extra_repeats and n.repeats == g.repeats == r.repeats - 1
    assert g.best is not None and r.best >= n.best and g.against == (r, n)
    assert executor.timings([reference], reference=True)[0].repeats == ref.repeats + r.repeats  # cached, with the window's
    assert executor.nulls([reference])[0].repeats == null.repeats + n.repeats
