"""Efficiency timing (``mrgrpo.rewards.timing``): a program is compared only with the reference
and null-program runs of its own window, by two estimates that must agree; windows scripted run
by run (``ScriptedClock``) check the executor's rounds, and hand-derived windows the statistic."""

from __future__ import annotations

import dataclasses

import pytest

from mrgrpo.rewards.code import CodeExecutor
from mrgrpo.rewards.sandbox import Job, Limits, Result, Verdict
from mrgrpo.rewards.timing import Timing, efficiency, window_efficiency, window_estimates, window_settled

LIMITS = Limits(wall_s=10.0, cpu_s=5)


def window(refs, gens, nulls=None, clock="cpu"):
    """The (program, reference, null) Timings of a window: r0, then rounds (g_i, n_i, r_i)."""
    nulls = nulls or [0.0] * len(gens)
    return Timing.from_times(tuple(gens), clock), Timing.from_times(tuple(refs), clock), Timing.from_times(tuple(nulls), clock)


def test_efficiency_subtracts_the_harness_cost():
    assert efficiency(3.0, 5.0, 1.0) == 0.5  # half the reference's own work (4 s beyond the harness's 1 s)
    assert efficiency(3.0, 5.0) == 1 - 3 / 5  # no null program: the plain ratio
    assert efficiency(1.0, 1.0, 1.0) == 0.0  # a reference that does nothing beyond the harness
    assert efficiency(0.5, 5.0, 1.0) == 1.0  # faster than the harness: clipped


def test_the_two_estimates_of_a_window():
    # refs 20, 20, 32, 32 ms; program 10, 16, 16; null 2, 3, 2 (best 2):
    # by minima 1 - (10 - 2) / (20 - 2) = 0.5556
    # by rounds: 1 - 8/(20-2) = 0.5556; 1 - 14/(26-2) = 0.4167; 1 - 14/(32-2) = 0.5333 -> median 0.5333
    by_minima, by_rounds = window_estimates(*window([0.020, 0.020, 0.032, 0.032], [0.010, 0.016, 0.016], [0.002, 0.003, 0.002]))
    assert by_minima == pytest.approx(1 - 8 / 18) and by_rounds == pytest.approx(1 - 14 / 30)
    # an even number of rounds: the mean of the middle two (0 and 0.25 of 0.5, 0, 0.25, 0)
    assert window_estimates(*window([0.02] * 5, [0.010, 0.020, 0.015, 0.020]))[1] == pytest.approx(0.125)
    assert window_estimates(*window([0.02] * 3, [0.010, 0.020, 0.015])) is None  # not r0 plus one reference run a round
    wall = Timing.from_times((0.010, 0.010), "wall")
    assert window_estimates(wall, Timing.from_times((0.02,) * 3, "cpu"), Timing(None, None, None, 0)) is None  # two clocks


def test_a_window_is_scored_only_where_its_estimates_agree():
    # one spell slowed the whole window: the program (half the work) is half as fast, as it is
    assert window_efficiency(*window([0.032, 0.033, 0.032, 0.0325], [0.016, 0.0165, 0.016])) == pytest.approx(0.5)
    # a copy whose one run met a fast spell no reference run met: by minima 1 - 20/32 = 0.375, by
    # rounds the median 0: they disagree; with its reference at 20 ms later in the window they agree on 0
    lone = window([0.032] * 4, [0.020, 0.032, 0.032])
    assert window_estimates(*lone) == pytest.approx((0.375, 0.0)) and not window_settled(*lone)
    met = window([0.032] * 4 + [0.020] * 2, [0.020, 0.032, 0.032, 0.020, 0.020])
    assert window_settled(*met) and window_efficiency(*met) == 0.0
    program, reference, null = lone
    assert window_efficiency(Timing(None, None, None, 3), reference, null) == 0.0  # a failed run decides
    assert window_efficiency(dataclasses.replace(program, disturbed=True), reference, null) is None
    # references under a millisecond are not judged for agreement (their runs spread in steps)
    assert window_settled(*window([0.0008] * 4, [0.0004, 0.0008, 0.0008]))


class ScriptedClock:
    """``run_alone`` with CPU times from a script: per job kind, the times its runs take in turn."""

    def __init__(self, jobs: dict, times: dict):
        self.kind = {id(job): kind for kind, job in jobs.items()}
        self.times = {kind: list(ts) for kind, ts in times.items()}

    def __call__(self, jobs, repeats=1, **kwargs):
        out = []
        for job in jobs:
            kind = self.kind.get(id(job), "null")
            out.append([self.result(kind) for _ in range(max(1, repeats))])
        return out

    def result(self, kind):
        time = self.times[kind].pop(0)
        return Result(Verdict.FAILED) if time is None else Result(Verdict.PASSED, cpu_time=time)


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
    return executor, reference, gens, clock


def test_a_program_timed_while_the_machine_is_busy_is_not_paid_less(monkeypatch):
    """The failure of the full test suite under load: the reference was first timed in a fast
    spell (20 ms), the program's whole window in a slow one (1.6x: the reference 32-33 ms, the
    program, with half the work, 16-16.5 ms). Compared with the reference's best of all time it
    looked 20% faster (efficiency 0.2); within its window it is 50% faster, as it is."""
    times = {"ref": [0.020] * 7 + [0.032, 0.0325, 0.033, 0.032], "null": [0.0] * 10, "gen0": [0.016, 0.0165, 0.016]}
    executor, reference, [gen], clock = scripted_executor(monkeypatch, times)
    r, n, g = executor.time_against([(reference, gen)])[0]
    assert not g.disturbed and r.best == 0.032 and r.repeats == 4 and g.repeats == 3  # the window's own runs
    assert window_efficiency(g, r, n) == pytest.approx(0.5)
    assert all(not ts for ts in clock.times.values())  # three rounds: the estimates agreed at once


def test_a_fast_spell_met_by_one_side_only_gets_more_rounds_then_abstains(monkeypatch):
    """A copy (same work) whose first run met a fast spell (20 ms) that no reference run met: by
    minima it looks 37.5% faster, by rounds not at all. It gets rounds up to the cap (3 + 6); if
    the reference never meets the spell the window is disturbed and efficiency abstains."""
    times = {"ref": [0.032] * 7 + [0.032] * 10, "null": [0.0] * 16, "gen0": [0.020] + [0.032] * 8}
    executor, reference, [gen], clock = scripted_executor(monkeypatch, times)
    r, n, g = executor.time_against([(reference, gen)])[0]
    assert g.repeats == 9 and g.disturbed and window_efficiency(g, r, n) is None


def test_a_fast_spell_met_by_both_sides_settles_the_window(monkeypatch):
    """The same copy, its reference meeting the fast spell in rounds 4 and 5: the estimates agree on 0."""
    times = {"ref": [0.032] * 7 + [0.032] * 4 + [0.020] * 2, "null": [0.0] * 12,
             "gen0": [0.020, 0.032, 0.032, 0.020, 0.020]}
    executor, reference, [gen], clock = scripted_executor(monkeypatch, times)
    r, n, g = executor.time_against([(reference, gen)])[0]
    assert g.repeats == 5 and not g.disturbed and window_efficiency(g, r, n) == 0.0


def test_each_program_is_compared_with_its_own_window(monkeypatch):
    """The first program's window is a slow spell (reference 36 ms, program 18), the second's a fast
    one (20 and 10): both are half as fast as their reference, and the first, cached, keeps its window."""
    times = {"ref": [0.036] * 7 + [0.036] * 4 + [0.020] * 4, "null": [0.0] * 13, "gen0": [0.018] * 3, "gen1": [0.010] * 3}
    executor, reference, gens, clock = scripted_executor(monkeypatch, times, programs=2)
    (r0, n0, g0), (r1, n1, g1) = executor.time_against([(reference, gens[0]), (reference, gens[1])])
    assert r0.best == 0.036 and window_efficiency(g0, r0, n0) == pytest.approx(0.5)
    assert r1.best == 0.020 and window_efficiency(g1, r1, n1) == pytest.approx(0.5)
    assert executor.time_against([(reference, gens[0])])[0][0].best == 0.036  # cached with its window
    assert executor.timings([reference], reference=True)[0].best == 0.020  # the reference's cache takes every run in


def test_a_failed_run_of_the_program_ends_its_window_at_efficiency_zero(monkeypatch):
    times = {"ref": [0.020] * 7 + [0.020] * 2, "null": [0.0] * 8, "gen0": [None]}
    executor, reference, [gen], clock = scripted_executor(monkeypatch, times)
    r, n, g = executor.time_against([(reference, gen)])[0]
    assert g.best is None and g.repeats == 1 and window_efficiency(g, r, n) == 0.0


def test_a_window_that_does_not_settle_is_not_scored_by_the_suite(monkeypatch):
    import mrgrpo.rewards.code as code
    from mrgrpo.rewards import get_suite

    monkeypatch.setattr(code, "window_settled", lambda program, reference, null: False)  # never agree
    suite = get_suite("code", components=("efficiency",), min_reference_s=0.0, timing_repeats=2, extra_repeats=1)
    heavy = "def check(candidate):\n    assert candidate(100000) == %d\n" % sum(range(100000))
    reference = "def f(n):\n    t = 0\n    for i in range(n):\n        t += i\n    return t\n"
    columns = {"test": [heavy], "entry_point": ["f"], "code_prefix": [""], "test_format": ["humaneval"],
               "reference": [reference]}
    state = code.code_state(suite)
    assert suite.components[0](["p"], [reference + "# copy\n"], **columns) == [None]  # abstains
    timing = next(t for k, t in state.executor._timings.items() if k[0] is False)
    assert timing.disturbed and timing.repeats == 3  # up to the cap, then disturbed
