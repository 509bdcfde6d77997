"""The papers' worked examples, as data: used by ``mrgrpo advantages --example`` and the tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class WorkedExample:
    """One group of rollouts from a paper, with the estimator settings the paper used."""

    title: str
    source: str
    names: tuple[str, ...]
    rewards: tuple[tuple[float, ...], ...]
    #: column label -> (estimator, options) as the paper computes it
    columns: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    #: column label -> advantages printed in the paper (rounded)
    paper_values: dict[str, tuple[float, ...]] = field(default_factory=dict)
    note: str = ""
    reward_ranges: tuple[tuple[float, float], ...] | None = None


EXAMPLES: dict[str, WorkedExample] = {
    "corrgrpo-fig2": WorkedExample(
        title="CorrGRPO Figure 2: a high-variance reward dominates GRPO's denominator",
        source="CorrGRPO, Figure 2 (one group, 4 trajectories, 3 rewards)",
        names=("r1", "r2", "r3"),
        rewards=((0.10, 0.18, 0.80), (0.18, 0.10, 7.28), (0.82, 0.90, 8.00), (0.90, 0.82, 1.52)),
        columns={
            "GRPO": ("grpo", {"eps": 0.0}),
            "CorrGRPO": ("corr_grpo", {}),
            "GDPO": ("gdpo", {}),
        },
        paper_values={
            "GRPO": (-1.0954, 0.5477, 1.0954, -0.5477),
            "CorrGRPO": (-1.8607, 0.9304, 1.8607, -0.9304),
        },
        note="Var(r3) = 14.1696 of Var(total) = 15.5520; GRPO scale 1/sqrt(15.552) = 0.2536, "
        "CorrGRPO scale 1/sqrt(Σρ) = 0.4307 with ρ12 = 0.9756, ρ13 = ρ23 = 0.1098.",
    ),
    "sa-mrpo-sign-flip": WorkedExample(
        title="SA-MRPO: a saturated format reward flips the sign of rollout 3",
        source="SA-MRPO worked example (one group of 4; ranges [0, 1]; before batch normalization)",
        names=("format", "correctness"),
        rewards=((0.97, 0.00), (0.99, 0.01), (1.00, 0.00), (0.98, 0.05)),
        columns={
            "GDPO": ("gdpo", {"eps": 0.0, "ddof": 0, "batch_norm": False}),
            "SA-MRPO": (
                "sa_mrpo",
                {"eps": 0.0, "ddof": 0, "batch_norm": False, "gamma": 1.0, "reward_ranges": [(0, 1), (0, 1)]},
            ),
        },
        paper_values={"GDPO": (None, None, 0.61, None), "SA-MRPO": (None, None, -0.69, 1.65)},
        note="Saturations: format 0.985, correctness 0.015, so γ=1 weights are 0.015 and 0.985. "
        "Exact arithmetic gives −0.697 / +1.666 (the paper prints −0.69 / +1.65).",
        reward_ranges=((0.0, 1.0), (0.0, 1.0)),
    ),
}
