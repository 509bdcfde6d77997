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


def test_tool_use_is_the_overlap_of_what_ran_with_what_the_ground_truth_calls():
    from mrgrpo.rewards.agentdojo_runtime import ground_truth_order, replay_episode, tool_overlap

    item = AgentItem("banking", "user_task_14")
    assert ground_truth_order("banking", "user_task_14") == ("get_most_recent_transactions", "update_password")
    needed = ground_truth_tools("banking", "user_task_14")
    assert tool_overlap(item, frozenset(needed)) == 1.0
    assert tool_overlap(item, frozenset({"update_password"})) == 0.5
    assert tool_overlap(item, frozenset({"update_password", "get_balance"})) == pytest.approx(1 / 3)
    assert tool_overlap(item, frozenset()) == 0.0
    every_tool = frozenset(["get_iban", "send_money", "schedule_transaction", "update_scheduled_transaction",
                            "get_balance", "get_most_recent_transactions", "get_scheduled_transactions", "read_file",
                            "get_user_info", "update_password", "update_user_info"])
    assert tool_overlap(item, every_tool) == pytest.approx(2 / 11)  # calling everything is not paid as the right choice
    # only calls that ran without error count: a call with a wrong argument runs nothing
    wrong = replay_episode(item, [[("update_password", {"not_a_parameter": "x"})]], "")
    right = replay_episode(item, [[("update_password", {"password": "1j1l-2k3j"})]], "")
    assert wrong.used == frozenset() and right.used == {"update_password"}
    assert right.utility and not wrong.utility
