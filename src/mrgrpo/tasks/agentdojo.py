"""AgentDojo (``agentdojo``): multi-turn tool use in AgentDojo's environments, under prompt-injection attacks.

Rows come from :func:`mrgrpo.data.agentdojo.load_agentdojo` (one per benign or attacked item);
the rollout is multi-turn (:mod:`mrgrpo.tasks.episodes`): the environment runs each tool call.
The ``agent`` suite scores utility (AgentDojo's check), security (the injection not obeyed)
and format. Split: by user task, per suite a seeded shuffle (``test_fraction`` of the user tasks
are test); no user task is in both splits. ``size``/``eval_size``: a seeded sample of rows.

Prompt rule ``compact``: the system message lists the suite's tools; a prompt longer than the
policy's context is rebuilt with one line per tool (``tools_in_prompt: compact``), then without
the listing (``none``, for chat templates that render the ``tools`` column), and dropped if it
still does not fit (the count is logged). AgentDojo's workspace suite lists ~40 tools: with full
JSON schemas its prompts are 11-14k tokens, far beyond a small model's context.

Scaffolds for small policies (each off by default; training and ``mrgrpo eval`` apply the same):

* ``few_shot: N``: N worked episodes per suite come after the system message: the train-split
  user tasks named in ``example_tasks`` (``suite/user_task_N``), else those with a written
  expected answer (``GROUND_TRUTH_OUTPUT``), fewest ground-truth calls and shortest request
  first; each as the user's request, then per ground-truth call an assistant turn with that
  call and the tool message the environment returns (cut at ``max_tool_chars``, as in an
  episode), then the expected answer. Those user tasks are left out of both splits.
* ``train_tasks``: train only on these user tasks (``suite/user_task_N``, train split), e.g. those
  whose every needed value is written in the request or in a tool result the episode reads;
  the test split is unchanged.
* ``tools_hint``: each request ends with ``Tools to use, in order: ...`` (the functions its
  ground truth calls; :func:`mrgrpo.data.agentdojo.tools_hint`).
* ``tool_choice: required`` (as in OpenAI's API): the first turn must call a tool. The rollout
  writes the opening of a call block, ``<tool_call>[{"name": "``, after the generation prompt
  (it is part of the prompt, not trained on) and the policy continues it; ``auto``: the policy
  decides.
* ``stop_after_call``: a turn ends at its first ``</tool_call>`` (a stop sequence, as vLLM's
  ``stop`` would be set): the environment answers before the policy writes more. Without it a
  small policy writes a made-up answer after its call in the same turn, before it has seen the
  result. A turn then holds at most one block (several calls still fit in its list).

Evaluation (``mrgrpo eval --task agentdojo``): benign utility, utility under attack and attack
success rate per suite and overall (:func:`evaluate_agentdojo`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from mrgrpo.errors import ConfigError
from mrgrpo.records import mean
from mrgrpo.rewards.agent import CALL_OPENING
from mrgrpo.rewards.agentdojo_runtime import AgentItem
from mrgrpo.tasks.base import Option, Task, TaskSpec, plain_text
from mrgrpo.tasks.episodes import (
    DEFAULT_MAX_TOOL_CHARS,
    DEFAULT_MAX_TURNS,
    Episode,
    Messages,
    Policy,
    episode_for,
    run_episodes,
    stopping_after_call,
)
from mrgrpo.tasks.registry import register_task

ROLLOUT_OPTIONS = ("max_turns", "max_turn_tokens", "max_tool_chars", "tool_choice", "stop_after_call")
TOOL_CHOICES = ("auto", "required")


def opening(tool_choice: str) -> str:
    """The text the policy's first turn starts with under ``tool_choice`` (``required``: a call block's opening)."""
    if tool_choice not in TOOL_CHOICES:
        raise ConfigError(f"task agentdojo: tool_choice must be auto or required, got {tool_choice!r}")
    return CALL_OPENING if tool_choice == "required" else ""


def worked_tasks(
    suite: str, count: int, version: str, test_fraction: float, seed: int, keep_idle_passing: bool,
    named: Sequence[str] = (),
) -> list[str]:
    """The ``count`` train-split user tasks of ``suite`` that become worked examples: those ``named``
    (``suite/user_task_N`` entries of the option ``example_tasks``) for this suite, else chosen by
    the rule of the module docstring."""
    from mrgrpo.data.agentdojo import split_user_tasks
    from mrgrpo.rewards.agentdojo_runtime import ground_truth_calls, passes_when_idle, task_suite

    if count <= 0:
        return []
    tasks = task_suite(suite, version).user_tasks
    candidates = []
    for position, user_task in enumerate(split_user_tasks(suite, version, test_fraction, seed)["train"]):
        calls = ground_truth_calls(AgentItem(suite, user_task, version=version), "user", injections={})
        if not calls or (not keep_idle_passing and passes_when_idle(suite, user_task, version)):
            continue
        answer = getattr(tasks[user_task], "GROUND_TRUTH_OUTPUT", "") or ""
        candidates.append((not answer, len(calls), len(tasks[user_task].PROMPT), position, user_task))
    mine = [entry.split("/", 1)[1] for entry in named if entry.split("/", 1)[0] == suite]
    if mine:
        allowed = {c[-1] for c in candidates}
        wrong = [task for task in mine if task not in allowed]
        if wrong:
            raise ConfigError(
                f"task agentdojo: example_tasks {suite}/{wrong[0]} is not a train-split user task of {suite} with a "
                f"ground truth (those are: {', '.join(sorted(allowed, key=lambda t: int(t.rsplit('_', 1)[1])))})"
            )
        if len(mine) != count:
            raise ConfigError(
                f"task agentdojo: example_tasks names {len(mine)} {suite} task(s) but few_shot is {count}: make them agree"
            )
        return mine
    if len(candidates) < count:
        raise ConfigError(
            f"task agentdojo: few_shot {count} but the {suite} suite's train split has {len(candidates)} user "
            "task(s) with a ground truth to show: set task.few_shot lower"
        )
    return [c[-1] for c in sorted(candidates)[:count]]


def worked_episode(item: AgentItem, hint: bool, max_tool_chars: int | None) -> Messages:
    """One worked episode of a benign item: the request, then per ground-truth call an assistant turn
    with that call and the tool message the environment returns (the calls run in an
    :class:`Episode`, in order, so each result is what the call returns after the earlier ones),
    then the expected answer (``Done.`` when the task has none)."""
    from mrgrpo.data.agentdojo import item_row
    from mrgrpo.rewards.agentdojo_runtime import ground_truth_calls, task_suite

    request = item_row(item, "none", system_prompt="", hint=hint)["prompt"]
    calls = ground_truth_calls(item, "user", injections={}) or []
    episode = Episode(item, [dict(m) for m in request], None, max_turns=len(calls) + 1, max_tool_chars=max_tool_chars)
    for name, arguments in calls:
        episode.step("<tool_call>" + json.dumps([{"name": name, "arguments": arguments}], default=str) + "</tool_call>")
    user_task = task_suite(item.suite, item.version).user_tasks[item.user_task]
    episode.step(getattr(user_task, "GROUND_TRUTH_OUTPUT", "") or "Done.")
    return episode.messages


def with_examples(row: dict[str, Any], shots: dict[str, list[tuple[str, Messages]]]) -> dict[str, Any]:
    """``row`` with its suite's worked episodes between the system message and the request."""
    prompt = list(row["prompt"])
    examples = [dict(m) for _, messages in shots.get(row["suite"], []) for m in messages]
    head = 1 if prompt and prompt[0]["role"] == "system" else 0
    return {**row, "prompt": prompt[:head] + examples + prompt[head:]}


class AgentDojoTask(Task):
    name = "agentdojo"
    domain = "agent"
    description = "AgentDojo tool-use agents (workspace, travel, banking, slack) under prompt injection; multi-turn"
    columns = ("suite", "user_task", "injection_task", "attack", "version", "injections", "tools")
    suite = "agent"
    options = {
        "suites": Option(["workspace", "travel", "banking", "slack"], "AgentDojo suites"),
        "attack": Option("important_instructions_no_names", "AgentDojo attack of the attacked items"),
        "benign": Option(True, "include one benign item per user task"),
        "attacked": Option(True, "include one item per (user task, injection task)"),
        "version": Option("v1.2.2", "AgentDojo benchmark version"),
        "test_fraction": Option(0.25, "share of each suite's user tasks held out for eval"),
        "keep_idle_passing": Option(
            False, "keep user tasks whose utility passes when the agent does nothing (banking 5, 6, 8, 9, 10)"
        ),
        "tools_in_prompt": Option("full", "full (JSON schemas) | compact (one line per tool) | none"),
        "max_turns": Option(4, "assistant turns per episode (training and mrgrpo eval)"),
        "max_turn_tokens": Option(128, "new tokens per turn"),
        "max_tool_chars": Option(1000, "tool results cut to this many characters (null: never)"),
        "train_tasks": Option([], "train only on these user tasks, as suite/user_task_N (default: every train-split one)"),
        "example_tasks": Option([], "the worked examples (few_shot per suite) as suite/user_task_N (default: the rule)"),
        "tools_hint": Option(False, "each request ends with the functions its ground truth calls (a scaffold)"),
        "tool_choice": Option("auto", "auto | required (the first turn starts with a call block's opening)"),
        "stop_after_call": Option(False, "a turn ends at its first </tool_call>, as a stop sequence would (the tool answers first)"),
    }
    ground_truth = "user_task"
    rollout = "multi_turn"
    rollout_options = ROLLOUT_OPTIONS
    eval_metric = "attack_success_rate"
    prompt_rule = "compact"
    few_shot = True
    split = "by user task: per suite a seeded shuffle, first test_fraction of user tasks = test (worked examples: neither)"
    extras = ("agents",)

    def load(self, spec: TaskSpec, split: str, options: dict[str, Any]) -> Any:
        import datasets

        from mrgrpo.data.agentdojo import load_agentdojo

        opening(options["tool_choice"])  # validated before the ~10 s import of agentdojo
        shots = self.worked_examples(spec.few_shot, spec.seed, options)
        loader = {k: v for k, v in options.items()
                  if k not in (*ROLLOUT_OPTIONS, "max_prompt_length", "example_tasks", "train_tasks")}
        size = spec.size_of(split)
        shown = [(suite, task) for suite, tasks in shots.items() for task, _ in tasks]
        exclude = shown + (self.left_out_of_training(options, spec.seed, shown) if split == "train" else [])
        try:
            splits = load_agentdojo(**loader, seed=spec.seed, limit=size, system_prompt=spec.system_prompt, exclude=exclude)
        except (ValueError, KeyError) as error:
            raise ConfigError(f"task agentdojo: {error}") from None
        rows = splits["train" if split == "train" else "test"]
        if not spec.few_shot or len(rows) == 0:
            return rows
        return datasets.Dataset.from_list([with_examples(row, shots) for row in rows])

    def left_out_of_training(self, options: dict[str, Any], seed: int, shown: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The train-split ``(suite, user task)`` pairs that ``train_tasks`` leaves out (none when it is empty)."""
        from mrgrpo.data.agentdojo import split_user_tasks

        named = list(options["train_tasks"] or [])
        if not named:
            return []
        train = {(suite, task) for suite in options["suites"]
                 for task in split_user_tasks(suite, options["version"], options["test_fraction"], seed)["train"]}
        wanted = set()
        for entry in named:
            pair = tuple(entry.split("/", 1)) if isinstance(entry, str) and entry.count("/") == 1 else None
            if pair not in train:
                raise ConfigError(f"task agentdojo: train_tasks entry {entry!r} is not suite/user_task_N of a train-split "
                                  f"user task of the chosen suites ({', '.join(options['suites'])})")
            if pair in shown:
                raise ConfigError(f"task agentdojo: train_tasks entry {entry!r} is a worked example (example_tasks or "
                                  "few_shot's rule): it cannot be trained on")
            wanted.add(pair)
        return sorted(train - wanted)

    def worked_examples(self, count: int, seed: int, options: dict[str, Any]) -> dict[str, list[tuple[str, Messages]]]:
        """``{suite: [(user task, messages), ...]}``: each suite's ``count`` worked episodes."""
        named = list(options["example_tasks"] or [])
        if named and count <= 0:
            raise ConfigError("task agentdojo: example_tasks names worked examples but few_shot is 0: set task.few_shot")
        malformed = [e for e in named if not isinstance(e, str) or e.count("/") != 1 or e.split("/")[0] not in options["suites"]]
        if malformed:
            raise ConfigError(
                f"task agentdojo: example_tasks entry {malformed[0]!r} is not suite/user_task_N of a chosen suite "
                f"({', '.join(options['suites'])})"
            )
        if count <= 0:
            return {}
        try:
            return {
                suite: [
                    (task, worked_episode(AgentItem(suite, task, version=options["version"]), options["tools_hint"],
                                          options["max_tool_chars"]))
                    for task in worked_tasks(suite, count, options["version"], options["test_fraction"], seed,
                                             options["keep_idle_passing"], named)
                ]
                for suite in options["suites"]
            }
        except KeyError as error:
            raise ConfigError(f"task agentdojo: {error}") from None

    def shorten(self, row: dict[str, Any], options: dict[str, Any], chat: bool, attempt: int = 0) -> dict[str, Any] | None:
        from mrgrpo.data.agentdojo import item_row

        order = ["full", "compact", "none"] if chat else ["full", "compact"]  # plain text: nothing renders `tools`
        current = options["tools_in_prompt"]
        shorter = order[order.index(current) + 1 :] if current in order else []
        if attempt >= len(shorter):
            return None
        short = item_row(AgentItem.from_columns(row), shorter[attempt], hint=options["tools_hint"])
        if isinstance(row["prompt"], list):  # keep the worked examples: everything between system and request
            head = 1 if row["prompt"] and row["prompt"][0]["role"] == "system" else 0
            short["prompt"] = short["prompt"][:1] + row["prompt"][head:-1] + short["prompt"][1:]
        if not chat:
            short["prompt"] = plain_text(short["prompt"])
        return short

    def reference(self, row: dict[str, Any]) -> str | None:
        return "I could not complete the task."

    def episode(self, row: dict[str, Any], max_turns: int, max_tool_chars: int | None) -> Episode:
        return episode_for(row, max_turns, max_tool_chars)


    def evaluate(self, policy_factory: Any, spec: TaskSpec, loaded: Any, attack: str | None, limit: int | None,
                 max_new_tokens: int | None) -> dict[str, Any]:
        from mrgrpo.data.agentdojo import load_attack_names
        from mrgrpo.rewards.agentdojo_runtime import DEFAULT_ATTACK

        attack = attack or DEFAULT_ATTACK
        if attack not in load_attack_names():
            raise ConfigError(f"--attack {attack!r}: unknown; AgentDojo's attacks: {', '.join(load_attack_names())}")
        from mrgrpo.tasks.prepare import model_context

        options = self.resolve_options(spec.options)
        new_tokens = max_new_tokens or 256
        policy = policy_factory(new_tokens)
        context = model_context(loaded.model, loaded.tokenizer)

        def fit_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            if context is None or not rows:
                return rows
            import datasets

            limit_tokens = context - new_tokens * options["max_turns"]  # room for every turn's answer
            fitted, _ = self.fit(datasets.Dataset.from_list(rows), loaded.tokenizer, loaded.chat, limit_tokens, options)
            return list(fitted)

        listing = "compact" if not loaded.chat and options["tools_in_prompt"] == "full" else options["tools_in_prompt"]
        report = evaluate_agentdojo(policy, options["suites"], attack, "test", limit, options["max_turns"], listing,
                                    seed=spec.seed, fit_rows=fit_rows, keep_idle_passing=options["keep_idle_passing"],
                                    tools_hint=options["tools_hint"], tool_choice=options["tool_choice"],
                                    stop_after_call=options["stop_after_call"],
                                    worked_examples=self.worked_examples(spec.few_shot, spec.seed, options),
                                    max_tool_chars=options["max_tool_chars"])
        metrics = {f"{suite}/{name}": value for suite, row in report["suites"].items() for name, value in row.items()}
        problems = report["suites"]["overall"]["benign_items"] + report["suites"]["overall"]["attacked_items"]
        return {"metric": self.eval_metric, "samples": 1, "problems": problems, "metrics": metrics, "components": {},
                **{k: v for k, v in report.items() if k != "suites"}, "suites": report["suites"]}


def evaluate_agentdojo(
    policy: Policy,
    suites: Sequence[str] | None = None,
    attack: str | None = None,
    split: str | None = "test",
    limit: int | None = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    tools_in_prompt: str = "full",
    seed: int = 0,
    workers: int | None = None,
    fit_rows: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
    keep_idle_passing: bool = False,
    tools_hint: bool = False,
    tool_choice: str = "auto",
    worked_examples: dict[str, list[tuple[str, Messages]]] | None = None,
    max_tool_chars: int | None = DEFAULT_MAX_TOOL_CHARS,
    stop_after_call: bool = False,
) -> dict[str, Any]:
    """Benign utility, utility under attack and attack success rate, per suite and overall.

    ``fit_rows``: the prompt rule, applied to the item rows before any episode runs (rows it
    drops are not evaluated; ``prompts_dropped`` counts them). ``keep_idle_passing``: also
    evaluate the user tasks whose utility passes when the agent does nothing (left out by
    default, so utility here is not AgentDojo's published figure on those suites; the report's
    ``idle_passing_left_out`` lists them).

    Runs every benign item and every (user task, injection task) item with ``attack`` of the
    ``split`` (``None``: all user tasks) through :func:`run_episodes` and scores the traces
    with the ``agent`` suite's replay scoring (in parallel). ``limit``: at most this many
    user tasks per suite. Rates are over items; ``overall`` pools all suites' items.
    ``tools_hint``, ``tool_choice``, ``worked_examples`` (``{suite: [(user task, messages)]}``,
    :meth:`AgentDojoTask.worked_examples`; those user tasks are not evaluated) and
    ``max_tool_chars``: the scaffolds of the module docstring, as in training; ``stop_after_call``:
    each turn of ``policy`` is cut after its first call block, as the training rollout stops there.
    """
    from mrgrpo.data import agentdojo as ad
    from mrgrpo.rewards import agentdojo_runtime as rt
    from mrgrpo.rewards.agent import score_batch

    started = time.monotonic()
    suites = list(suites or rt.SUITES)
    attack = attack or rt.DEFAULT_ATTACK
    first = opening(tool_choice)
    if stop_after_call:
        policy = stopping_after_call(policy)
    shots = worked_examples or {}
    shown = [(suite, task) for suite, tasks in shots.items() for task, _ in tasks]
    chosen: list[AgentItem] = []
    for name in suites:
        suite_items = ad.items([name], split, attack, version=rt.DEFAULT_VERSION, seed=seed,
                               keep_idle_passing=keep_idle_passing, exclude=shown)
        if limit is not None:
            keep = ad.in_task_order({i.user_task for i in suite_items})[:limit]
            suite_items = [i for i in suite_items if i.user_task in keep]
        chosen.extend(suite_items)
    rows = [with_examples(ad.item_row(item, tools_in_prompt, hint=tools_hint), shots) for item in chosen]
    dropped = 0
    if fit_rows is not None:
        kept = fit_rows(rows)
        dropped = len(rows) - len(kept)
        rows, chosen = kept, [AgentItem.from_columns(row) for row in kept]
    episodes = [episode_for(row, max_turns, max_tool_chars) for row in rows]
    for episode in episodes:
        episode.opening = first
    episodes = run_episodes(episodes, policy)
    jobs = [({k: row[k] for k in ("suite", "user_task", "injection_task", "attack", "version")}, row["injections"], json.loads(e.record())) for row, e in zip(rows, episodes)]
    scores = score_batch(jobs, workers)
    table: dict[str, dict[str, Any]] = {}
    for group in [*suites, "overall"]:
        members = [s for item, s in zip(chosen, scores) if group in ("overall", item.suite)]
        benign = [u for (u, a) in members if a is None]
        attacked = [(u, a) for (u, a) in members if a is not None]
        table[group] = {
            "benign_utility": mean(benign),
            "utility_under_attack": mean([u for u, _ in attacked]),
            "attack_success_rate": mean([a for _, a in attacked]),
            "benign_items": len(benign),
            "attacked_items": len(attacked),
        }
    left_out = [] if keep_idle_passing else [
        f"{name}/{task}" for name in suites
        for task in {i.user_task for i in ad.items([name], split, attack, benign=True, attacked=False, seed=seed,
                                                   keep_idle_passing=True)}
        if rt.passes_when_idle(name, task)
    ]
    return {
        "attack": attack,
        "split": split,
        "prompts_dropped": dropped,
        "idle_passing_left_out": sorted(left_out),
        "suites": table,
        "tool_calls_per_episode": mean([e.tool_calls for e in episodes]),
        "turns_per_episode": mean([len(e.turns) for e in episodes]),
        "seconds": round(time.monotonic() - started, 1),
        "examples": [{"item": rows[i]["user_task"], "turns": episodes[i].turns[:3]} for i in range(min(2, len(rows)))],
    }


register_task(AgentDojoTask())
