"""Multi-turn tool-use rollouts on AgentDojo, for training (TRL ``rollout_func``) and evaluation.

One episode: the policy writes an assistant turn; its ``<tool_call>`` blocks are parsed
(:func:`mrgrpo.rewards.agent.parse_turn`) and executed in order by AgentDojo's
``FunctionsRuntime`` on the episode's own copy of the item's injected environment; each
result (or error: unknown tool, invalid arguments, a tool raising, an unparseable block)
comes back as a ``tool`` message; the loop repeats until a turn without a tool call (the
final answer) or ``max_turns`` assistant turns. The episode record (``agent_trace`` column)
is what the ``agent`` reward suite scores.

Why not TRL's own tool loop: TRL 1.16 (``tools=`` / ``environment_factory=``) parses calls
with the tokenizer's response schema and needs a chat template that renders tool calls (and
``jmespath`` on transformers < 5.13); the tiny preset and plain-text prompts have neither,
and its tools are Python callables with docstrings rather than AgentDojo's runtime. So
training uses TRL's ``rollout_func`` hook: :class:`AgentRollout` generates turn by turn with
the policy, appends the rendered tool messages as tokens masked out of the loss
(``env_mask`` 0), and returns ``agent_trace`` for the rewards. ``rollout_func`` only receives
prompts, and benign and attacked items share a prompt, so :class:`AgentGRPOTrainer` keeps the
batch's rows for it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mrgrpo.data.agentdojo import AgentItem, check_episode, execute_call, fresh_environment
from mrgrpo.rewards.agent import final_output, has_tool_call, parse_turn

Messages = list[dict[str, str]]
Policy = Callable[[list[Messages]], list[str]]  # conversations -> next assistant turn each

DEFAULT_MAX_TURNS = 16  # AgentDojo's pipeline: one LLM call, then up to 15 tool-loop iterations
DEFAULT_MAX_TOOL_CHARS = 4000


def take_turn(
    episode: Any, text: str, run_call: Callable[[str, Any], tuple[str | None, str | None]]
) -> tuple[Messages, bool]:
    """The turn semantics every tool-use episode shares (AgentDojo's, ASB's).

    Appends the policy's ``text`` to ``episode.turns``/``episode.messages``; a turn without a
    tool call, or the ``episode.max_turns``-th turn, ends the episode (``done``, ``final``).
    Otherwise each parsed call goes to ``run_call(name, args) -> (result, error)`` and the
    results (or ``Error: ...`` for parse errors and failed calls, counted in
    ``episode.tool_errors``) come back as tool messages. Returns ``(feedback, well_formed)``.
    """
    if episode.done:
        raise RuntimeError("the episode is over")
    episode.turns.append(text)
    episode.messages.append({"role": "assistant", "content": text})
    if not has_tool_call(text) or len(episode.turns) >= episode.max_turns:
        episode.done = True
        episode.final = final_output(text)
        return [], True
    calls, errors, well_formed = parse_turn(text)
    feedback: Messages = [{"role": "tool", "content": f"Error: {error}"} for error in errors]
    episode.tool_errors += len(errors)
    for name, args in calls:
        result, error = run_call(name, args)
        if error is not None:
            episode.tool_errors += 1
            feedback.append({"role": "tool", "content": f"Error: {error}"})
        else:
            feedback.append({"role": "tool", "content": f"{name}: {result}"})
    if not calls and not errors:
        feedback.append({"role": "tool", "content": "Error: the <tool_call> block holds no calls."})
    episode.messages.extend(feedback)
    return feedback, well_formed


@dataclass
class Episode:
    """The state of one rollout (text level)."""

    item: AgentItem
    messages: Messages
    injections: dict[str, str] | None = None
    max_turns: int = DEFAULT_MAX_TURNS
    max_tool_chars: int | None = DEFAULT_MAX_TOOL_CHARS
    turns: list[str] = field(default_factory=list)
    final: str = ""
    done: bool = False
    tool_calls: int = 0
    tool_errors: int = 0

    def __post_init__(self) -> None:
        self.env, self.pre_env = fresh_environment(self.item, self.injections)
        self.trace: list[Any] = []  # AgentDojo FunctionCalls, in order

    def step(self, text: str) -> Messages:
        """Take the policy's turn; returns the tool messages to feed back (``[]`` once done)."""
        feedback, _ = take_turn(self, text, self._run_call)
        return feedback

    def _run_call(self, name: str, args: Any) -> tuple[str | None, str | None]:
        result, error, call = execute_call(self.item, self.env, name, args)
        self.trace.append(call)
        self.tool_calls += 1
        if error is None and self.max_tool_chars is not None and len(result) > self.max_tool_chars:
            result = result[: self.max_tool_chars] + "\n[... truncated]"
        return result, error

    def record(self) -> str:
        """The ``agent_trace`` JSON the reward suite scores."""
        return json.dumps({"turns": self.turns, "final": self.final}, ensure_ascii=False)

    def check(self) -> tuple[bool, bool | None]:
        """AgentDojo's ``(utility, attack_succeeded)`` on the live environment."""
        return check_episode(self.item, self.final, self.pre_env, self.env, self.trace)


def episode_for(row: dict[str, Any], max_turns: int = DEFAULT_MAX_TURNS, max_tool_chars: int | None = DEFAULT_MAX_TOOL_CHARS) -> Episode:
    """A fresh episode of a dataset row (:func:`mrgrpo.data.agentdojo.item_row`)."""
    injections = json.loads(row["injections"]) if row.get("injections") else None
    messages = [dict(m) for m in row["prompt"]] if not isinstance(row["prompt"], str) else [
        {"role": "user", "content": row["prompt"]}
    ]
    return Episode(AgentItem.from_columns(row), messages, injections, max_turns, max_tool_chars)


def run_episodes(episodes: Sequence[Episode], policy: Policy) -> list[Episode]:
    """Drive ``episodes`` to the end with ``policy`` (called on all unfinished ones each turn)."""
    while True:
        active = [e for e in episodes if not e.done]
        if not active:
            return list(episodes)
        texts = policy([e.messages for e in active])
        if len(texts) != len(active):
            raise ValueError(f"policy returned {len(texts)} turns for {len(active)} conversations")
        for episode, text in zip(active, texts):
            episode.step(text)


# ----------------------------------------------------------------------------- rendering


def plain_text(messages: Messages) -> str:
    """Prompts of models without a chat template (as :func:`mrgrpo.train.tasks.plain_text`)."""
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts) + "\n\nAssistant:"


class Renderer:
    """Turns conversations into text, and tool feedback into the text that continues a turn.

    ``chat``: use the tokenizer's chat template (the feedback is the difference between the
    template rendered with and without the tool messages, so the template must be prefix
    preserving, as ChatML-style templates are); else the plain ``Role: content`` format.
    """

    def __init__(self, tokenizer: Any, chat: bool, tools: bool = False) -> None:
        self.tokenizer = tokenizer
        self.chat = chat and getattr(tokenizer, "chat_template", None) is not None
        self.eos = tokenizer.eos_token or ""

    def _template(self, messages: Messages, generation_prompt: bool, tools: list | None) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt
        )

    def prompt(self, messages: Messages, tools: list | None = None) -> str:
        return self._template(messages, True, tools) if self.chat else plain_text(messages)

    def feedback(self, messages: Messages, n_new: int, ended_with_eos: bool, tools: list | None = None) -> str:
        """The text after the assistant's last generated token up to the next generation prompt,
        where ``messages`` ends with the assistant turn and ``n_new`` tool messages."""
        if not self.chat:
            return "".join(f"\n\n{m['role'].capitalize()}: {m['content']}" for m in messages[-n_new:]) + "\n\nAssistant:"
        before = self._template(messages[:-n_new], False, tools)
        after = self._template(messages, True, tools)
        content = messages[-n_new - 1]["content"]
        cut = before.rfind(content) + len(content) if content else len(before)
        if not after.startswith(before[:cut]):
            raise ValueError("the chat template is not prefix preserving; multi-turn rollouts need one that is")
        text = after[cut:]
        if ended_with_eos and self.eos and text.startswith(self.eos):
            text = text[len(self.eos) :]
        return text


# ----------------------------------------------------------------------------- model policies


def model_policy(
    model: Any,
    tokenizer: Any,
    chat: bool,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    batch_size: int = 8,
) -> Policy:
    """A text-level policy from a causal LM (greedy at ``temperature`` 0); for evaluation."""
    import torch

    renderer = Renderer(tokenizer, chat)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    def policy(conversations: list[Messages]) -> list[str]:
        texts = [renderer.prompt(c) for c in conversations]
        out: list[str] = []
        model.eval()
        for start in range(0, len(texts), batch_size):
            batch = texts[start : start + batch_size]
            encoded = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": tokenizer.pad_token_id}
            kwargs.update({"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False})
            with torch.inference_mode():
                generated = model.generate(**encoded, **kwargs)
            out.extend(tokenizer.batch_decode(generated[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True))
        return out

    return policy


@dataclass
class _TokenEpisode:
    episode: Episode
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)


class AgentRollout:
    """TRL ``rollout_func``: multi-turn AgentDojo episodes generated with the trainer's policy.

    Returns per rollout ``prompt_ids``, ``completion_ids`` (all turns and tool messages),
    ``env_mask`` (1 = generated by the policy, 0 = tool feedback: no loss), ``logprobs``
    ``None`` (TRL recomputes them) and ``agent_trace`` (forwarded to the reward functions).

    Args:
        max_turns: assistant turns per episode.
        max_turn_tokens: new tokens per turn (the whole completion is also capped at the
            trainer's ``max_completion_length``).
        max_tool_chars: tool results are cut to this many characters (``None``: never).
    """

    def __init__(self, max_turns: int = 4, max_turn_tokens: int = 128, max_tool_chars: int | None = 1000) -> None:
        self.max_turns = max_turns
        self.max_turn_tokens = max_turn_tokens
        self.max_tool_chars = max_tool_chars
        self.__name__ = "agentdojo_rollout"

    def __call__(self, prompts: list, trainer: Any) -> dict[str, Any]:
        rows = getattr(trainer, "agent_rows", None)
        if rows is None or len(rows) != len(prompts):
            raise RuntimeError("AgentRollout needs the batch rows: train with AgentGRPOTrainer")
        tokenizer = trainer.processing_class
        chat = not isinstance(prompts[0], str)
        renderer = Renderer(tokenizer, chat)
        states = []
        for row, prompt in zip(rows, prompts):
            episode = episode_for({**row, "prompt": prompt}, self.max_turns, self.max_tool_chars)
            if not chat:  # plain-text prompts: the conversation is the prompt text itself
                episode.messages = [{"role": "user", "content": prompt}]
            text = renderer.prompt(episode.messages) if chat else prompt
            states.append(_TokenEpisode(episode, tokenizer(text, add_special_tokens=False)["input_ids"]))
        limit = trainer.max_completion_length
        model = trainer.accelerator.unwrap_model(trainer.model)
        while True:
            active = [s for s in states if not s.episode.done]
            if not active:
                break
            budget = min(self.max_turn_tokens, min(limit - len(s.completion_ids) for s in active))
            if budget <= 0:
                for s in active:
                    s.episode.done = True
                    s.episode.final = final_output(s.episode.turns[-1]) if s.episode.turns else ""
                break
            generated = self._generate(model, tokenizer, [s.prompt_ids + s.completion_ids for s in active], budget, trainer)
            for state, ids in zip(active, generated):
                ended = bool(ids) and ids[-1] in _eos_ids(tokenizer, model)
                text = tokenizer.decode(ids, skip_special_tokens=True)
                state.completion_ids += ids
                state.env_mask += [1] * len(ids)
                feedback = state.episode.step(text)
                if not feedback:
                    continue
                room = limit - len(state.completion_ids)
                extra = renderer.feedback(state.episode.messages, len(feedback), ended)
                extra_ids = tokenizer(extra, add_special_tokens=False)["input_ids"]
                if len(extra_ids) >= room:  # no room left to answer: end the episode here
                    state.episode.done = True
                    state.episode.final = final_output(text)
                    continue
                state.completion_ids += extra_ids
                state.env_mask += [0] * len(extra_ids)
        eos = tokenizer.eos_token_id
        for s in states:  # a generated eos closes the completion (TRL counts unterminated ones as clipped)
            if eos is not None and (not s.completion_ids or s.completion_ids[-1] != eos) and len(s.completion_ids) < limit:
                s.completion_ids.append(eos)
                s.env_mask.append(0)
        trainer_metrics = getattr(trainer, "_metrics", None)
        if trainer_metrics is not None:
            mode = "train" if trainer.model.training else "eval"
            calls = sum(s.episode.tool_calls for s in states)
            trainer_metrics[mode]["agent/turns"].append(sum(len(s.episode.turns) for s in states) / len(states))
            trainer_metrics[mode]["agent/tool_calls"].append(calls / len(states))
            trainer_metrics[mode]["agent/tool_errors"].append(sum(s.episode.tool_errors for s in states) / len(states))
        return {
            "prompt_ids": [s.prompt_ids for s in states],
            "completion_ids": [s.completion_ids for s in states],
            "logprobs": None,
            "env_mask": [s.env_mask for s in states],
            "agent_trace": [s.episode.record() for s in states],
        }

    @staticmethod
    def _generate(model: Any, tokenizer: Any, inputs: list[list[int]], max_new_tokens: int, trainer: Any) -> list[list[int]]:
        import torch

        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        width = max(len(ids) for ids in inputs)
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in inputs], device=model.device)
        attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in inputs], device=model.device)
        args = trainer.args
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "do_sample": True,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "pad_token_id": pad,
        }
        if args.top_k:
            kwargs["top_k"] = args.top_k
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                out = model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
        finally:
            model.train(was_training)
        eos = _eos_ids(tokenizer, model)
        result = []
        for row in out[:, width:].tolist():
            ids = []
            for token in row:
                ids.append(token)
                if token in eos:
                    break
            while ids and ids[-1] == pad and pad not in eos:
                ids.pop()
            result.append(ids)
        return result


def _eos_ids(tokenizer: Any, model: Any) -> set[int]:
    ids = {tokenizer.eos_token_id}
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(configured if isinstance(configured, list) else [configured])
    return {i for i in ids if i is not None}


def _trainer_class() -> type:
    from mrgrpo.train.trainer import MultiRewardGRPOTrainer

    class AgentGRPOTrainer(MultiRewardGRPOTrainer):
        """``MultiRewardGRPOTrainer`` whose generation is :class:`AgentRollout` (``rollout=``)."""

        def __init__(self, *args: Any, rollout: AgentRollout | None = None, **kwargs: Any) -> None:
            kwargs["rollout_func"] = rollout or AgentRollout()
            self.agent_rows: list[dict[str, Any]] | None = None
            super().__init__(*args, **kwargs)

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            self.agent_rows = inputs
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                self.agent_rows = None

    return AgentGRPOTrainer


def __getattr__(name: str) -> Any:  # AgentGRPOTrainer without importing TRL at module import
    if name == "AgentGRPOTrainer":
        return _trainer_class()
    raise AttributeError(name)


# ----------------------------------------------------------------------------- evaluation


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
) -> dict[str, Any]:
    """Benign utility, utility under attack and attack success rate, per suite and overall.

    Runs every benign item and every (user task, injection task) item with ``attack`` of the
    ``split`` (``None``: all user tasks) through :func:`run_episodes` and scores the traces
    with the ``agent`` suite's replay scoring (in parallel). ``limit``: at most this many
    user tasks per suite. Rates are over items; ``overall`` pools all suites' items.
    """
    from mrgrpo.data import agentdojo as ad
    from mrgrpo.rewards.agent import score_batch

    started = time.monotonic()
    suites = list(suites or ad.SUITES)
    attack = attack or ad.DEFAULT_ATTACK
    chosen: list[AgentItem] = []
    for name in suites:
        suite_items = ad.items([name], split, attack, version=ad.DEFAULT_VERSION, seed=seed)
        if limit is not None:
            keep = sorted({i.user_task for i in suite_items}, key=lambda t: int(t.rsplit("_", 1)[1]))[:limit]
            suite_items = [i for i in suite_items if i.user_task in keep]
        chosen.extend(suite_items)
    rows = [ad.item_row(item, tools_in_prompt) for item in chosen]
    episodes = run_episodes([episode_for(row, max_turns) for row in rows], policy)
    jobs = [({k: row[k] for k in ("suite", "user_task", "injection_task", "attack", "version")}, row["injections"], json.loads(e.record())) for row, e in zip(rows, episodes)]
    scores = score_batch(jobs, workers)
    table: dict[str, dict[str, Any]] = {}
    for group in [*suites, "overall"]:
        members = [s for item, s in zip(chosen, scores) if group in ("overall", item.suite)]
        benign = [u for (u, a) in members if a is None]
        attacked = [(u, a) for (u, a) in members if a is not None]
        table[group] = {
            "benign_utility": _mean(benign),
            "utility_under_attack": _mean([u for u, _ in attacked]),
            "attack_success_rate": _mean([a for _, a in attacked]),
            "benign_items": len(benign),
            "attacked_items": len(attacked),
        }
    return {
        "attack": attack,
        "split": split,
        "suites": table,
        "tool_calls_per_episode": _mean([e.tool_calls for e in episodes]),
        "turns_per_episode": _mean([len(e.turns) for e in episodes]),
        "seconds": round(time.monotonic() - started, 1),
        "examples": [{"item": rows[i]["user_task"], "turns": episodes[i].turns[:3]} for i in range(min(2, len(rows)))],
    }


def _mean(values: Sequence[Any]) -> float:
    return sum(float(v) for v in values) / len(values) if values else math.nan


# ----------------------------------------------------------------------------- train/eval hooks


def build_agentdojo_dataset(options: dict[str, Any], split: str, chat: bool, seed: int = 0, size: int | None = None) -> Any:
    """The ``train`` or ``eval`` (test split) dataset of ``task: {name: agentdojo, options: ...}``.

    ``options``: keyword arguments of :func:`mrgrpo.data.agentdojo.load_agentdojo` (``suites``,
    ``attack``, ``benign``, ``attacked``, ``test_fraction``, ``tools_in_prompt``, ...) plus the
    rollout's ``max_turns``, ``max_turn_tokens``, ``max_tool_chars`` (ignored here). Without a
    chat template the messages are joined into one plain-text prompt.
    """
    from mrgrpo.data.agentdojo import load_agentdojo

    loader_options = {k: v for k, v in options.items() if k not in ROLLOUT_OPTIONS}
    loader_options.setdefault("seed", seed)
    if size is not None:
        loader_options.setdefault("limit", size)
    dataset = load_agentdojo(**loader_options)["train" if split == "train" else "test"]
    if not chat:
        dataset = dataset.map(lambda row: {"prompt": plain_text(row["prompt"])})
    return dataset


ROLLOUT_OPTIONS = ("max_turns", "max_turn_tokens", "max_tool_chars")


def trainer_setup(options: dict[str, Any]) -> tuple[type, dict[str, Any]]:
    """``(trainer class, extra keyword arguments)`` the train job uses for the agentdojo task."""
    rollout = AgentRollout(**{k: options[k] for k in ROLLOUT_OPTIONS if k in options})
    return _trainer_class(), {"rollout": rollout}


def run_agentdojo_eval(
    loaded: Any,
    model_name: str,
    attack: str | None = None,
    limit: int | None = None,
    max_new_tokens: int | None = None,
    suites: Sequence[str] | None = None,
    split: str | None = "test",
    max_turns: int = DEFAULT_MAX_TURNS,
) -> dict[str, Any]:
    """``mrgrpo eval --task agentdojo``: :func:`evaluate_agentdojo` with a loaded model (greedy),
    in the shape :func:`mrgrpo.train.evaluate.print_table` shows (``limit``: user tasks per suite)."""
    from mrgrpo.data.agentdojo import DEFAULT_ATTACK, load_attack_names

    attack = attack or DEFAULT_ATTACK
    if attack not in load_attack_names():
        from mrgrpo.train.config import ConfigError

        raise ConfigError(f"--attack {attack!r}: unknown; AgentDojo's attacks: {', '.join(load_attack_names())}")
    policy = model_policy(loaded.model, loaded.tokenizer, loaded.chat, max_new_tokens or 256)
    report = evaluate_agentdojo(policy, suites, attack, split, limit, max_turns, "compact" if not loaded.chat else "full")
    metrics = {f"{suite}/{name}": value for suite, row in report["suites"].items() for name, value in row.items()}
    problems = report["suites"]["overall"]["benign_items"] + report["suites"]["overall"]["attacked_items"]
    return {
        "model": model_name,
        "task": "agentdojo",
        "metric": "attack_success_rate",
        "samples": 1,
        "problems": problems,
        "metrics": metrics,
        "components": {},
        **{k: v for k, v in report.items() if k != "suites"},
        "suites": report["suites"],
    }
