"""Multi-turn AgentDojo rollouts: scripted-policy parity with AgentDojo's own pipeline, errors, training."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("agentdojo")

from mrgrpo.data import agentdojo as ad  # noqa: E402
from mrgrpo.rewards import agentdojo_runtime as rt  # noqa: E402
from mrgrpo.rewards.agent import score_batch, score_episodes  # noqa: E402
from mrgrpo.rewards.tool_call import format_calls  # noqa: E402
from mrgrpo.tasks.episodes import Episode, episode_for, run_episodes  # noqa: E402


def _block(calls) -> str:
    return format_calls(calls, think=None)


def scripts_for(item: rt.AgentItem) -> list[list[str]]:
    """Fixed turn sequences: user ground truth one call per turn; user + injection ground truth in
    one turn; junk (unknown tool, bad arguments) then the truth."""
    user = rt.ground_truth_calls(item, "user") or []
    injection = (rt.ground_truth_calls(item, "injection") or []) if not item.benign else []
    answer = rt.task_suite(item.suite).user_tasks[item.user_task].GROUND_TRUTH_OUTPUT or "Done."
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


def agentdojo_scores(item: rt.AgentItem, script: list[str]) -> tuple[bool, bool]:
    from agentdojo.agent_pipeline import AgentPipeline, InitQuery, SystemMessage, ToolsExecutionLoop, ToolsExecutor

    llm = ScriptedLLM(script)
    pipeline = AgentPipeline([SystemMessage("system"), InitQuery(), llm, ToolsExecutionLoop([ToolsExecutor(), llm])])
    suite = rt.task_suite(item.suite)
    injection = suite.injection_tasks[item.injection_task] if item.injection_task else None
    return suite.run_task_with_pipeline(pipeline, suite.user_tasks[item.user_task], injection, rt.injections_for(item))


def scripted_policy(scripts: dict[int, list[str]]):
    def policy(conversations):
        out = []
        for conversation in conversations:
            script = scripts[id(conversation)]
            turn = sum(1 for m in conversation if m["role"] == "assistant")
            out.append(script[min(turn, len(script) - 1)])
        return out

    return policy


def _sample(per_suite: int, seed: int = 0) -> list[rt.AgentItem]:
    rng = random.Random(seed)
    chosen = []
    for suite in rt.SUITES:
        all_items = ad.items([suite])
        chosen += rng.sample([i for i in all_items if i.benign], 1)
        chosen += rng.sample([i for i in all_items if not i.benign], per_suite)
    return chosen


def _parity(items: list[rt.AgentItem]) -> list[str]:
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


# ----------------------------------------------------------------------------- token-level rollout


class _ScriptedModel:
    """A stand-in causal LM whose ``generate`` appends the next scripted turn of each sequence."""

    device = "cpu"
    training = True

    def __init__(self, tokenizer, turns: list[str]) -> None:
        from types import SimpleNamespace

        self.tokenizer, self.turns, self.calls = tokenizer, turns, 0
        self.generation_config = SimpleNamespace(eos_token_id=tokenizer.eos_token_id)

    def eval(self):
        return self

    def train(self, mode=True):
        return self

    def __call__(self, input_ids, use_cache=True):  # the shared prompt's forward (train.shared_prefix)
        from types import SimpleNamespace

        return SimpleNamespace(past_key_values=SimpleNamespace(batch_repeat_interleave=lambda rows: None))

    def generate(self, input_ids, attention_mask, max_new_tokens, past_key_values=None, **kwargs):
        import torch

        text = self.turns[min(self.calls, len(self.turns) - 1)]
        self.calls += 1
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][: max_new_tokens - 1]
        ids = ids + [self.tokenizer.eos_token_id]
        new = torch.tensor([ids] * input_ids.shape[0])
        return torch.cat([input_ids, new], dim=1)


def _fake_trainer(tokenizer, model, rows, max_completion_length=3000):
    from collections import defaultdict
    from types import SimpleNamespace

    return SimpleNamespace(
        processing_class=tokenizer,
        max_completion_length=max_completion_length,
        model=model,
        accelerator=SimpleNamespace(unwrap_model=lambda m: m),
        args=SimpleNamespace(temperature=1.0, top_p=1.0, top_k=0),
        agent_rows=rows,
        _metrics={"train": defaultdict(list)},
    )


@pytest.mark.parametrize("chat", [True, False])
def test_token_rollout_executes_tools_masks_feedback_and_scores(chat):
    from mrgrpo.rewards import get_suite
    from mrgrpo.tasks import plain_text
    from mrgrpo.train.agent_rollout import AgentRollout
    from mrgrpo.train.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    item = rt.AgentItem("banking", "user_task_1", "injection_task_1", rt.DEFAULT_ATTACK)
    row = ad.item_row(item, system_prompt="Use tools.")
    user = rt.ground_truth_calls(item, "user")
    answer = rt.task_suite("banking").user_tasks["user_task_1"].GROUND_TRUTH_OUTPUT
    turns = [_block([("no_such_tool", {})]), _block(user), answer]
    model = _ScriptedModel(tokenizer, turns)
    prompt = row["prompt"] if chat else plain_text(row["prompt"])
    rows = [dict(row, prompt=prompt)] * 2
    out = AgentRollout(max_turns=5, max_turn_tokens=200, max_tool_chars=300)([prompt, prompt], _fake_trainer(tokenizer, model, rows))
    assert set(out) == {"prompt_ids", "completion_ids", "logprobs", "env_mask", "agent_trace"}
    ids, mask = out["completion_ids"][0], out["env_mask"][0]
    assert len(ids) == len(mask) and 0 in mask and 1 in mask
    generated = tokenizer.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=True)
    feedback = tokenizer.decode([t for t, m in zip(ids, mask) if not m], skip_special_tokens=True)
    assert "Invalid tool no_such_tool" in feedback and "no_such_tool" in generated
    assert answer in generated and "Invalid tool" not in generated
    trace = json.loads(out["agent_trace"][0])
    assert trace["turns"] == turns and trace["final"] == answer
    suite = get_suite("agent", workers=0)
    columns = {k: [r[k] for r in rows] for k in ("suite", "user_task", "injection_task", "attack", "version", "injections")}
    columns["agent_trace"] = out["agent_trace"]
    scores = {c.name: c([prompt] * 2, ["x"] * 2, **columns) for c in suite.components}
    assert scores["utility"] == [1.0, 1.0] and scores["security"] == [1.0, 1.0]


def test_episode_turn_limit_and_bad_blocks():
    row = ad.item_row(rt.AgentItem("slack", "user_task_0"))
    episode = episode_for(row, max_turns=2)
    feedback = episode.step("<tool_call>[{oops</tool_call>")
    assert feedback and feedback[0]["content"].startswith("Error: could not parse")
    assert not episode.done
    assert episode.step('<tool_call>[{"name": "get_channels", "arguments": {}}]</tool_call> ok') == []
    assert episode.done and episode.final == "ok" and len(episode.trace) == 0  # the last turn's calls don't run
    assert isinstance(episode, Episode)


@pytest.mark.slow
def test_tiny_training_run_on_agentdojo_writes_run_files(tmp_path):
    from mrgrpo.train.config import validate_config
    from mrgrpo.train.job import run_train

    from .conftest import tiny_config

    task = {
        "name": "agentdojo",
        "size": 4,
        "eval_size": 2,
        "system_prompt": "Call tools as <tool_call>[...]</tool_call>.",
        "few_shot": 0,
        "options": {"suites": ["banking"], "max_turns": 2, "max_turn_tokens": 16, "max_tool_chars": 100},
    }
    config = validate_config(tiny_config(
        task=task, rewards={"suite": "agent", "options": {"workers": 2}}, max_steps=2, save_steps=2,
        trainer={"max_completion_length": 48, "num_generations": 2, "per_device_train_batch_size": 4},
    ))
    result = run_train(config, out=tmp_path / "run", quiet=True)
    assert result.steps == 2
    for name in ("config.yaml", "metrics.jsonl", "diagnostics.jsonl", "report.md"):
        assert (result.run_dir / name).is_file(), name
    record = json.loads((result.run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    for key in ("mrgrpo/rewards/utility", "mrgrpo/rewards/security", "mrgrpo/rewards/format", "agent/turns"):
        assert key in record, key


def test_tool_choice_required_writes_the_call_opening_into_the_prompt_and_the_policy_continues_it():
    from mrgrpo.rewards.agent import CALL_OPENING
    from mrgrpo.train.agent_rollout import AgentRollout
    from mrgrpo.train.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    item = rt.AgentItem("banking", "user_task_14")
    row = ad.item_row(item, system_prompt="Use tools.")
    rest = 'update_password", "arguments": {"password": "1j1l-2k3j"}}]</tool_call>'
    model = _ScriptedModel(tokenizer, [rest, "Done."])
    out = AgentRollout(max_turns=3, max_turn_tokens=200, tool_choice="required")(
        [row["prompt"]], _fake_trainer(tokenizer, model, [row])
    )
    prompt_text = tokenizer.decode(out["prompt_ids"][0], skip_special_tokens=True)
    assert prompt_text.endswith(CALL_OPENING)  # part of the prompt: not trained on
    generated = tokenizer.decode([t for t, m in zip(out["completion_ids"][0], out["env_mask"][0]) if m], skip_special_tokens=True)
    assert CALL_OPENING not in generated and rest in generated
    trace = json.loads(out["agent_trace"][0])
    assert trace["turns"] == [CALL_OPENING + rest, "Done."]  # the episode reads the whole block
    utility, attacked, tool_use = score_episodes(
        [({"suite": "banking", "user_task": "user_task_14", "injection_task": "", "attack": "", "version": rt.DEFAULT_VERSION},
          "", trace, True)], workers=0)[0]
    assert utility and attacked is None and tool_use == 0.5  # one of its two ground-truth functions
    with pytest.raises(ValueError, match="auto or required"):
        AgentRollout(tool_choice="any")


def test_run_episodes_passes_openings_only_when_an_episode_has_one():
    from mrgrpo.rewards.agent import CALL_OPENING

    seen = []

    def policy(conversations, openings=None):
        seen.append(openings)
        return ['get_balance", "arguments": {}}]</tool_call>' if openings and o else "Done." for o in (openings or [""] * len(conversations))]

    row = ad.item_row(rt.AgentItem("banking", "user_task_7"))
    plain, forced = episode_for(row, max_turns=3), episode_for(row, max_turns=3)
    forced.opening = CALL_OPENING
    run_episodes([plain, forced], policy)
    assert seen[0] == ["", CALL_OPENING] and seen[1:] == [None]  # second turn: no opening left
    assert plain.turns == ["Done."] and forced.turns[0].startswith(CALL_OPENING + "get_balance")
    assert forced.tool_calls == 1 and forced.tool_errors == 0


def test_stop_after_call_ends_the_turn_at_the_block_so_the_tool_answers_before_the_policy_goes_on():
    from mrgrpo.train.agent_rollout import AgentRollout
    from mrgrpo.train.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    item = rt.AgentItem("banking", "user_task_7")
    row = ad.item_row(item, system_prompt="Use tools.")
    call = _block([("get_most_recent_transactions", {"n": 100})])
    made_up = "\nYou spent 50 on the gift."  # written before the result was seen
    turns = [call + made_up, "You spent 200 on the gift."]
    rollouts = {}
    for stop in (False, True):
        model = _ScriptedModel(tokenizer, turns)
        seen = []
        generate = model.generate
        model.generate = lambda *a, **k: (seen.append(k), generate(*a, **k))[1]
        rollouts[stop] = AgentRollout(max_turns=3, max_turn_tokens=200, stop_after_call=stop)(
            [row["prompt"]], _fake_trainer(tokenizer, model, [row]))
        assert all(("stop_strings" in k) == stop for k in seen)  # the batch stops early on a real model
    cut = json.loads(rollouts[True]["agent_trace"][0])
    assert cut["turns"] == [call, "You spent 200 on the gift."] and cut["final"] == "You spent 200 on the gift."
    generated = tokenizer.decode([t for t, m in zip(rollouts[True]["completion_ids"][0], rollouts[True]["env_mask"][0]) if m],
                                 skip_special_tokens=True)
    assert made_up.strip() not in generated  # not kept, so not trained on
    assert json.loads(rollouts[False]["agent_trace"][0])["turns"][0] == call + made_up


def test_cut_ids_after_keeps_the_shortest_prefix_that_holds_the_stop():
    from mrgrpo.train.agent_rollout import cut_ids_after
    from mrgrpo.train.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    ids = tokenizer('<tool_call>[]</tool_call> and more', add_special_tokens=False)["input_ids"]
    cut = cut_ids_after(ids, tokenizer, "</tool_call>")
    assert tokenizer.decode(cut).endswith("</tool_call>") and "more" not in tokenizer.decode(cut)
    assert "</tool_call>" not in tokenizer.decode(cut[:-1])
    plain = tokenizer("no call here", add_special_tokens=False)["input_ids"]
    assert cut_ids_after(plain, tokenizer, "</tool_call>") == plain


def test_a_real_model_generates_with_the_stop_string():
    import torch

    from mrgrpo.train.agent_rollout import AgentRollout
    from mrgrpo.train.tiny import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    trainer = _fake_trainer(tokenizer, model, [])
    torch.manual_seed(0)
    out = AgentRollout._generate(model, tokenizer, [[1, 2, 3], [4, 5]], 6, trainer, "</tool_call>")
    assert len(out) == 2 and all(0 < len(ids) <= 6 for ids in out)


class _PromptScriptedModel(_ScriptedModel):
    """A stand-in LM whose next turn for each sequence is ``script(text so far)``."""

    def __init__(self, tokenizer, script) -> None:
        super().__init__(tokenizer, [])
        self.script = script

    def generate(self, input_ids, attention_mask, max_new_tokens, **kwargs):
        import torch

        rows = []
        for row, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            text = self.tokenizer.decode([t for t, m in zip(row, mask) if m], skip_special_tokens=True)
            ids = self.tokenizer(self.script(text), add_special_tokens=False)["input_ids"][: max_new_tokens - 1]
            rows.append(ids + [self.tokenizer.eos_token_id])
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        new = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
        return torch.cat([input_ids, new], dim=1)


def test_each_episode_gets_its_own_room_in_the_completion_not_the_batch_shortest():
    """One episode reads a long tool result and has 3 tokens left for its answer; the episode beside
    it in the batch, with a short result, still gets its whole answer (as it would alone)."""
    from mrgrpo.train.agent_rollout import AgentRollout
    from mrgrpo.train.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    answer = "You spent 200 on the gift, as the transactions show."
    long_call = _block([("get_most_recent_transactions", {"n": 100})])
    short_call = _block([("get_balance", {})])

    def script(text):
        if "get_most_recent_transactions: " in text or "get_balance: " in text:
            return answer
        return long_call if "New Year" in text else short_call

    rows = [ad.item_row(rt.AgentItem("banking", task), system_prompt="Use tools.") for task in ("user_task_7", "user_task_1")]

    def rollout(batch, limit):
        return AgentRollout(max_turns=3, max_turn_tokens=200, max_tool_chars=300)(
            [r["prompt"] for r in batch], _fake_trainer(tokenizer, _PromptScriptedModel(tokenizer, script), batch, limit))

    alone = rollout(rows[:1], 3000)["completion_ids"][0]
    before_answer = len(alone) - len(tokenizer(answer, add_special_tokens=False)["input_ids"]) - 1
    limit = before_answer + 3
    together = rollout(rows, limit)
    cut, full = (json.loads(t)["final"] for t in together["agent_trace"])
    assert len(together["completion_ids"][0]) <= limit and answer.startswith(cut) and cut != answer
    assert full == answer and together["completion_ids"][1] == rollout(rows[1:], limit)["completion_ids"][0]
