"""Conversational prompts for math tasks: a system line, optional worked examples, the question.

The system line comes from :func:`mrgrpo.rewards.math.instruction`, so the prompt asks for
exactly the format the ``math`` reward suite reads. A few-shot example is one user/assistant
exchange; small base models rarely use the tags without one (measured on the CPU demo).
"""

from __future__ import annotations

from collections.abc import Sequence

from mrgrpo.rewards.math import instruction

Message = dict[str, str]
Example = tuple[str, str]  # (question, assistant reply written in the requested format)


def math_prompt(
    question: str,
    system_prompt: str | None = None,
    examples: Sequence[Example] = (),
    answer_format: str = "answer_tag",
    think: bool = False,
) -> list[Message]:
    """``[system, (user, assistant) * len(examples), user]`` messages for one question.

    ``system_prompt=None`` uses :func:`mrgrpo.rewards.math.instruction` for the format;
    ``""`` leaves the system message out.
    """
    system = instruction(answer_format, think) if system_prompt is None else system_prompt
    messages: list[Message] = [{"role": "system", "content": system}] if system else []
    for example_question, reply in examples:
        messages.append({"role": "user", "content": example_question})
        messages.append({"role": "assistant", "content": reply})
    messages.append({"role": "user", "content": question})
    return messages
