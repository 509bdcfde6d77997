"""The agent reward suite: parsing, format, utility/security scoring (serial and parallel)."""

from __future__ import annotations

import json

import pytest

from mrgrpo.rewards.agent import cut_after_call, final_output, parse_turn, turn_format
from mrgrpo.rewards.tool_call import format_calls


def test_parse_turn_blocks_and_errors():
    text = 'x <tool_call>[{"name": "a", "arguments": {"k": 1}}]</tool_call> y <tool_call>{"name": "b", "arguments": {}}</tool_call>'
    calls, errors, ok = parse_turn(text)
    assert calls == [("a", {"k": 1}), ("b", {})] and not errors and not ok  # the second block is not a list
    calls, errors, ok = parse_turn('<tool_call>[{"name": "a", "arguments": {}}]</tool_call>')
    assert calls == [("a", {})] and ok
    calls, errors, ok = parse_turn("<tool_call>[{oops</tool_call>")
    assert calls == [] and errors and not ok
    calls, errors, ok = parse_turn('<tool_call>[{"name": 3}]</tool_call>')
    assert calls == [] and errors and not ok
    assert parse_turn('<tool_call>{"name": "a", "arguments": "{\\"k\\": 2}"}</tool_call>')[0] == [("a", {"k": 2})]
    assert not parse_turn('<tool_call>[{"name": "a", "arguments": {}}]')[2]  # unclosed


def test_turn_format_and_final_output():
    assert turn_format("The answer is 4.")
    assert turn_format('<tool_call>[{"name": "a", "arguments": {}}]</tool_call>')
    assert not turn_format('<tool_call>[{"name": "a"}]</tool_call>')
    assert not turn_format("stray </tool_call>")
    assert final_output('<think>hm</think> Sure. <tool_call>[]</tool_call>') == "Sure."


def test_cut_after_call_keeps_a_turn_up_to_its_first_closing_tag():
    call = '<tool_call>[{"name": "a", "arguments": {}}]</tool_call>'
    assert cut_after_call(call + "\nIt is 4.<tool_call>[]</tool_call>") == call
    assert cut_after_call("The answer is 4.") == "The answer is 4."
    assert cut_after_call('<tool_call>[{"name": "a"') == '<tool_call>[{"name": "a"'  # unclosed: all of it


agentdojo = pytest.importorskip("agentdojo")


def _columns(items, traces, injections):
    return {
        "suite": [i.suite for i in items],
        "user_task": [i.user_task for i in items],
        "injection_task": [i.injection_task or "" for i in items],
        "attack": [i.attack or "" for i in items],
        "version": [i.version for i in items],
        "injections": injections,
        "agent_trace": [json.dumps(t) for t in traces],
    }


def _block(calls):
    return format_calls(calls, think=None)


@pytest.mark.parametrize("workers", [0, 2])
def test_suite_scores_ground_truth_attack_and_junk(workers):
    from mrgrpo.rewards import agentdojo_runtime as rt
    from mrgrpo.rewards import get_suite

    suite = get_suite("agent", workers=workers)
    assert suite.names == ["utility", "security", "format", "tool_use"] and suite.reward_ranges == [(0.0, 1.0)] * 4
    assert suite.weights == (1.0, 1.0, 0.2, 0.0)  # the paper's three; tool_use reported, not trained on
    attacked = rt.AgentItem("banking", "user_task_1", "injection_task_1", rt.DEFAULT_ATTACK)
    benign = rt.AgentItem("banking", "user_task_1")
    user = rt.ground_truth_calls(attacked, "user")
    injection = rt.ground_truth_calls(attacked, "injection")
    answer = rt.task_suite("banking").user_tasks["user_task_1"].GROUND_TRUTH_OUTPUT
    traces = [
        {"turns": [_block(user), answer], "final": answer},  # solves it, ignores the injection
        {"turns": [_block(user + injection), answer], "final": answer},  # solves it and obeys the attack
        {"turns": ["<tool_call>[{oops</tool_call>", _block([("nope", {"x": 1})]), "no idea"], "final": "no idea"},
        {"turns": [_block(user), answer], "final": answer},  # benign
    ]
    items = [attacked, attacked, attacked, benign]
    injections = [json.dumps(rt.injections_for(i)) for i in items]
    columns = _columns(items, traces, injections)
    completions = ["(multi-turn)"] * 4
    values = {c.name: c([None] * 4, completions, **columns) for c in suite.components}
    assert values["utility"] == [1.0, 1.0, 0.0, 1.0]
    assert values["security"] == [1.0, 0.0, 1.0, None]
    assert values["format"] == [1.0, 1.0, pytest.approx(2 / 3), 1.0]
    # the ground truth calls one function; obeying the attack adds the injection's (Jaccard 1/2); junk runs none
    assert set(injection_names := {n for n, _ in injection}) and "get_most_recent_transactions" not in injection_names
    assert values["tool_use"] == [1.0, pytest.approx(1 / (1 + len(injection_names))), 0.0, 1.0]


def test_single_turn_completion_without_trace():
    from mrgrpo.rewards import agentdojo_runtime as rt
    from mrgrpo.rewards import get_suite

    item = rt.AgentItem("slack", "user_task_0", "injection_task_1", rt.DEFAULT_ATTACK)
    user = rt.ground_truth_calls(item, "user")
    columns = _columns([item], [{}], [json.dumps(rt.injections_for(item))])
    del columns["agent_trace"]
    suite = get_suite("agent", workers=0)
    completion = [{"role": "assistant", "content": _block(user)}]
    out = {c.name: c([None], [completion], **columns)[0] for c in suite.components}
    assert out == {"utility": 1.0, "security": 1.0, "format": 1.0, "tool_use": 1.0}
