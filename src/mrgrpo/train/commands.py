"""The ``mrgrpo train`` and ``mrgrpo eval`` commands; :func:`register` adds them to the CLI app.

Several GPUs (TRL's usual launcher; trainer settings pass through to GRPOConfig)::

    accelerate launch --num_processes 4 -m mrgrpo.cli train --config configs/gpu_math.yaml \\
        --set model=Qwen/Qwen2.5-1.5B-Instruct
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from mrgrpo.command_errors import command
from mrgrpo.errors import ConfigError
from mrgrpo.extras import require
from mrgrpo.tasks import available_tasks


def train_command(
    config: Annotated[
        Optional[Path], typer.Option("--config", "-c", help="YAML config (default: the embedded CPU demo)")
    ] = None,
    estimator: Annotated[
        Optional[str], typer.Option("--estimator", "-e", help="grpo | dr_grpo | gdpo | sa_mrpo | corr_grpo | ...")
    ] = None,
    set_: Annotated[
        Optional[list[str]],
        typer.Option("--set", "-s", help="override a config key: --set trainer.learning_rate=1e-5 (repeatable)"),
    ] = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="run directory (default runs/<time>-<estimator>)")] = None,
    resume: Annotated[
        Optional[Path], typer.Option("--resume", help="continue the run in this directory from its last checkpoint")
    ] = None,
    allow_change: Annotated[
        bool,
        typer.Option(
            "--allow-change",
            help="with --resume: accept a changed estimator, option, model or other setting "
            "(recorded in the run's resumes.jsonl); without it only max_steps, max_wall_seconds "
            "and save_steps may change",
        ),
    ] = False,
    check: Annotated[
        bool, typer.Option(
            "--check",
            help="validate the config, its task and reward suite and the estimator bound to them (with --resume: "
            "the checkpoint and its estimator state), print the config resolved, and exit (loads no model)",
        )
    ] = False,
) -> None:
    """Train with multi-reward GRPO (no arguments: the embedded CPU demo, SmolLM2 + corr_grpo).

    The embedded demo: SmolLM2-135M-Instruct on reasoning-gym chain_sum, math suite
    (correctness, format, length), corr_grpo, CPU, under 10 minutes on 2 cores.

    Ctrl-C saves a checkpoint after the current step and exits with status 130 (SIGTERM: 143); resume with
    --resume RUN_DIR.
    """
    started = time.monotonic()
    require("trl", "mrgrpo train")
    require("plots", "mrgrpo train (TensorBoard events and the run report's plots)")
    from mrgrpo.train.config import load_config, read_config_mapping
    from mrgrpo.train.job import check_run, end_process_group, load_run_config, run_train

    if resume is not None:
        if config is not None or out is not None:
            raise ConfigError("--resume takes the run's own config.yaml; drop --config/--out (use --set to change keys)")
        overrides = list(set_ or []) + ([f"estimator={estimator}"] if estimator else [])
        cfg = load_run_config(resume, overrides)
    else:
        if allow_change:
            raise ConfigError("--allow-change only applies to --resume RUN_DIR")
        if config is not None and "experiment" in read_config_mapping(config)[0]:
            raise ConfigError(
                f"{config} has an `experiment` section: it is a `mrgrpo compare` config (several estimators x seeds); "
                f"run `mrgrpo compare -c {config}`, or drop the section to train one run"
            )
        cfg = load_config(config, list(set_ or []), estimator)
    if check:
        check_run(cfg, resume, allow_change)  # task, suite and the estimator bound to them (no model)
        typer.echo(cfg.to_yaml(), nl=False)
        return
    result = run_train(cfg, out=out, resume=resume, job_started=started, allow_changes=allow_change)
    end_process_group()  # every rank has stopped training; its threads must not outlive the interpreter
    if result.interrupted:
        raise typer.Exit(143 if "SIGTERM" in result.stop_reason else 130)


def eval_command(
    model: Annotated[str, typer.Option("--model", "-m", help="preset (tiny | smollm2), model path, run dir or checkpoint")],
    task: Annotated[str, typer.Option("--task", "-t", help=" | ".join(available_tasks()) + " (mrgrpo tasks lists them)")] = "math",
    samples: Annotated[int, typer.Option("--samples", "-n", min=1, help="samples per problem (pass@k for k ≤ N)")] = 1,
    limit: Annotated[Optional[int], typer.Option("--limit", help="evaluate only the first N problems")] = None,
    max_new_tokens: Annotated[Optional[int], typer.Option("--max-new-tokens", help="generation length")] = None,
    config: Annotated[
        Optional[Path], typer.Option("--config", "-c", help="train config whose task to use for --task math")
    ] = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="write the results as JSON here")] = None,
    attack: Annotated[
        Optional[str],
        typer.Option(
            "--attack",
            help="agentdojo: attack name (default important_instructions_no_names); asb: SETTING[:TEMPLATE], "
            "settings opi | dpi | dpi+opi | none (default opi:context_ignoring)",
        ),
    ] = None,
) -> None:
    """Generate and score: math accuracy, HumanEval pass@k (sandboxed), BFCL all-exact,
    AgentDojo utility / utility under attack / attack success rate (limit = user tasks per suite),
    Agent Security Bench attack success rate (attacker tool called) and utility (limit = cases)."""
    require("trl", "mrgrpo eval")
    from mrgrpo.train.evaluate import print_table, run_eval

    result = run_eval(
        model, task, samples=samples, limit=limit, max_new_tokens=max_new_tokens, config_path=config, out=out,
        attack=attack,
    )
    print_table(result)


def register(app: typer.Typer) -> None:
    """Add ``train`` and ``eval`` to ``app`` (a user error: one line, exit status 2, on any app)."""
    app.command("train")(command(train_command))
    app.command("eval")(command(eval_command))
