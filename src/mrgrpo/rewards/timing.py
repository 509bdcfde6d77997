"""Timing of programs for the ``efficiency`` reward: repeated runs and the window statistic.

A program's runs are compared only with runs of its reference and of the problem's null
program made in the same *window*, interleaved with its own (reference r0, then rounds of
program g_i, null program n_i, reference r_i), never with runs made at other times: the CPU time
one run takes moves with the machine (on a VM whose CPUs are shared, the same run takes 1x to
about 1.9x its uncontended time, in spells), so a minimum over runs made at another time is a
minimum over other conditions. Two estimates of the share of the reference's own work that the
program saves are made from one window (both subtract the harness's share ``t_null``, the
window's best null-program run):

* by minima: ``1 - (min g - t_null) / (min r - t_null)``; noise only adds time, so each
  minimum approaches its program's time in the fastest conditions the window had, if both
  programs ran in them;
* by rounds: the median over rounds of ``1 - (g_i - t_null) / ((r_{i-1} + r_i) / 2 - t_null)``,
  each program run against the two reference runs around it, under (nearly) the same
  conditions; a run that met a spell its neighbours did not is an outlier the median drops.

Where both agree within :data:`AGREE` the window is scored with the lower of the two; where
they do not (one program met fast conditions the other never met in the window, or the
conditions changed from run to run) the window gets more rounds, and if they still disagree the
program is ``disturbed``: efficiency abstains. See docs/sandbox.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mrgrpo.rewards.sandbox import Result

#: The two estimates of one window (by minima, by rounds) agree when they differ by at most this
#: much (in efficiency, the share of the reference's own work): the window is scored with the
#: lower; otherwise it gets more rounds, then abstains.
AGREE = 0.10
#: References faster than this are not judged for agreement: runs this short spread in steps far
#: wider than any slowdown; the program gets ``timing_repeats`` rounds and the lower estimate.
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
    program)`` timings of its window (their runs interleaved with its own: :func:`window_estimates`),
    and ``disturbed``: the window's two estimates disagreed (efficiency abstains)."""

    best: float | None
    median: float | None
    worst: float | None
    repeats: int
    clock: str = "cpu"
    times: tuple[float, ...] = ()
    disturbed: bool = False
    against: tuple[Timing, Timing] | None = None

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


def window_estimates(program: Timing, reference: Timing, null: Timing) -> tuple[float, float] | None:
    """``(by minima, by rounds)``: the two estimates of the program's efficiency from one window
    (module docstring). ``program.times``: g_1..g_k; ``reference.times``: r_0..r_k, in the order
    they ran; ``None`` where the window cannot be read so (a failed run, another clock, a
    reference with fewer than ``k + 1`` runs)."""
    gens, refs = program.times, reference.times
    if (program.best is None or reference.best is None or program.clock != reference.clock
            or not gens or len(refs) != len(gens) + 1):
        return None
    t_null = base(null, reference)
    by_minima = efficiency(program.best, reference.best, t_null)
    rounds = sorted(efficiency(g, (before + after) / 2, t_null) for g, before, after in zip(gens, refs, refs[1:]))
    middle = len(rounds) // 2
    by_rounds = rounds[middle] if len(rounds) % 2 else (rounds[middle - 1] + rounds[middle]) / 2
    return by_minima, by_rounds


def window_settled(program: Timing, reference: Timing, null: Timing) -> bool:
    """No more rounds can change the window's verdict: its two estimates agree, or it cannot be
    read (:func:`window_estimates`), or its reference is under :data:`FAIRNESS_MIN_S`."""
    estimates = window_estimates(program, reference, null)
    if estimates is None or (reference.best or 0.0) < FAIRNESS_MIN_S:
        return True
    return abs(estimates[0] - estimates[1]) <= AGREE


def window_efficiency(program: Timing, reference: Timing, null: Timing) -> float | None:
    """The program's efficiency from its window: the lower of the two estimates; 0 where a run of
    the program failed; ``None`` where the window is ``disturbed`` or cannot be read."""
    if program.best is None:
        return 0.0
    estimates = window_estimates(program, reference, null)
    if estimates is None or program.disturbed:
        return None
    return min(estimates)
