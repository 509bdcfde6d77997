"""Shared fixtures of the training tests: tiny-preset configs and a run directory."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mrgrpo.train.defaults import TINY_CONFIG


def tiny_config(**changes: Any) -> dict[str, Any]:
    """The tiny preset's config with top-level changes (``trainer`` entries merged)."""
    data = copy.deepcopy(TINY_CONFIG)
    trainer = changes.pop("trainer", {})
    data.update(changes)
    data["trainer"].update(trainer)
    return data


@pytest.fixture
def tiny() -> Any:
    return tiny_config
