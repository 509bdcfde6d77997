"""Reward components and suites (code, math, tool calling)."""

from mrgrpo.rewards.base import (
    RewardComponent,
    RewardSuite,
    SuiteInfo,
    available_suites,
    completion_text,
    conditioned,
    get_suite,
    register_suite,
    suite_info,
    suites_with_option,
)

__all__ = [
    "RewardComponent",
    "RewardSuite",
    "SuiteInfo",
    "available_suites",
    "completion_text",
    "conditioned",
    "get_suite",
    "register_suite",
    "suite_info",
    "suites_with_option",
]
