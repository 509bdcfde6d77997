"""How mrgrpo estimators are named in verl's registry (``mrgrpo_<name>``), in one place that
every module of the integration can import."""

from __future__ import annotations

from enum import Enum
from typing import Any

PREFIX = "mrgrpo_"


def verl_name(estimator: str) -> str:
    """The name an mrgrpo estimator has in verl's registry."""
    return PREFIX + estimator


def mrgrpo_name(adv_estimator: Any) -> str | None:
    """The mrgrpo estimator behind a verl ``adv_estimator`` value, or ``None`` if not ours."""
    name = adv_estimator.value if isinstance(adv_estimator, Enum) else adv_estimator
    if isinstance(name, str) and name.startswith(PREFIX):
        return name[len(PREFIX):]
    return None
