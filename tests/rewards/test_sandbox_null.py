"""The null program of efficiency timing: a recording run keeps what the reference answered, the
null program built from it makes the tests take the same path (same calls, same replies), and
timing runs see the same inputs every time."""

from __future__ import annotations

from mrgrpo.rewards.code import CodeExecutor, Timing, _disturbed, _runs_needed, _steady, efficiency
from mrgrpo.rewards.sandbox import Job, Limits, Result, Verdict, null_job, run, run_alone
from mrgrpo.rewards.sandbox.child.wire import decode, encode
from mrgrpo.rewards.sandbox.null import null_program
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
    assert dict(answers) == {"LIMIT": ("v", 1000), "f": ("f", "")}
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


def test_efficiency_subtracts_the_harness_cost():
    assert efficiency(3.0, 5.0, 1.0) == 0.5  # half the reference's own work (4 s beyond the harness's 1 s)
    assert efficiency(3.0, 5.0) == 1 - 3 / 5  # no null program: the plain ratio
    assert efficiency(1.0, 1.0, 1.0) == 0.0  # a reference that does nothing beyond the harness
    assert efficiency(0.5, 5.0, 1.0) == 1.0  # faster than the harness: clipped


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
    r, n, g = executor.time_against([(reference, copy)])[0]
    assert 2 <= n.repeats - null.repeats <= 2 + executor.extra_repeats  # re-timed alongside, like the reference
    assert n.repeats - null.repeats == r.repeats - ref.repeats - 1 == g.repeats
    assert g.best is not None and r.best >= n.best


def test_programs_get_more_runs_where_the_machine_slows_runs_down():
    def runs(*times):
        return [Result(Verdict.PASSED, cpu_time=t) for t in times]

    steady = Timing.from_times((0.0100, 0.0102, 0.0104, 0.0101), "cpu")
    assert _runs_needed(runs(0.0101, 0.0103), steady, 3) == 3  # every run near the best
    half = Timing.from_times((0.010, 0.016, 0.010, 0.016), "cpu")
    assert _runs_needed(runs(0.010, 0.016), half, 3) == 5  # half slowed: 0.5^5 < 5% <= 0.5^4
    assert _runs_needed(runs(0.02), None, 3) == 3  # nothing to judge by
    assert _runs_needed(runs(0.0009), Timing.from_times((0.0005,), "cpu"), 3) == 3  # under 1 ms
    assert _disturbed(runs(0.016, 0.017), half)  # no unslowed reference run in this window
    assert not _disturbed(runs(0.016, 0.0105), half)
    assert not _disturbed([Result(Verdict.FAILED, cpu_time=0.02)], half)  # the failure decides


def test_a_program_timed_in_a_window_slowed_throughout_is_not_scored(monkeypatch):
    import mrgrpo.rewards.code as code
    from mrgrpo.rewards import get_suite

    monkeypatch.setattr(code, "_disturbed", lambda window, history: True)  # every window slowed down
    monkeypatch.setattr(code, "_steady", lambda window: False)  # and unevenly
    suite = get_suite("code", components=("efficiency",), min_reference_s=0.0)
    heavy = "def check(candidate):\n    assert candidate(100000) == %d\n" % sum(range(100000))
    reference = "def f(n):\n    t = 0\n    for i in range(n):\n        t += i\n    return t\n"
    columns = {"test": [heavy], "entry_point": ["f"], "code_prefix": [""], "test_format": ["humaneval"],
               "reference": [reference]}
    state = code.code_state(suite)
    assert suite.components[0](["p"], [reference + "# copy\n"], **columns) == [None]  # abstains
    timing = next(t for k, t in state.executor._timings.items() if k[0] is False)
    assert timing.disturbed


def test_a_steady_window_is_one_whose_runs_agree():
    def runs(*times):
        return [Result(Verdict.PASSED, cpu_time=t) for t in times]

    assert _steady(runs(0.036, 0.038, 0.040))  # one spell, one speed
    assert not _steady(runs(0.036, 0.021, 0.038))  # the spell broke off in between
    assert not _steady(runs(0.036))  # nothing to compare
    assert not _steady(runs(0.036, 0.036) + [Result(Verdict.FAILED, cpu_time=0.036)])


class ScriptedClock:
    """``run_alone`` with CPU times from a script: per job kind, the times its runs take in turn."""

    def __init__(self, jobs: dict, times: dict):
        self.kind = {id(job): kind for kind, job in jobs.items()}
        self.times = {kind: list(ts) for kind, ts in times.items()}

    def __call__(self, jobs, repeats=1, **kwargs):
        out = []
        for job in jobs:
            kind = self.kind.get(id(job), "null")
            out.append([Result(Verdict.PASSED, cpu_time=self.times[kind].pop(0)) for _ in range(max(1, repeats))])
        return out


def scripted_executor(monkeypatch, times: dict, programs: int = 1):
    import mrgrpo.rewards.code as code

    reference = Job("def f(n):\n    return n\n", "def check(candidate):\n    assert candidate(1) == 1\n", "humaneval", "f", LIMITS)
    gens = [Job(reference.program + f"# program {i}\n", reference.tests, "humaneval", "f", LIMITS) for i in range(programs)]
    executor = CodeExecutor(LIMITS)
    null = Job("pass\n", "", "humaneval", None, LIMITS)
    monkeypatch.setattr(code, "null_job", lambda job, record: null)
    clock = ScriptedClock({"ref": reference, "null": null, **{f"gen{i}": g for i, g in enumerate(gens)}}, times)
    monkeypatch.setattr(code, "run_alone", clock)
    executor.timings([reference], reference=True)
    executor.nulls([reference])
    return executor, reference, gens


def test_a_window_slowed_evenly_throughout_is_compared_within_itself(monkeypatch):
    """History: 7 runs at 20 ms. The program's window is one spell at 1.6x: the reference at
    32-33 ms, the program (half the work) at 16-16.5 ms. Against the history's best it would
    look 20% faster; within its window it is 50% faster, as it is."""
    times = {"ref": [0.020] * 7 + [0.032, 0.0325, 0.033, 0.032], "null": [0.0] * 7 + [0.0] * 3,
             "gen0": [0.016, 0.0165, 0.016]}
    executor, reference, [gen] = scripted_executor(monkeypatch, times)
    r, n, g = executor.time_against([(reference, gen)])[0]
    assert not g.disturbed and r.best == 0.032 and r.repeats == 4  # the window's own reference runs
    assert abs(efficiency(g.best, r.best, n.best) - 0.5) < 1e-9


def test_a_window_slowed_unevenly_throughout_abstains(monkeypatch):
    times = {"ref": [0.020] * 7 + [0.032, 0.042, 0.033, 0.036], "null": [0.0] * 10, "gen0": [0.016, 0.0165, 0.016]}
    executor, reference, [gen] = scripted_executor(monkeypatch, times)
    r, n, g = executor.time_against([(reference, gen)])[0]
    assert g.disturbed  # no unslowed reference run, and the runs disagree: no fair comparison


def test_a_program_is_compared_with_the_reference_as_it_stood_in_its_window(monkeypatch):
    """Every run so far in the slow band (36 ms, the program 18 ms): the first program is compared
    with that. The second program's window reaches the fast band (20 ms): a better best, which
    the first program, timed before it, is not held against (the second gets the 9 rounds the
    reference's newly slowed history asks for)."""
    times = {"ref": [0.036] * 7 + [0.036] * 4 + [0.036] + [0.020] * 9, "null": [0.0] * 19,
             "gen0": [0.018] * 3, "gen1": [0.018] + [0.010] * 8}
    executor, reference, gens = scripted_executor(monkeypatch, times, programs=2)
    (r0, n0, g0), (r1, n1, g1) = executor.time_against([(reference, gens[0]), (reference, gens[1])])
    assert r0.best == 0.036 and abs(efficiency(g0.best, r0.best, n0.best) - 0.5) < 1e-9
    assert r1.best == 0.020 and abs(efficiency(g1.best, r1.best, n1.best) - 0.5) < 1e-9
    assert executor.time_against([(reference, gens[0])])[0][0].best == 0.036  # cached with its window
