"""Efficiency timing (``mrgrpo.rewards.timing``): a program is scored only from its own window,
at the floor the reference has shown or within a steady window; windows scripted run by run
(``ScriptedClock``) check the executor's rounds, and hand-derived windows the statistic."""

from __future__ import annotations

import dataclasses

import pytest

from mrgrpo.rewards.code import CodeExecutor, CodeRewardState
from mrgrpo.rewards.sandbox import Job, Limits, Result, Verdict
from mrgrpo.rewards.timing import Timing, efficiency, harness_ratio, window_efficiency, window_score

LIMITS = Limits(wall_s=10.0, cpu_s=5)


def window(refs, gens, nulls=None, floors=None, clock="cpu"):
    """The (program, reference, null) Timings of a window: r0, then rounds (g_i, n_i, r_i);
    ``floors``: the reference's and null program's best of all time (default: the window's)."""
    nulls = nulls or [0.0] * len(gens)
    program = dataclasses.replace(Timing.from_times(tuple(gens), clock), floors=floors or (min(refs), min(nulls)))
    return program, Timing.from_times(tuple(refs), clock), Timing.from_times(tuple(nulls), clock)


def test_efficiency_subtracts_the_harness_cost():
    assert efficiency(3.0, 5.0, 1.0) == 0.5  # half the reference's own work (4 s beyond the harness's 1 s)
    assert efficiency(3.0, 5.0) == 1 - 3 / 5  # no null program: the plain ratio
    assert efficiency(1.0, 1.0, 1.0) == 0.0  # a reference that does nothing beyond the harness
    assert efficiency(0.5, 5.0, 1.0) == 1.0  # faster than the harness: clipped


def test_at_the_floor_the_smallest_confirmed_time_counts():
    # every round's reference runs (20-21 ms) within 1.10 x the best of all time (20 ms): 10 ms is
    # confirmed by 10.5 (<= 10 x 1.08), so 1 - (10 - 2) / (20 - 2) with the null program's best 2 ms
    at_floor = window([0.020, 0.021, 0.021, 0.020], [0.012, 0.010, 0.0105], floors=(0.020, 0.002))
    assert window_score(*at_floor) == pytest.approx(1 - 8 / 18)
    # a lone fast run is not confirmed (14 > 10.8, 16 > 15.1), and the program's runs are not steady
    assert window_score(*window([0.020] * 4, [0.010, 0.014, 0.016], floors=(0.020, 0.0))) is None
    # a round counts only if both reference runs around the program's were at the floor: here only
    # the first (20, 21); the 9 ms run between 21 and 30 ms does not count
    assert window_score(*window([0.020, 0.021, 0.030, 0.030], [0.016, 0.009, 0.016], floors=(0.020, 0.0))) is None


def test_a_steady_window_compares_its_medians():
    # the reference's best of all time was 20 ms, this window ran at 1.6x throughout: no round at
    # the floor, but one speed: 1 - 16/32 by medians and by rounds
    assert window_score(*window([0.032] * 4, [0.016, 0.0165, 0.016], floors=(0.020, 0.0))) == pytest.approx(
        1 - 0.016 / 0.032)
    # two thirds within 6% of the median suffice (one run of the program off, at 25 ms): medians 16 and
    # 32, rounds 0.5, 0.5, 0.22 (median 0.5)
    assert window_score(*window([0.032] * 4, [0.016, 0.016, 0.025], floors=(0.020, 0.0))) == pytest.approx(0.5)
    # ... where the comparison by rounds agrees: a reference run off at 40 ms moves it to 0.56 (> 0.05 away)
    assert window_score(*window([0.032, 0.040, 0.032, 0.032], [0.016, 0.016, 0.025], floors=(0.020, 0.0))) is None
    # half the runs at one speed and half at another is not steady
    assert window_score(*window([0.032, 0.020, 0.032, 0.020], [0.016, 0.010, 0.016], floors=(0.015, 0.0))) is None


def test_a_steady_window_subtracts_the_null_programs_fastest_run():
    # a window at 1.5x throughout (the reference 6 ms against a best of all time of 4), a program
    # with half its own work (3.3 ms), null runs 0.6 ms of which two were charged 4 ms more: by
    # their median the work left was 6 - 4.6 = 1.4 ms and the program was paid 1.0; by the fastest
    # null run 1 - 2.7 / 5.4
    hit = window([0.006] * 4, [0.0033] * 3, nulls=[0.0006, 0.0046, 0.0046], floors=(0.004, 0.0004))
    assert window_score(*hit) == pytest.approx(0.5)
    copy = window([0.006] * 4, [0.006] * 3, nulls=[0.0046, 0.0006, 0.0046], floors=(0.004, 0.0004))
    assert window_score(*copy) == pytest.approx(0.0)


def test_the_harness_ratio_is_read_from_floors_whatever_hits_single_runs():
    # HumanEval/32 as measured under load: reference 6 ms, null program 0.6 ms, and any run may be
    # charged about 4 ms more on its own. In this window every null run was hit and one reference
    # run: per round 4.6 / (10 - 4.6) = 0.85 (the median the rule read before), by the floors the
    # program's window carries (the reference's and null program's best of all time) 0.6 / 5.4
    _, reference, null = window([0.006, 0.010, 0.010, 0.010], [0.010] * 3, nulls=[0.0046] * 3)
    assert harness_ratio(reference, null, (0.006, 0.0006)) == pytest.approx(0.6 / 5.4)
    assert harness_ratio(reference, null) == pytest.approx(4.6 / 1.4)  # no floors: the window's best times
    assert harness_ratio(reference, Timing(None, None, None, 0)) == 0.0  # no null program
    assert harness_ratio(reference, null, (0.006, 0.0)) == 0.0  # floors without a null program's time
    assert harness_ratio(reference, null, (0.002, 0.003)) == float("inf")  # the reference no longer than it


def test_the_avoidable_share_of_the_harness_is_read_from_floors():
    from mrgrpo.rewards.code import _avoidable

    # null 0.6 ms, bare 0.3 ms; runs hit on their own (+4 ms): a per-round median read 0.08-0.21
    null = Timing.from_times((0.0006, 0.0046, 0.0046, 0.0006, 0.0050), "cpu")
    bare = Timing.from_times((0.0040, 0.0003, 0.0041, 0.0040, 0.0003), "cpu")
    assert _avoidable(null, bare) == pytest.approx(0.5)
    # a bare program whose every run was hit reads no faster than the null program: not comparable,
    # so all of the null program's time counts as avoidable (the deduction errs high, never low)
    assert _avoidable(null, Timing.from_times((0.0040,) * 5, "cpu")) == 1.0
    assert _avoidable(null, Timing(None, None, None, 5)) == 1.0  # no bare time: all of it
    assert _avoidable(null, Timing.from_times((0.0003,) * 5, "wall")) == 1.0  # another clock


def test_a_window_whose_null_runs_were_all_hit_is_still_scored(monkeypatch):
    """HumanEval/32's case, run by run: the reference and null program first timed unhit (6 and
    0.6 ms), then a window in which every run is charged 4 ms more (a steady window). A program
    with half the reference's own work (0.6 + 2.7 ms) scores 0.5 less the deduction read from the
    floors (all of the null program's time: no bare program here), 0.6 / 5.4. The window's own
    rounds read 4.6 / (10 - 4.6) = 0.85 > max_harness_share: the problem was left unscored."""
    times = {"ref": [0.006] * 7 + [0.010] * 4, "null": [0.0006] * 7 + [0.0046] * 3, "gen0": [0.0073] * 3}
    executor, reference, [gen], clock = scripted_executor(monkeypatch, times)
    state = CodeRewardState(executor, True)
    r, n, g = executor.time_against([(reference, gen)])[0]
    [avoidable] = executor.harness([reference])
    assert not g.disturbed and g.floors == (0.006, 0.0006) and avoidable == 1.0
    assert window_efficiency(g, r, n) == pytest.approx(0.5)
    assert state.score(r, n, g, avoidable) == pytest.approx(0.5 - 0.6 / 5.4)


def test_what_a_self_served_pipe_could_save_is_deducted_or_abstains():
    state = CodeRewardState(CodeExecutor(LIMITS), True)  # max_harness_share 0.15
    # steady window, program at half the reference's own work: 1 - 11/22 = 0.5; the null program is
    # 2/22 of the work, of which the bare program could skip 40%: 0.036 deducted
    program, reference, null = window([0.024] * 4, [0.013] * 3, nulls=[0.002] * 3, floors=(0.024, 0.002))
    assert window_efficiency(program, reference, null) == pytest.approx(0.5)
    assert state.score(reference, null, program, 0.4) == pytest.approx(0.5 - 0.4 * 2 / 22)
    assert state.score(reference, null, program, 0.0) == pytest.approx(0.5)
    # all of it avoidable: 2/22 = 0.09 <= 0.15, deducted; a null program of 4 ms (4/20 = 0.2 > 0.15) abstains
    assert state.score(reference, null, program) == pytest.approx(0.5 - 2 / 22)
    program, reference, null = window([0.024] * 4, [0.014] * 3, nulls=[0.004] * 3, floors=(0.024, 0.004))
    assert state.score(reference, null, program, 1.0) is None
    assert state.score(reference, null, program, 0.25) == pytest.approx(0.5 - 0.25 * 0.2)
    # a copy is never below 0; without the bound (max_harness_share None) nothing is deducted
    copy = window([0.024] * 4, [0.024] * 3, nulls=[0.004] * 3, floors=(0.024, 0.004))
    assert state.score(copy[1], copy[2], copy[0], 0.25) == 0.0
    unbounded = CodeRewardState(CodeExecutor(LIMITS), True, max_harness_share=None)
    assert unbounded.score(reference, null, program, 1.0) == pytest.approx(0.5)


def test_windows_that_cannot_be_read():
    program, reference, null = window([0.02] * 4, [0.010, 0.020, 0.015])
    assert window_score(program, Timing.from_times((0.02,) * 3, "cpu"), null) is None  # not r0 plus one a round
    wall = dataclasses.replace(Timing.from_times((0.010,) * 3, "wall"), floors=(0.02, 0.0))
    assert window_score(wall, reference, null) is None  # two clocks
    assert window_efficiency(Timing(None, None, None, 3), reference, null) == 0.0  # a failed run decides
    assert window_efficiency(dataclasses.replace(program, disturbed=True), reference, null) is None
    # references under a millisecond: the program's best against the reference's, no abstention
    assert window_score(*window([0.0008] * 4, [0.0004, 0.0008, 0.0007], floors=(0.0008, 0.0))) == pytest.approx(0.5)


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
    assert window_efficiency(g, r, n) == pytest.approx(1 - 0.016 / 0.03225)  # medians: 16 against 32.25 ms
    assert all(not ts for ts in clock.times.values())  # three rounds: the estimates agreed at once


def test_a_copy_whose_one_run_met_a_fast_spell_alone_is_not_paid(monkeypatch):
    """A copy (same work, 32 ms) whose first run met a fast spell (20 ms) no reference run met: its
    smallest time at the floor is not confirmed, its second is (32 and 32): efficiency 0. Comparing
    the two minima of the window would have paid it 0.375."""
    times = {"ref": [0.032] * 7 + [0.032] * 4, "null": [0.0] * 10, "gen0": [0.020, 0.032, 0.032]}
    executor, reference, [gen], clock = scripted_executor(monkeypatch, times)
    r, n, g = executor.time_against([(reference, gen)])[0]
    assert g.repeats == 3 and not g.disturbed and window_efficiency(g, r, n) == 0.0


def test_a_window_whose_speed_changes_every_run_abstains(monkeypatch):
    """The reference alternating between 32 and 20 ms (best of all time 20): no round with both of
    its reference runs at the floor, and no steady speed: rounds up to the cap (3 + 6), then none."""
    times = {"ref": [0.020] * 7 + [0.032, 0.020] * 5, "null": [0.0] * 16, "gen0": [0.016, 0.010] * 5}
    executor, reference, [gen], clock = scripted_executor(monkeypatch, times)
    r, n, g = executor.time_against([(reference, gen)])[0]
    assert g.repeats == 9 and g.disturbed and window_efficiency(g, r, n) is None


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

    monkeypatch.setattr(code, "window_score", lambda program, reference, null: None)  # never comparable
    suite = get_suite("code", components=("efficiency",), min_reference_s=0.0, timing_repeats=2, extra_repeats=1)
    heavy = "def check(candidate):\n    assert candidate(100000) == %d\n" % sum(range(100000))
    reference = "def f(n):\n    t = 0\n    for i in range(n):\n        t += i\n    return t\n"
    columns = {"test": [heavy], "entry_point": ["f"], "code_prefix": [""], "test_format": ["humaneval"],
               "reference": [reference]}
    state = code.code_state(suite)
    assert suite.components[0](["p"], [reference + "# copy\n"], **columns) == [None]  # abstains
    timing = next(t for k, t in state.executor._timings.items() if k[0] is False)
    assert timing.disturbed and timing.repeats == 3  # up to the cap, then disturbed
