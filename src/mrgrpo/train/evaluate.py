"""``mrgrpo eval``: generate with a model and score with a task's reward suite.

* ``math``: accuracy (the suite's ``correctness``) on the held-out split of a run's task
  (the run's ``config.yaml`` when ``--model`` is a run or checkpoint, else ``--config``, else
  the embedded demo task).
* ``humaneval``: pass@1 (and pass@k for k ≤ N samples) with the ``code`` suite's ``pass``
  component, which runs the code in the sandbox (never in this process).
* ``bfcl``: all-exact (the ``tool_call`` suite's ``all_exact``) on BFCL's Python AST categories.

``--model`` takes a preset (``tiny``, ``smollm2``), a model directory or hub id, a training
checkpoint, or a run directory (its last checkpoint), so a run can be compared with its start.
Every suite component is averaged too. pass@k uses the unbiased estimator
``1 - C(n-c, k) / C(n, k)`` (Chen et al., 2021) with n samples and c successes per problem.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrgrpo.train.config import ConfigError, TaskConfig

TASKS = ("math", "humaneval", "bfcl", "agentdojo", "asb")


@dataclass
class EvalTask:
    dataset: Any
    suite: Any
    metric: str  # the component whose value 1 counts as a success
    max_new_tokens: int


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


def _task_config(run_config: Path | None, config_path: Path | None) -> TaskConfig:
    from mrgrpo.train.config import load_config
    from mrgrpo.train.job import load_run_config

    if config_path is not None:
        return load_config(config_path).task
    if run_config is not None:
        return load_run_config(run_config.parent).task
    return load_config(None).task


def build_eval_task(
    task: str, tokenizer: Any, chat: bool, limit: int | None, task_config: TaskConfig | None = None
) -> EvalTask:
    from mrgrpo.rewards import get_suite

    if task == "math":
        from mrgrpo.train.tasks import build_dataset

        config = task_config or TaskConfig()
        dataset = build_dataset(config, "eval", chat=chat)
        suite = get_suite("math", tokenizer=tokenizer)
        max_new_tokens = 128
        metric = "correctness"
    elif task == "humaneval":
        try:
            from mrgrpo.data.humaneval import load_humaneval
        except ImportError as error:
            raise ConfigError(f"--task humaneval needs mrgrpo.data.humaneval and the code suite: {error}") from None
        dataset = load_humaneval(chat=chat, limit=limit)
        # efficiency/ast_similarity need reference runs; eval reports what decides pass@k
        suite = get_suite("code", components=("format", "syntax", "compile", "run", "pass"))
        max_new_tokens = 512
        metric = "pass"
    elif task == "bfcl":
        from mrgrpo.data.bfcl import load_bfcl

        dataset = load_bfcl()
        suite = get_suite("tool_call")
        max_new_tokens = 256
        metric = "all_exact"
    else:
        raise ConfigError(f"--task must be one of {', '.join(TASKS)}, got {task!r}")
    if metric not in suite.names:
        raise ConfigError(f"suite {suite.name!r} has no {metric!r} component (it has {suite.names})")
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    return EvalTask(dataset, suite, metric, max_new_tokens)


def _render(prompt: Any, tokenizer: Any, chat: bool) -> str:
    if isinstance(prompt, str):
        return prompt
    if chat:
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    from mrgrpo.train.tasks import plain_text

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

    ``attack``: the AgentDojo attack for ``task="agentdojo"`` (see :mod:`mrgrpo.train.agent_rollout`);
    for ``task="asb"`` the injection ``SETTING[:TEMPLATE]`` (see :mod:`mrgrpo.data.asb`)."""
    from mrgrpo.train.presets import load_model

    if task not in TASKS:
        raise ConfigError(f"--task must be one of {', '.join(TASKS)}, got {task!r}")
    started = time.monotonic()
    loadable, run_config = resolve_model(model)
    try:
        loaded = load_model(loadable)
    except OSError as error:
        raise ConfigError(f"--model {model}: {error}") from None
    if task in ("agentdojo", "asb"):
        if task == "agentdojo":
            from mrgrpo.train.agent_rollout import run_agentdojo_eval

            result = run_agentdojo_eval(loaded, model, attack=attack, limit=limit, max_new_tokens=max_new_tokens)
        else:
            from mrgrpo.data.asb import run_asb_eval

            result = run_asb_eval(loaded, model, attack=attack, limit=limit, max_new_tokens=max_new_tokens)
        result.update(loaded=loadable, seconds=round(time.monotonic() - started, 1))
        if out is not None:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            Path(out).write_text(json.dumps(result, indent=2))
        return result
    task_config = _task_config(run_config, config_path) if task == "math" else None
    eval_task = build_eval_task(task, loaded.tokenizer, loaded.chat, limit, task_config)
    prompts = [_render(p, loaded.tokenizer, loaded.chat) for p in eval_task.dataset["prompt"]]
    completions = generate(
        loaded.model, loaded.tokenizer, prompts, samples, max_new_tokens or eval_task.max_new_tokens
    )
    scored = score(eval_task, completions)
    result = {
        "model": model,
        "loaded": loadable,
        "task": task,
        "metric": eval_task.metric,
        "samples": samples,
        "problems": len(prompts),
        **scored,
        "seconds": round(time.monotonic() - started, 1),
        "examples": [{"prompt": prompts[i][-300:], "completion": completions[i][0]} for i in range(min(3, len(prompts)))],
    }
    if task == "math":
        result["metrics"]["accuracy"] = scored["components"]["correctness"]
    if task == "bfcl":
        result["metrics"]["all_exact"] = scored["components"]["all_exact"]
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=2))
    return result


def print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{result['task']} · {result['model']} · {result['problems']} problems × {result['samples']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in result["metrics"].items():
        table.add_row(name, f"{value:.3f}")
    for name, value in result["components"].items():
        table.add_row(f"mean {name}", "–" if value is None else f"{value:.3f}")
    table.add_row("seconds", f"{result['seconds']:.1f}")
    Console().print(table)
