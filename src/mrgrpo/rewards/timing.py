"""Timing of programs for the ``efficiency`` reward: repeated runs and the window statistic.

The CPU time one run takes moves with the machine: on a VM whose cores the host shares, the
same run takes 1x to about 1.9x its fastest time, the factor changing in spells of a hundred
milliseconds to seconds, and under load the fastest conditions can be rare. A program is
therefore timed in a *window* of its own: reference r_0, then rounds of (program g_i, null
program n_i, reference r_i), and scored only where the window shows it ran under conditions it
can be compared in:

* **at the floor**: rounds whose two reference runs (before and after the program's run) are
  both within :data:`FLOOR` of the reference's best of all its runs (the machine's fastest
  conditions, as the reference has met them); the program's smallest time among such rounds
  that a second one confirms (within :data:`CONFIRM`) is compared with that best (the null
  program's best subtracted from both);
* **steady**: at least two thirds of the program's runs, and of the reference's, within
  :data:`STEADY` of their window's median (one speed throughout, whatever it is): the medians
  are compared (the null program's fastest run of the window subtracted), and must agree within
  :data:`AGREE` with the median over rounds of each program run against the mean of the two
  reference runs around it; the lower of the two is the score.

A window that shows neither gets more rounds (up to the cap), then abstains: the program's timing
is ``disturbed`` and efficiency is ``None``. Comparing a program's best run with the reference's
best of all time (the rule before) paid a fast program 0.2 instead of 0.5 whenever only the
reference had met a fast spell; comparing two minima within the window paid a copy whose one run
met such a spell alone. See docs/sandbox.md for the measurements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mrgrpo.rewards.sandbox import Result

#: A reference run is at the floor within this factor of the reference's best of all its runs.
FLOOR = 1.10
#: A program's time at the floor counts where a second run at the floor is within this factor.
CONFIRM = 1.08
#: A window is steady where two thirds of each program's runs are within this share of the median.
STEADY = 0.06
#: A steady window's comparison of medians and its comparison by rounds agree within this much.
AGREE = 0.05
#: References faster than this are not judged: runs this short spread in steps far wider than any
#: slowdown; the program gets ``timing_repeats`` rounds and its best against the reference's.
FAIRNESS_MIN_S = 1e-3


def efficiency(t_gen: float | None, t_ref: float | None, t_null: float | None = None) -> float:
    """``clip(1 - (t_gen - t_null) / (t_ref - t_null), 0, 1)``: the share of the reference's own
    work (its time beyond the harness's, ``t_null``; 0 when unknown) that the program saves. 0
    when ``t_gen`` or ``t_ref`` is missing or the reference takes no longer than the harness."""
    if t_gen is None or t_ref is None:
        return 0.0
    base = t_null or 0.0
    work = t_ref - base
    if work <= 0:
        return 0.0
    return min(1.0, max(0.0, 1.0 - (t_gen - base) / work))


@dataclass(frozen=True)
class Timing:
    """Times (seconds) of repeated runs of one program, each run alone: the CPU time the kernel
    counted for the program from loading to its last reply (``Result.cpu_time``), or, where the
    judge cannot read it, the judge's wall clock over loading and calls (``Result.test_time``;
    ``clock`` says which). ``best``: the minimum; ``median``, ``worst``: the spread; ``times``:
    every time kept (the newest 256), in the order the runs were made. ``None`` fields when a
    repeat did not pass. A program's timing also carries ``against``: the ``(reference, null
    program)`` timings of its window (their runs interleaved with its own), ``floors``: the best
    times of the reference and of the null program over all their runs up to the end of the
    window, and ``disturbed``: the window showed no comparable conditions (:func:`window_score`:
    efficiency abstains)."""

    best: float | None
    median: float | None
    worst: float | None
    repeats: int
    clock: str = "cpu"
    times: tuple[float, ...] = ()
    disturbed: bool = False
    against: tuple[Timing, Timing] | None = None
    floors: tuple[float, float] | None = None

    @classmethod
    def of(cls, results: Sequence[Result]) -> Timing:
        if not results or not all(r.passed for r in results):
            return cls(None, None, None, len(results))
        clock = "cpu" if all(r.cpu_time is not None for r in results) else "wall"
        return cls.from_times(tuple((r.cpu_time if clock == "cpu" else r.test_time) or 0.0 for r in results), clock)

    @classmethod
    def from_times(cls, times: tuple[float, ...], clock: str) -> Timing:
        times = times[-256:]
        ordered = sorted(times)
        return cls(ordered[0], ordered[len(ordered) // 2], ordered[-1], len(times), clock, times)

    def merged(self, other: Timing) -> Timing:
        """This timing with ``other``'s runs added (ignored when they failed or used another clock)."""
        if other.best is None or self.best is None or other.clock != self.clock:
            return self if self.best is not None else other
        return Timing.from_times(self.times + other.times, self.clock)


def base(null: Timing, reference: Timing) -> float:
    """``t_null``: the null program's best time, 0 where it has none (or another clock)."""
    return null.best if null.best is not None and null.clock == reference.clock else 0.0


def _median(values: Sequence[float]) -> float:
    ordered, middle = sorted(values), len(values) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _steady(times: Sequence[float]) -> bool:
    middle = _median(times)
    return 3 * sum(abs(t - middle) <= STEADY * middle for t in times) >= 2 * len(times)


def window_score(program: Timing, reference: Timing, null: Timing) -> float | None:
    """The program's efficiency from its window (module docstring): at the floor, else where the
    window was steady, else ``None``. ``program.times``: g_1..g_k, ``reference.times``: r_0..r_k,
    ``null.times``: n_1..n_k (empty where there is no null program), in the order they ran;
    ``program.floors``: the reference's and the null program's best of all time. ``None`` also
    where the window cannot be read so (a failed run, another clock)."""
    gens, refs, nulls = program.times, reference.times, null.times
    if (program.best is None or reference.best is None or program.clock != reference.clock
            or not gens or len(refs) != len(gens) + 1):
        return None
    ref_floor, null_floor = program.floors or (reference.best, base(null, reference))
    if ref_floor < FAIRNESS_MIN_S:
        return efficiency(program.best, ref_floor, null_floor)
    at_floor = sorted(g for g, before, after in zip(gens, refs, refs[1:]) if max(before, after) <= FLOOR * ref_floor)
    for g, next_one in zip(at_floor, at_floor[1:]):
        if next_one <= CONFIRM * g:
            return efficiency(g, ref_floor, null_floor)
    if len(gens) >= 3 and _steady(gens) and _steady(refs):
        # the null program's fastest run of the window, not its median: a run can be charged a
        # fixed few milliseconds more on its own (mrgrpo.rewards.code._avoidable), and a median of
        # hit null runs against unhit reference runs left the work a sliver (measured: a
        # self-served copy on 300 light calls scored 1.0, nulls 2.8, 1.48, 8.79 ms against a
        # reference of 2.9 ms). A lower t_null can only lower the score of a program faster than
        # its reference.
        t_null = min(nulls) if nulls and null.clock == reference.clock else 0.0
        by_medians = efficiency(_median(gens), _median(refs), t_null)
        by_rounds = _median([efficiency(g, (before + after) / 2, t_null) for g, before, after in zip(gens, refs, refs[1:])])
        if abs(by_medians - by_rounds) <= AGREE:
            return min(by_medians, by_rounds)
    return None


def harness_ratio(reference: Timing, null: Timing, floors: tuple[float, float] | None = None) -> float:
    """``t_null / (t_ref - t_null)``: the harness's time as a share of the reference's own work,
    from floors: ``floors`` (a program's: the reference's and the null program's best of all
    their runs up to the end of its window), else the two timings' best times. 0 without a null
    program; infinite where the reference takes no longer than it.

    Floors, not the window's rounds: a run can be charged a fixed few milliseconds more, hit or
    not on its own (``mrgrpo.rewards.code._avoidable``), and on HumanEval/32 (reference 6-7 ms,
    null program 0.6 ms) a hit null run against an unhit reference read 0.7-infinite where the
    floors read 0.11, so a window's median over its rounds went over ``max_harness_share`` in
    3 of 8 copies' windows (load 2.6) and the problem was left unscored. The floors are what
    :func:`window_score` compares at the floor; where they come from different spells of a slow
    machine the ratio is off by at most that spell's factor."""
    if null.best is None or null.clock != reference.clock or reference.best is None:
        return 0.0
    ref_floor, null_floor = floors or (reference.best, null.best)
    if not null_floor:
        return 0.0
    work = ref_floor - null_floor
    return null_floor / work if work > 0 else float("inf")


def window_efficiency(program: Timing, reference: Timing, null: Timing) -> float | None:
    """The program's efficiency from its window: 0 where a run of the program failed; ``None``
    where the window is ``disturbed`` (or cannot be read); else :func:`window_score`."""
    if program.best is None:
        return 0.0
    if program.disturbed:
        return None
    return window_score(program, reference, null)
