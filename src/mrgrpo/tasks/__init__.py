"""Tasks: one entry per domain (math, code, tool calling, agents, evaluation-only ASB).

A task bundles its dataset and train/test split, the columns its rows provide, its default
reward suite and weights, its rollout kind (one turn, or multi-turn with an environment), its
evaluation metric and the ground-truth column verl's reward function reads. The train, eval,
compare and analyze commands and verl's reward function find tasks only through this registry.

Built in: ``math`` (reasoning-gym; any reasoning-gym dataset name is a shorthand for it),
``qa`` (question/answer files or hub sets), ``humaneval``, ``code`` (your JSONL/HF code set),
``bfcl``, ``agentdojo`` (multi-turn) and ``asb`` (evaluation only). ``mrgrpo tasks`` lists them
with their options.
"""

from mrgrpo.tasks.base import Option, PromptFit, Task, TaskSpec, plain_text, prompt_tokens
from mrgrpo.tasks.checks import check_columns, check_scorable, check_suite_options
from mrgrpo.tasks.registry import available_tasks, get_task, register_task, resolve, task_for_suite, task_rows

__all__ = [
    "Option",
    "PromptFit",
    "Task",
    "TaskSpec",
    "available_tasks",
    "check_columns",
    "check_scorable",
    "check_suite_options",
    "get_task",
    "plain_text",
    "prompt_tokens",
    "register_task",
    "resolve",
    "task_for_suite",
    "task_rows",
]
