"""The prompt-length rule: prompts are measured in the policy's tokens and never fed longer than allowed."""

from __future__ import annotations

import pytest

from mrgrpo.errors import ConfigError
from mrgrpo.tasks import TaskSpec, get_task, prompt_tokens
from mrgrpo.tasks.prepare import fit_prompts, prepare
from mrgrpo.train.config import RewardsConfig
from mrgrpo.train.presets import load_model, load_tokenizer


@pytest.fixture(scope="module")
def tiny():
    return load_tokenizer("tiny")


def test_drop_rule_keeps_only_prompts_that_fit_and_counts_the_rest(tiny):
    task = get_task("humaneval")
    rows = task.rows(TaskSpec("humaneval", size=20), "train", chat=False)
    lengths = sorted(prompt_tokens(p, tiny, False) for p in rows["prompt"])
    limit = lengths[len(lengths) // 2]  # about half fit
    kept, fit = task.fit(rows, tiny, False, limit, task.resolve_options({}))
    assert fit.dropped == sum(n > limit for n in lengths) > 0 and fit.kept == len(kept) == 20 - fit.dropped
    assert all(prompt_tokens(p, tiny, False) <= limit for p in kept["prompt"]) and fit.longest_kept <= limit
    assert f"{fit.kept}/20 prompts fit {limit} tokens" in fit.line("humaneval")
    with pytest.raises(ConfigError, match=r"every prompt is longer than 10 policy tokens \(shortest \d+\)"):
        task.fit(rows, tiny, False, 10, task.resolve_options({}))


def test_agentdojo_prompts_are_compacted_then_dropped(tiny):
    task = get_task("agentdojo")
    # (keep_idle_passing: the seeded sample of 12 rows that holds rows of both suites)
    spec = TaskSpec("agentdojo", {"suites": ["banking", "workspace"], "keep_idle_passing": True}, size=12)
    rows = task.rows(spec, "train", chat=False)
    full = [prompt_tokens(p, tiny, False) for p in rows["prompt"]]
    assert min(full) > 2048  # full JSON schemas: far beyond the tiny model's 2048 positions
    kept, fit = task.fit(rows, tiny, False, 2000, task.resolve_options(spec.options))
    banking = sum(s == "banking" for s in rows["suite"])
    assert 0 < banking < 12
    assert fit.shortened == banking == len(kept) and fit.dropped == 12 - banking  # workspace: ~2.7k even compact
    assert set(kept["suite"]) == {"banking"} and all(prompt_tokens(p, tiny, False) <= 2000 for p in kept["prompt"])
    assert all('"parameters"' not in p for p in kept["prompt"])  # the one-line-per-tool listing


def test_max_prompt_length_option_and_the_models_context_bound_the_train_rows():
    config_task = TaskSpec("bfcl", {"max_prompt_length": 800, "think": False}, size=16, few_shot=0)
    prepared = prepare(config_task, RewardsConfig(suite="tool_call", options={"think": False}), load_tokenizer("tiny"), False)
    loaded = load_model("tiny")
    fit = fit_prompts(prepared, loaded.tokenizer, False, context=2048, reserved=32)
    assert fit.limit == 800 and fit.dropped > 0 and len(prepared.dataset) == fit.kept
    assert all(prompt_tokens(p, loaded.tokenizer, False) <= 800 for p in prepared.dataset["prompt"])
    fit = fit_prompts(prepared, loaded.tokenizer, False, context=732, reserved=32)
    assert fit.limit == 700  # context minus the completion's room, when smaller
