"""Tool-use episodes at the text level: the turn loop every multi-turn task shares, and a model policy.

One episode: the policy writes an assistant turn; its ``<tool_call>`` blocks are parsed
(:func:`mrgrpo.rewards.agent.parse_turn`) and executed in order by the task's environment
(AgentDojo's ``FunctionsRuntime`` on the episode's own copy of the item's injected environment;
ASB's simulated tools); each result (or error: unknown tool, invalid arguments, a tool raising,
an unparseable block) comes back as a ``tool`` message; the loop repeats until a turn without a
tool call (the final answer) or ``max_turns`` assistant turns. The episode record
(``agent_trace`` column) is what the ``agent`` reward suite scores.

Training drives the same :class:`Episode` token by token through TRL's ``rollout_func``
(:mod:`mrgrpo.train.agent_rollout`); evaluation drives it with :func:`model_policy`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mrgrpo.errors import ConfigError
from mrgrpo.rewards.agent import cut_after_call, final_output, has_tool_call, parse_turn
from mrgrpo.rewards.agentdojo_runtime import AgentItem, check_episode, execute_call, fresh_environment
from mrgrpo.tasks.base import plain_text

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
    opening: str = ""  # the text the first turn starts with (written for the policy, which continues it)

    def __post_init__(self) -> None:
        self.env, self.pre_env = fresh_environment(self.item, self.injections)
        self.trace: list[Any] = []  # AgentDojo FunctionCalls, in order

    @property
    def pending_opening(self) -> str:
        """What the next turn starts with before the policy writes: ``opening`` on the first turn."""
        return "" if self.turns else self.opening

    def step(self, text: str) -> Messages:
        """Take the policy's turn (``text`` continues :attr:`pending_opening`); returns the tool
        messages to feed back (``[]`` once done)."""
        feedback, _ = take_turn(self, self.pending_opening + text, self._run_call)
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
    """Drive ``episodes`` to the end with ``policy`` (called on all unfinished ones each turn).

    When an episode's turn starts with an opening (:attr:`Episode.pending_opening`), the policy is
    called as ``policy(conversations, openings)`` and continues each opening (:func:`model_policy`
    does); otherwise as ``policy(conversations)``."""
    while True:
        active = [e for e in episodes if not e.done]
        if not active:
            return list(episodes)
        openings = [getattr(e, "pending_opening", "") for e in active]  # episodes of other tasks may have none
        conversations = [e.messages for e in active]
        texts = policy(conversations, openings) if any(openings) else policy(conversations)  # type: ignore[call-arg]
        if len(texts) != len(active):
            raise ValueError(f"policy returned {len(texts)} turns for {len(active)} conversations")
        for episode, text in zip(active, texts):
            episode.step(text)


# ----------------------------------------------------------------------------- rendering


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
            raise ConfigError("the chat template is not prefix preserving; multi-turn rollouts need one that is")
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
    """A text-level policy from a causal LM (greedy at ``temperature`` 0); for evaluation. Called with
    ``openings``, it continues each (the returned text excludes the opening)."""
    import torch

    renderer = Renderer(tokenizer, chat)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    def policy(conversations: list[Messages], openings: Sequence[str] | None = None) -> list[str]:
        texts = [renderer.prompt(c) + (openings[i] if openings else "") for i, c in enumerate(conversations)]
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


def stopping_after_call(policy: Policy) -> Policy:
    """``policy`` with each turn cut after its first call block (``stop_after_call``): what a
    stop sequence on ``</tool_call>`` gives, so the environment answers before the policy goes on."""

    def stopped(conversations: list[Messages], openings: Sequence[str] | None = None) -> list[str]:
        texts = policy(conversations, openings) if openings is not None else policy(conversations)  # type: ignore[call-arg]
        return [cut_after_call(text) for text in texts]

    return stopped
