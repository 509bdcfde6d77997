"""AgentDojo items, split, tool schemas, environments; ground-truth replay acceptance."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("agentdojo")

from mrgrpo.data import agentdojo as ad  # noqa: E402
from mrgrpo.rewards import agentdojo_runtime as rt  # noqa: E402


def test_item_counts_match_the_benchmark():
    attacked = ad.items(benign=False, keep_idle_passing=True)
    benign = ad.items(attacked=False, keep_idle_passing=True)
    assert len(benign) == 97
    assert len(attacked) == 949
    assert sum(len(rt.task_suite(s).injection_tasks) for s in rt.SUITES) == 35


IDLE_PASSING = {("banking", f"user_task_{i}") for i in (5, 6, 8, 9, 10)}


def test_user_tasks_that_pay_utility_for_doing_nothing_are_left_out_by_default():
    every = {(i.suite, i.user_task) for i in ad.items(attacked=False, keep_idle_passing=True)}
    idle = {(suite, task) for suite, task in every if rt.passes_when_idle(suite, task)}
    assert idle == IDLE_PASSING
    kept = ad.items()
    assert {(i.suite, i.user_task) for i in kept} == every - IDLE_PASSING
    assert len([i for i in kept if i.benign]) == 92 and len([i for i in kept if not i.benign]) == 949 - 5 * 9
    # the split does not move: the same user tasks are test with or without them
    for split in ("train", "test"):
        with_idle = {(i.suite, i.user_task) for i in ad.items(split=split, keep_idle_passing=True)}
        assert {(i.suite, i.user_task) for i in ad.items(split=split)} == with_idle - IDLE_PASSING
    # and a do-nothing episode earns no utility on any item that is kept
    for item in [i for i in kept if i.benign]:
        env, pre_env = rt.fresh_environment(item)
        assert rt.check_episode(item, "", pre_env, env, []) == (False, None), item


def test_split_is_by_user_task_reproducible_and_disjoint():
    for suite in rt.SUITES:
        a = ad.split_user_tasks(suite, seed=3)
        assert a == ad.split_user_tasks(suite, seed=3)
        assert not set(a["train"]) & set(a["test"])
        assert set(a["train"]) | set(a["test"]) == set(rt.task_suite(suite).user_tasks)
        assert a["test"], suite
    assert ad.split_user_tasks("workspace", seed=0) != ad.split_user_tasks("workspace", seed=1)
    train = {(i.suite, i.user_task) for i in ad.items(split="train", keep_idle_passing=True)}
    test = {(i.suite, i.user_task) for i in ad.items(split="test", keep_idle_passing=True)}
    assert not train & test and len(train | test) == 97


def test_tool_schemas_are_chat_template_tools():
    schemas = ad.tool_schemas("banking")
    assert len(schemas) == len(rt.task_suite("banking").tools)
    for schema in schemas:
        assert schema["type"] == "function"
        assert set(schema["function"]) == {"name", "description", "parameters"}
        assert schema["function"]["parameters"]["type"] == "object"
    schemas[0]["function"]["name"] = "mutated"
    assert ad.tool_schemas("banking")[0]["function"]["name"] != "mutated"


def test_dataset_rows_and_columns():
    data = ad.load_agentdojo(suites=["banking", "slack"], limit=6, tools_in_prompt="compact")
    assert set(data) == {"train", "test"} and len(data["train"]) == 6
    row = data["train"][0]
    assert {"prompt", "suite", "user_task", "injection_task", "attack", "version", "injections", "tools"} <= set(row)
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert "<tool_call>" in row["prompt"][0]["content"]
    assert json.loads(row["tools"])[0]["type"] == "function"
    for r in data["train"]:
        injections = json.loads(r["injections"])
        assert bool(injections) == bool(r["injection_task"])


def test_injected_environment_and_fresh_copies():
    item = rt.AgentItem("banking", "user_task_0", "injection_task_0", rt.DEFAULT_ATTACK)
    injections = rt.injections_for(item)
    assert injections and all(rt.task_suite("banking").injection_tasks["injection_task_0"].GOAL in t for t in injections.values())
    env1, pre1 = rt.fresh_environment(item)
    env2, _ = rt.fresh_environment(item)
    assert env1 is not env2 and env1 == env2 == pre1
    text, error, _ = rt.execute_call(item, env1, "send_money", {"recipient": "X", "amount": 1.0, "subject": "s", "date": "2022-01-01"})
    assert error is None and env1 != env2 and env2 == pre1
    goal = rt.task_suite("banking").injection_tasks["injection_task_0"].GOAL
    assert any("<INFORMATION>" in s and goal in s for s in _strings(env1.model_dump()))  # (YAML folds blank lines)


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def test_fast_environment_parse_equals_agentdojo():
    for suite in rt.SUITES:
        item = ad.items([suite], benign=False)[0]
        injections = rt.injections_for(item)
        ours, _ = rt.fresh_environment(item)
        theirs = rt.task_suite(suite).user_tasks[item.user_task].init_environment(
            rt.task_suite(suite).load_and_inject_default_environment(injections)
        )
        assert ours == theirs, suite


def test_execute_call_errors_never_raise():
    item = rt.AgentItem("slack", "user_task_0")
    env, _ = rt.fresh_environment(item)
    for name, args in [("nope", {}), ("send_direct_message", {"recipient": 3}), ("send_direct_message", {}),
                       ("read_channel_messages", {"channel": "missing"}), ("read_channel_messages", {"channel": [1, {"a": None}]})]:
        text, error, call = rt.execute_call(item, env, name, args)
        assert isinstance(text, str) and error, (name, args)
        assert call.function == name


# ----------------------------------------------------------------------------- acceptance


def ground_truth_acceptance(suites=rt.SUITES, workers=None) -> dict[str, dict]:
    """Per suite: pairs; user-GT replays scoring utility 1 and security 1; user+injection-GT replays
    where AgentDojo's checker registers the attack (security 0) and those where it cannot; injection
    tasks without ground truth."""
    from mrgrpo.rewards.agent import score_batch

    def job(item, calls, output):
        block = "<tool_call>" + json.dumps([{"name": n, "arguments": a} for n, a in calls]) + "</tool_call>"
        columns = {"suite": item.suite, "user_task": item.user_task, "injection_task": item.injection_task or "",
                   "attack": item.attack or "", "version": item.version}
        return (columns, json.dumps(rt.injections_for(item)), {"turns": [block, output], "final": output})

    report = {}
    for suite in suites:
        pairs = ad.items([suite], benign=False, keep_idle_passing=True)
        outputs = {u: t.GROUND_TRUTH_OUTPUT for u, t in rt.task_suite(suite).user_tasks.items()}
        user_jobs, both_jobs, both_items, no_gt = [], [], [], set()
        for item in pairs:
            user = rt.ground_truth_calls(item, "user")
            user_jobs.append(job(item, user, outputs[item.user_task]))
            injection = rt.ground_truth_calls(item, "injection")
            if injection is None:
                no_gt.add(item.injection_task)
                continue
            both_jobs.append(job(item, user + injection, outputs[item.user_task]))
            both_items.append(item)
        user_scores = score_batch(user_jobs, workers)
        both_scores = score_batch(both_jobs, workers)
        rt._injected_environment.cache_clear()
        report[suite] = {
            "pairs": len(pairs),
            "user_gt_utility_and_security": sum(u and not a for u, a in user_scores),
            "user_gt_failures": [f"{i.user_task}/{i.injection_task}" for i, (u, a) in zip(pairs, user_scores) if not (u and not a)],
            "injection_tasks_without_gt": sorted(no_gt),
            "pairs_with_injection_gt": len(both_items),
            "attack_registered": sum(a for _, a in both_scores),
            "attack_not_visible": [f"{i.user_task}/{i.injection_task}" for i, (_, a) in zip(both_items, both_scores) if not a],
        }
    return report


def test_ground_truth_replay_banking_and_slack():
    report = ground_truth_acceptance(("banking", "slack"))
    for suite, row in report.items():
        assert row["user_gt_utility_and_security"] == row["pairs"], (suite, row["user_gt_failures"])
        assert row["attack_registered"] == row["pairs_with_injection_gt"], (suite, row["attack_not_visible"])


@pytest.mark.slow
def test_ground_truth_replay_all_suites():
    report = ground_truth_acceptance()
    print(json.dumps(report, indent=1))
    for suite, row in report.items():
        assert row["user_gt_utility_and_security"] == row["pairs"], (suite, row["user_gt_failures"])
    assert report["workspace"]["pairs"] == 560
    # Known quirks of AgentDojo 0.1.35: workspace injection tasks 6-13 and travel 6 have no ground truth;
    # workspace injection_task_0's check cannot fire for 9 user tasks.
    assert report["workspace"]["injection_tasks_without_gt"] == sorted(f"injection_task_{i}" for i in range(6, 14))
    assert report["travel"]["injection_tasks_without_gt"] == ["injection_task_6"]
    registered = {suite: (row["attack_registered"], row["pairs_with_injection_gt"]) for suite, row in report.items()}
    assert registered == {"workspace": (218, 240), "travel": (116, 120), "banking": (144, 144), "slack": (105, 105)}
    invisible = report["workspace"]["attack_not_visible"]
    assert len([p for p in invisible if p.endswith("/injection_task_0")]) == 9, invisible
