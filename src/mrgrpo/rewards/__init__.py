"""Reward components and suites (code, math, tool calling)."""

from mrgrpo.rewards.base import (
    RewardComponent,
    RewardSuite,
    available_suites,
    completion_text,
    conditioned,
    get_suite,
    register_suite,
)

__all__ = [
    "RewardComponent",
    "RewardSuite",
    "available_suites",
    "completion_text",
    "conditioned",
    "get_suite",
    "register_suite",
]
