"""Multi-turn AgentDojo rollouts: scripted-policy parity with AgentDojo's own pipeline, errors, training."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("agentdojo")

from mrgrpo.data import agentdojo as ad  # noqa: E402
from mrgrpo.rewards.agent import score_batch  # noqa: E402
from mrgrpo.train.agent_rollout import Episode, episode_for, run_episodes  # noqa: E402


def _block(calls) -> str:
    return "<tool_call>" + json.dumps([{"name": n, "arguments": a} for n, a in calls]) + "</tool_call>"


def scripts_for(item: ad.AgentItem) -> list[list[str]]:
    """Fixed turn sequences: user ground truth one call per turn; user + injection ground truth in
    one turn; junk (unknown tool, bad arguments) then the truth."""
    user = ad.ground_truth_calls(item, "user") or []
    injection = (ad.ground_truth_calls(item, "injection") or []) if not item.benign else []
    answer = ad.task_suite(item.suite).user_tasks[item.user_task].GROUND_TRUTH_OUTPUT or "Done."
    junk = [
        _block([("no_such_tool", {"x": 1})]),
        _block([(user[0][0] if user else "no_such_tool", {"not_a_parameter": [1, 2]})]),
    ]  # (an unparseable block is an error turn here, while AgentDojo would end on it: tested apart)
    return [
        [_block([c]) for c in user] + [f"All done. {answer}"],
        [_block(user + injection), answer],
        junk + [_block(user), f"<think>ok</think>{answer}"],
        [_block(injection), "Nothing else to do."] if injection else ["I cannot help with that."],
    ]


class ScriptedLLM:
    """An AgentDojo pipeline element replaying a script of assistant turns (same parsing as ours)."""

    name = "scripted"

    def __init__(self, script: list[str]) -> None:
        self.script, self.index = script, 0

    def query(self, query, runtime, env=None, messages=(), extra_args={}):  # noqa: B006, ANN001, ANN201
        from agentdojo.functions_runtime import FunctionCall
        from agentdojo.types import ChatAssistantMessage, text_content_block_from_string

        from mrgrpo.rewards.agent import final_output, has_tool_call, parse_turn

        text = self.script[min(self.index, len(self.script) - 1)]
        self.index += 1
        calls = [FunctionCall(function=n, args=a) for n, a in parse_turn(text)[0]] if has_tool_call(text) else None
        message = ChatAssistantMessage(
            role="assistant", content=[text_content_block_from_string(final_output(text))], tool_calls=calls
        )
        return query, runtime, env, [*messages, message], extra_args


def agentdojo_scores(item: ad.AgentItem, script: list[str]) -> tuple[bool, bool]:
    from agentdojo.agent_pipeline import AgentPipeline, InitQuery, SystemMessage, ToolsExecutionLoop, ToolsExecutor

    llm = ScriptedLLM(script)
    pipeline = AgentPipeline([SystemMessage("system"), InitQuery(), llm, ToolsExecutionLoop([ToolsExecutor(), llm])])
    suite = ad.task_suite(item.suite)
    injection = suite.injection_tasks[item.injection_task] if item.injection_task else None
    return suite.run_task_with_pipeline(pipeline, suite.user_tasks[item.user_task], injection, ad.injections_for(item))


def scripted_policy(scripts: dict[int, list[str]]):
    def policy(conversations):
        out = []
        for conversation in conversations:
            script = scripts[id(conversation)]
            turn = sum(1 for m in conversation if m["role"] == "assistant")
            out.append(script[min(turn, len(script) - 1)])
        return out

    return policy


def _sample(per_suite: int, seed: int = 0) -> list[ad.AgentItem]:
    rng = random.Random(seed)
    chosen = []
    for suite in ad.SUITES:
        all_items = ad.items([suite])
        chosen += rng.sample([i for i in all_items if i.benign], 1)
        chosen += rng.sample([i for i in all_items if not i.benign], per_suite)
    return chosen


def _parity(items: list[ad.AgentItem]) -> list[str]:
    episodes, expected, scripts = [], [], {}
    for item in items:
        for script in scripts_for(item):
            row = ad.item_row(item)
            episode = episode_for(row)
            scripts[id(episode.messages)] = script
            episodes.append(episode)
            expected.append(agentdojo_scores(item, script))
    run_episodes(episodes, scripted_policy(scripts))
    jobs = [
        ({"suite": e.item.suite, "user_task": e.item.user_task, "injection_task": e.item.injection_task or "",
          "attack": e.item.attack or "", "version": e.item.version}, json.dumps(e.injections or {}), json.loads(e.record()))
        for e in episodes
    ]
    replayed = score_batch(jobs, workers=0)
    mismatches = []
    for episode, want, got in zip(episodes, expected, replayed):
        want = (bool(want[0]), None if episode.item.benign else bool(want[1]))
        live = episode.check()
        if not (want == tuple(got) == tuple(live)):
            mismatches.append(f"{episode.item}: agentdojo {want} replay {got} live {live}")
    return mismatches


def test_scripted_policy_matches_agentdojo_pipeline_on_every_suite():
    mismatches = _parity(_sample(per_suite=2))
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.slow
def test_scripted_policy_matches_agentdojo_pipeline_larger_sample():
    mismatches = _parity(_sample(per_suite=8, seed=1))
    assert not mismatches, "\n".join(mismatches)
