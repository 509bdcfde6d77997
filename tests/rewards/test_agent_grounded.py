"""The agent suite pays utility only to an episode that called a ground-truth tool (no pay for lucky text)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("agentdojo")

from mrgrpo.rewards.agentdojo_runtime import AgentItem, ground_truth_calls, ground_truth_tools, replay  # noqa: E402
from mrgrpo.rewards import get_suite  # noqa: E402

DIGITS = " ".join(str(i) for i in range(2100))  # contains every expected number of the QA tasks


@pytest.mark.parametrize("suite,user_task", [("banking", "user_task_1"), ("banking", "user_task_7"), ("workspace", "user_task_27")])
def test_a_dump_of_digits_passes_agentdojo_but_earns_no_utility(suite, user_task):
    item = AgentItem(suite, user_task)
    assert replay(item, [], DIGITS) == (True, None)  # AgentDojo's check alone: paid
    assert replay(item, [], DIGITS, grounded=True) == (False, None)
    calls = ground_truth_calls(item)
    assert calls and {name for name, _ in calls} == set(ground_truth_tools(suite, user_task))
    assert replay(item, [calls], DIGITS, grounded=True) == (True, None)  # looked it up: paid


def test_the_suite_applies_the_rule_and_can_turn_it_off():
    item = {"suite": ["banking"], "user_task": ["user_task_7"], "injection_task": [""], "attack": [""],
            "version": [""], "injections": [""]}
    trace = json.dumps({"turns": [DIGITS], "final": DIGITS})
    for grounded, expected in ((True, 0.0), (False, 1.0)):
        suite = get_suite("agent", workers=0, grounded=grounded)
        utility = suite.components[0]
        assert utility.fn([""], [DIGITS], agent_trace=[trace], **item) == [expected]
    with pytest.raises(ValueError, match="grounded must be true or false"):
        get_suite("agent", grounded="yes")
