"""``mrgrpo eval``: generate with a model and score with a task's reward suite, for every registered task.

The task comes from the registry (:mod:`mrgrpo.tasks`), which also says how it is evaluated:

* single-turn tasks (``math``, ``qa``, ``humaneval``, ``code``, ``bfcl``): the task's test split,
  generated and scored with its default suite; the task's ``eval_metric`` component (math
  ``correctness``, code ``pass`` run in the sandbox, never in this process, BFCL ``all_exact``)
  counts as a success for pass@k, and every component is averaged;
* multi-turn tasks (``agentdojo``, ``asb``): the task's own episode evaluation (utility, attack
  success rate, ...).

The task's settings (options, seed, split sizes, worked examples) are the run's ``config.yaml``
when ``--model`` is a run or checkpoint, else ``--config``, else the embedded demo config, when
that config's task is the one asked for; otherwise the task's defaults.

``--model`` takes a preset (``tiny``, ``smollm2``), a model directory or hub id, a training
checkpoint, or a run directory (its last checkpoint), so a run can be compared with its start.
Prompts longer than the model's context minus the generation length follow the task's prompt
rule (the count is reported). pass@k uses the unbiased estimator ``1 - C(n-c, k) / C(n, k)``
(Chen et al., 2021) with n samples and c successes per problem.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mrgrpo.tasks.base import Task, TaskSpec, plain_text
from mrgrpo.tasks.registry import available_tasks, resolve
from mrgrpo.train.config import ConfigError, TaskConfig


@dataclass
class EvalTask:
    dataset: Any
    suite: Any
    metric: str  # the component whose value 1 counts as a success
    max_new_tokens: int
    task: Task | None = None
    spec: TaskSpec | None = None


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for ``c`` successes among ``n`` samples."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def resolve_model(model: str) -> tuple[str, Path | None]:
    """``(loadable model, run config file or None)`` for a preset, path, checkpoint or run dir."""
    from mrgrpo.train.job import CONFIG_FILE, last_checkpoint

    path = Path(model)
    if path.is_dir():
        if (path / CONFIG_FILE).is_file():  # a run directory
            checkpoint = last_checkpoint(path)
            if checkpoint is None:
                raise ConfigError(f"--model {model}: a run directory without checkpoints")
            return str(checkpoint), path / CONFIG_FILE
        if (path.parent / CONFIG_FILE).is_file():  # a checkpoint inside a run
            return str(path), path.parent / CONFIG_FILE
    return model, None


def task_spec(task: str, run_config: Path | None = None, config_path: Path | None = None) -> tuple[Task, TaskSpec]:
    """The task and its settings for ``mrgrpo eval --task`` (see the module docstring)."""
    from mrgrpo.train.config import load_config
    from mrgrpo.train.job import load_run_config

    wanted, default_spec = resolve(TaskSpec(task))
    if config_path is not None:
        config = load_config(config_path)
    elif run_config is not None:
        config = load_run_config(run_config.parent)
    else:
        config = load_config(None)
    configured, spec = resolve(config.task)
    if configured.name == wanted.name and (task == wanted.name or TaskSpec.of(config.task).name == task):
        return wanted, spec
    return wanted, default_spec


def build_eval_task(
    task: str, tokenizer: Any, chat: bool, limit: int | None, task_config: TaskConfig | TaskSpec | None = None
) -> EvalTask:
    """The test rows, suite and success metric of a single-turn task."""
    from mrgrpo.tasks.prepare import build_suite

    if task_config is not None:
        found, spec = resolve(task_config)
        if found.name != resolve(TaskSpec(task))[0].name:
            raise ConfigError(f"--task {task}: the config's task is {found.name!r}")
    else:
        found, spec = resolve(TaskSpec(task))
    if found.rollout != "single_turn":
        raise ConfigError(f"task {found.name!r} is multi-turn: evaluate it with run_eval")
    options = found.resolve_options(spec.options)
    rewards = SimpleNamespace(suite=found.suite, options={**found.suite_defaults(options), **found.eval_suite_options},
                              components=list(found.eval_components) if found.eval_components else None, weights=None)
    suite = build_suite(found, options, rewards, tokenizer)
    dataset = found.rows(spec, "eval", chat)
    if found.eval_metric not in suite.names:
        raise ConfigError(f"suite {suite.name!r} has no {found.eval_metric!r} component (it has {suite.names})")
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    return EvalTask(dataset, suite, found.eval_metric, found.eval_max_new_tokens, found, spec)


def render_prompt(prompt: Any, tokenizer: Any, chat: bool) -> str:
    """A row's prompt as the text the model continues: plain text as is, a conversation through the
    chat template (with the generation prompt) or, for a model without one, as plain turns."""
    if isinstance(prompt, str):
        return prompt
    if chat:
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    return plain_text(prompt)


def generate(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    samples: int,
    max_new_tokens: int,
    batch_size: int = 8,
    temperature: float = 0.8,
) -> list[list[str]]:
    """``samples`` completions per prompt (greedy when ``samples == 1``)."""
    import torch

    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    out: list[list[str]] = []
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start : start + batch_size]
        encoded = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": tokenizer.pad_token_id}
        if samples > 1:
            kwargs.update(do_sample=True, temperature=temperature, num_return_sequences=samples)
        else:
            kwargs.update(do_sample=False)
        with torch.inference_mode():
            generated = model.generate(**encoded, **kwargs)
        texts = tokenizer.batch_decode(generated[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
        for i in range(len(batch)):
            out.append(texts[i * samples : (i + 1) * samples])
    return out


def score(eval_task: EvalTask, completions: list[list[str]]) -> dict[str, Any]:
    """Suite component means and pass@k of ``completions`` (``[problem][sample]``)."""
    dataset = eval_task.dataset
    samples = len(completions[0]) if completions else 1
    columns = {name: [v for v in dataset[name] for _ in range(samples)] for name in dataset.column_names}
    prompts = columns.pop("prompt")
    flat = [c for per_problem in completions for c in per_problem]
    values = {}
    for component in eval_task.suite.components:
        values[component.name] = component(prompts, flat, **columns)
    successes = values[eval_task.metric]
    metrics: dict[str, float] = {}
    for k in sorted({1, *(k for k in (5, 10, 100) if k <= samples), samples}):
        per_problem = [
            pass_at_k(samples, sum(1 for v in successes[i * samples : (i + 1) * samples] if v is not None and v >= 1.0), k)
            for i in range(len(completions))
        ]
        metrics[f"pass@{k}"] = sum(per_problem) / len(per_problem) if per_problem else 0.0
    components = {}
    for name, vals in values.items():
        kept = [v for v in vals if v is not None]
        components[name] = sum(kept) / len(kept) if kept else None
    return {"metrics": metrics, "components": components}


def run_eval(
    model: str,
    task: str = "math",
    samples: int = 1,
    limit: int | None = None,
    max_new_tokens: int | None = None,
    config_path: Path | None = None,
    out: Path | None = None,
    attack: str | None = None,
) -> dict[str, Any]:
    """Generate and score; returns (and writes to ``out``) the JSON-ready result.

    ``attack``: the AgentDojo attack for ``task="agentdojo"``; for ``task="asb"`` the injection
    ``SETTING[:TEMPLATE]`` (see :mod:`mrgrpo.tasks.asb`). Child processes started for scoring
    are ended before it returns (:mod:`mrgrpo.train.children`)."""
    from mrgrpo.train.children import reaped_children

    with reaped_children():
        return _run_eval(model, task, samples, limit, max_new_tokens, config_path, out, attack)


def _run_eval(model, task, samples, limit, max_new_tokens, config_path, out, attack) -> dict[str, Any]:
    from mrgrpo.tasks.episodes import model_policy
    from mrgrpo.tasks.prepare import model_context
    from mrgrpo.train.presets import load_model

    try:
        wanted = resolve(TaskSpec(task))[0]
    except ConfigError:
        raise ConfigError(f"--task must be one of {', '.join(available_tasks())}, got {task!r}") from None
    wanted.require_installed()  # a missing extra: one line, before the configs are read and the model loads
    started = time.monotonic()
    loadable, run_config = resolve_model(model)
    found, spec = task_spec(task, run_config, config_path)
    found.require_installed(spec.options)  # and its data packages, unless the options name a data_dir
    try:
        loaded = load_model(loadable)
    except OSError as error:
        raise ConfigError(f"--model {model}: {error}") from None
    if found.rollout != "single_turn":
        def policy_factory(n: int) -> Any:
            return model_policy(loaded.model, loaded.tokenizer, loaded.chat, n)

        result = {"model": model, "task": found.name,
                  **found.evaluate(policy_factory, spec, loaded, attack, limit, max_new_tokens)}
        result.update(loaded=loadable, seconds=round(time.monotonic() - started, 1))
        _write(out, result)
        return result
    eval_task = build_eval_task(found.name, loaded.tokenizer, loaded.chat, limit, spec)
    new_tokens = max_new_tokens or eval_task.max_new_tokens
    context = model_context(loaded.model, loaded.tokenizer)
    dropped = 0
    if context is not None:
        options = found.resolve_options(spec.options)
        limit_tokens = min([context - new_tokens] + ([options["max_prompt_length"]] if options.get("max_prompt_length") else []))
        eval_task.dataset, fit = found.fit(eval_task.dataset, loaded.tokenizer, loaded.chat, limit_tokens, options)
        dropped = fit.dropped
    prompts = [render_prompt(p, loaded.tokenizer, loaded.chat) for p in eval_task.dataset["prompt"]]
    completions = generate(loaded.model, loaded.tokenizer, prompts, samples, new_tokens)
    scored = score(eval_task, completions)
    result = {
        "model": model,
        "loaded": loadable,
        "task": found.name,
        "metric": eval_task.metric,
        "samples": samples,
        "problems": len(prompts),
        "prompts_dropped": dropped,
        **scored,
        "seconds": round(time.monotonic() - started, 1),
        "examples": [{"prompt": prompts[i][-300:], "completion": completions[i][0]} for i in range(min(3, len(prompts)))],
    }
    result["metrics"][eval_task.metric] = scored["components"][eval_task.metric]
    _write(out, result)
    return result


def _write(out: Path | None, result: dict[str, Any]) -> None:
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=2))


def print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{result['task']} · {result['model']} · {result['problems']} problems × {result['samples']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in result["metrics"].items():
        table.add_row(name, "–" if value is None else f"{value:.3f}")
    for name, value in result["components"].items():
        table.add_row(f"mean {name}", "–" if value is None else f"{value:.3f}")
    table.add_row("seconds", f"{result['seconds']:.1f}")
    Console().print(table)
