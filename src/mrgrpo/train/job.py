"""The ``mrgrpo train`` job: a run directory around :class:`MultiRewardGRPOTrainer`.

A run directory holds::

    config.yaml          the resolved mrgrpo config (every default filled in)
    grpo_config.json     the resolved TRL GRPOConfig the trainer ran with
    metrics.jsonl        one JSON line per step (TRL's metrics + mrgrpo/...)
    diagnostics.jsonl    mrgrpo.diagnose of each step's reward batch
    rollouts.jsonl       each step's reward matrix and group ids (input of `mrgrpo analyze`)
    tensorboard/         TensorBoard events of the same scalars
    checkpoint-N/        model, tokenizer, optimizer, scheduler, RNG and trainer state
    report.md, *.png     written at the end (also after a Ctrl-C or wall-clock stop)

    resumes.jsonl        one line per resume: step, time, changed keys, the config it ran with

``--resume RUN_DIR`` re-reads the run's config, continues from the last checkpoint (same step
counter, optimizer and RNG state) and drops metrics lines logged after that checkpoint, so a
crash loses at most one checkpoint interval and leaves no duplicates. Resuming a run whose last
checkpoint is at ``max_steps`` does nothing (raise ``max_steps`` with ``--set`` to go on).
Only ``max_steps``, ``max_wall_seconds`` and ``save_steps`` may change on a resume; any other
change (estimator, its options, model, rewards, trainer settings, ...) is refused unless
``allow_changes=True`` (``--allow-change``). ``config.yaml`` stays the config the run started
with; every resume, and what it changed, is appended to ``resumes.jsonl``.

Ctrl-C stops after the current step with a checkpoint (``RunResult.interrupted``; the command
exits with status 130); SIGTERM does the same and the command exits with 143. A process that inherited SIGINT as ignored (a background job of a
non-interactive shell, ``nohup``) keeps ignoring it, and the SIGINT disposition is restored on
every way out.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from mrgrpo.train.children import reaped_children
from mrgrpo.train.config import ConfigError, TrainConfig, apply_overrides, validate_config
from mrgrpo.train.memory import set_mmap_threshold
from mrgrpo.train.precision import AUTO, Precision, resolve_bf16
from mrgrpo.yaml_numbers import load_yaml

CONFIG_FILE = "config.yaml"
RESUMES_FILE = "resumes.jsonl"
#: Keys a resume may change without ``allow_changes`` (they extend or bound the run, not alter it).
RESUME_FREE_KEYS = ("max_steps", "max_wall_seconds", "save_steps")


@dataclass
class RunResult:
    run_dir: Path
    steps: int
    stop_reason: str
    seconds: float
    last_checkpoint: Path | None
    interrupted: bool = False  # stopped by Ctrl-C (the command exits with status 130)


def default_run_dir(config: TrainConfig) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{stamp}-{config.estimator}"


def last_checkpoint(run_dir: Path) -> Path | None:
    from transformers.trainer_utils import get_last_checkpoint

    found = get_last_checkpoint(str(run_dir)) if Path(run_dir).is_dir() else None
    return Path(found) if found else None


def run_config_data(run_dir: Path) -> tuple[dict[str, Any], str]:
    """The raw config a run last ran with (``config.yaml``, or the config of the last entry of
    ``resumes.jsonl``) and a name for it in messages."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(f"--resume {run_dir}: no {CONFIG_FILE} there; is it a run directory?")
    resumes = Path(run_dir) / RESUMES_FILE
    if resumes.is_file():
        for line in reversed(resumes.read_text().splitlines()):
            try:
                return dict(json.loads(line)["config"]), f"{resumes} (last resume)"
            except (ValueError, KeyError, TypeError):  # a line cut by a crash
                continue
    try:
        data = load_yaml(path.read_text())
    except Exception as error:  # noqa: BLE001 - yaml.YAMLError or undecodable text
        raise ConfigError(f"--resume {run_dir}: {CONFIG_FILE} cannot be read ({type(error).__name__})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--resume {run_dir}: {CONFIG_FILE} does not hold a mapping")
    return data, str(path)


def load_run_config(run_dir: Path, overrides: list[str] | None = None) -> TrainConfig:
    """The config a run last ran with, with optional ``--set`` overrides (e.g. more steps)."""
    data, source = run_config_data(run_dir)
    return validate_config(apply_overrides(data, overrides or []), source)


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


def resume_changes(config: TrainConfig, run_dir: Path) -> dict[str, dict[str, Any]]:
    """``{dotted key: {"from": old, "to": new}}`` between the run's last config and ``config``."""
    data, source = run_config_data(run_dir)
    before = _flat(validate_config(data, source).model_dump(mode="json"))
    after = _flat(config.model_dump(mode="json"))
    missing = object()
    return {
        key: {"from": before.get(key), "to": after.get(key)}
        for key in sorted(set(before) | set(after))
        if before.get(key, missing) != after.get(key, missing)
    }


def check_resume(config: TrainConfig, run_dir: Path, allow_changes: bool = False) -> tuple[Path, int, dict[str, Any]]:
    """The checkpoint to resume ``run_dir`` from, its step and the config changes; raises
    :class:`ConfigError` when there is none or when a change other than
    :data:`RESUME_FREE_KEYS` is made without ``allow_changes``."""
    checkpoint = last_checkpoint(run_dir)
    if checkpoint is None:
        raise ConfigError(f"--resume {run_dir}: no checkpoint-N directory to resume from")
    try:
        step = int(json.loads((checkpoint / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(f"--resume {run_dir}: {checkpoint.name}/trainer_state.json is missing or unreadable") from None
    changes = resume_changes(config, run_dir)
    refused = {k: v for k, v in changes.items() if k.split(".")[0] not in RESUME_FREE_KEYS}
    if refused and not allow_changes:
        shown = "; ".join(f"{k}: {v['from']!r} -> {v['to']!r}" for k, v in refused.items())
        raise ConfigError(
            f"--resume {run_dir} would change what the run trains ({shown}); pass --allow-change to resume with "
            f"it anyway (recorded in {RESUMES_FILE}), or start a new run with --out"
        )
    return checkpoint, step, changes


def _record_resume(run_dir: Path, config: TrainConfig, checkpoint: Path, step: int, changes: dict[str, Any]) -> None:
    entry = {
        "time": datetime.now().isoformat(timespec="seconds"),
        "checkpoint": checkpoint.name,
        "step": step,
        "changes": changes,
        "config": config.model_dump(mode="json"),
    }
    with (run_dir / RESUMES_FILE).open("a") as handle:
        handle.write(json.dumps(entry) + "\n")


def grpo_config(config: TrainConfig, run_dir: Path) -> Any:
    """TRL's ``GRPOConfig``: mrgrpo's run settings, CPU defaults, then ``config.trainer``, with
    ``bf16`` resolved for this machine (:func:`run_precision`)."""
    import torch
    from trl import GRPOConfig

    settings: dict[str, Any] = {
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_total_limit": 2,
        "report_to": "none",  # TensorBoard is written by the job itself; add wandb etc. here
        "disable_tqdm": True,  # the job draws its own progress bar
        "log_completions": False,
    }
    if not torch.cuda.is_available():
        settings.update({"use_cpu": True, "fp16": False, "gradient_checkpointing": False})
    settings.update(config.trainer)
    settings["bf16"] = run_precision(config).bf16
    settings.update(
        {
            "output_dir": str(run_dir),
            "max_steps": config.max_steps,
            "save_steps": config.save_steps,
            "seed": config.seed,
        }
    )
    try:
        return GRPOConfig(**settings)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"invalid trainer settings: {error}") from None


def run_precision(config: TrainConfig) -> Precision:
    """Whether the run trains in bfloat16 autocast, and why: ``trainer.bf16`` (``auto`` when unset)
    resolved for this machine's GPU or CPU (:mod:`mrgrpo.train.precision`)."""
    import torch

    return resolve_bf16(config.trainer.get("bf16", AUTO), torch.cuda.is_available(),
                        fp16=bool(config.trainer.get("fp16")))


def build_suite(config: TrainConfig, tokenizer: Any) -> Any:
    """The reward suite of ``config.rewards`` for the run's task (``tokenizer`` given to suites that
    count tokens); the task registry resolves the task and checks the suite's options."""
    from mrgrpo.tasks.prepare import build_suite as task_suite
    from mrgrpo.tasks.registry import resolve

    task, spec = resolve(config.task)
    return task_suite(task, task.resolve_options(spec.options), config.rewards, tokenizer)


def policy_chat(model: str, tokenizer: Any) -> bool:
    """Whether the policy's prompts are chat messages, known from its tokenizer before the model loads
    (as :func:`mrgrpo.train.presets.load_model` decides it: the ``tiny`` preset never is)."""
    return model != "tiny" and getattr(tokenizer, "chat_template", None) is not None


def prepare_task(config: TrainConfig, split: str = "train") -> Any:
    """The run's task, suite and rows, checked before any model is loaded (:func:`mrgrpo.tasks.prepare.prepare`)."""
    from mrgrpo.tasks.prepare import prepare
    from mrgrpo.train.presets import load_tokenizer

    try:
        tokenizer = load_tokenizer(config.model)
    except (OSError, ValueError) as error:
        raise ConfigError(f"model {config.model!r}: cannot load its tokenizer: {error}") from None
    prepared = prepare(config.task, config.rewards, tokenizer, policy_chat(config.model, tokenizer), split)
    if config.rewards.suite != prepared.suite_name:  # the config named no suite: record the task's
        config.rewards.suite = prepared.suite_name
    return prepared


def bind_run(config: TrainConfig, suite: Any, checkpoint: Path | None = None) -> Any:
    """The run's estimator bound to its suite (component names, ranges, weights), GRPOConfig's
    settings and, resuming from ``checkpoint``, the estimator state saved there
    (:func:`mrgrpo.estimators.binding.bind`): every estimator mistake fails here, before any
    model loads."""
    from mrgrpo.estimators import get_estimator
    from mrgrpo.estimators.binding import bind
    from mrgrpo.train.host import ESTIMATOR_STATE_FILE, read_estimator_state, trl_host

    state, source = None, "the resumed state"
    path = Path(checkpoint) / ESTIMATOR_STATE_FILE if checkpoint is not None else None
    if path is not None and path.is_file() and get_estimator(config.estimator).stateful:
        state, source = read_estimator_state(path, config.estimator), str(path)
    return bind(
        config.estimator, config.estimator_options, names=suite.names, ranges=suite.reward_ranges,
        weights=suite.weights, host=trl_host(None, "rewards.weights"), correlation_ema=config.correlation_ema,
        state=state, state_from=source,
    )


def check_run(config: TrainConfig, resume: str | Path | None = None, allow_changes: bool = False) -> Any:
    """What ``mrgrpo train --check`` checks beyond the config, loading no model and no tokenizer:
    the resume (a checkpoint to resume from, the changes it may make), the task, its rows and
    its reward suite (:func:`mrgrpo.tasks.prepare.prepare` without scoring samples: a bad
    pairing or a missing extra fails here), and the estimator bound to the suite and to the
    state being resumed (:func:`bind_run`). Returns the binding."""
    import datasets

    from mrgrpo.tasks.prepare import prepare

    datasets.disable_progress_bars()
    checkpoint = check_resume(config, Path(resume), allow_changes)[0] if resume is not None else None
    prepared = prepare(config.task, config.rewards, None, chat=config.model != "tiny", score=False)
    return bind_run(config, prepared.suite, checkpoint)


@reaped_children()
def run_train(
    config: TrainConfig,
    out: str | Path | None = None,
    resume: str | Path | None = None,
    job_started: float | None = None,
    extra_callbacks: list[Any] | None = None,
    quiet: bool = False,
    allow_changes: bool = False,
) -> RunResult:
    """Train as configured; returns where the run lives and why it stopped.

    ``resume``: a run directory to continue (see the module docstring for what may change;
    ``allow_changes=True`` accepts any change and records it in ``resumes.jsonl``).

    The task and reward suite are checked before the model loads (:func:`prepare_task`); every
    child process the run starts is ended on every way out (:func:`mrgrpo.train.children.reaped_children`)."""
    from mrgrpo.extras import require

    require("plots", "mrgrpo.train.run_train (TensorBoard events and the run report's plots)")

    from rich.console import Console
    from transformers import PrinterCallback
    from transformers import ProgressCallback as HFProgressCallback

    from mrgrpo.train.callbacks import ModelCardCallback, ProgressCallback, RunLogCallback, StopCallback, truncate_jsonl
    from mrgrpo.train.presets import load_model
    from mrgrpo.train.profiling import PROFILE_FILE, StepProfiler
    from mrgrpo.train.rollout_log import RolloutLogger
    from mrgrpo.train.report import write_report
    from mrgrpo.tasks.prepare import fit_prompts, model_context
    from mrgrpo.train.trainer import MultiRewardGRPOTrainer

    import datasets

    job_started = time.monotonic() if job_started is None else job_started
    datasets.disable_progress_bars()
    console = Console(stderr=True, quiet=quiet, soft_wrap=True)
    resume_plan = None
    if resume is not None:
        resume_plan = check_resume(config, Path(resume), allow_changes)
        if resume_plan[1] >= config.max_steps:  # nothing left to train: do not load anything
            console.print(
                f"{resume}: already finished ({resume_plan[0].name} is at step {resume_plan[1]} of max_steps "
                f"{config.max_steps}); nothing to do. Train further with --set max_steps=N (N > {resume_plan[1]})"
            )
            return RunResult(Path(resume), resume_plan[1], "already finished", time.monotonic() - job_started,
                             resume_plan[0])
    prepared = prepare_task(config)  # bad pairings fail here, before a run directory or model exists
    # the estimator bound to the suite (names, ranges, weights) and the state being resumed, once,
    # before any model loads; the trainer receives the binding
    binding = bind_run(config, prepared.suite, resume_plan[0] if resume_plan is not None else None)
    checkpoint: Path | None = None
    if resume is not None:
        run_dir = Path(resume)
        checkpoint = last_checkpoint(run_dir)
        if checkpoint is None:
            raise ConfigError(f"--resume {run_dir}: no checkpoint-N directory to resume from")
    else:
        run_dir = Path(out) if out is not None else default_run_dir(config)
        if last_checkpoint(run_dir) is not None:
            raise ConfigError(f"{run_dir} already holds checkpoints: use --resume {run_dir} or another --out")
    run_dir.mkdir(parents=True, exist_ok=True)
    if config.malloc_mmap_threshold_kib is not None and not set_mmap_threshold(config.malloc_mmap_threshold_kib):
        console.print("malloc_mmap_threshold_kib: this C library is not glibc; the setting has no effect here")
    args = grpo_config(config, run_dir)
    console.print(run_precision(config).line())
    if resume_plan is None:
        (run_dir / CONFIG_FILE).write_text(config.to_yaml())
    else:  # config.yaml stays the config the run started with; the resume is recorded
        _record_resume(run_dir, config, *resume_plan)
        if resume_plan[2]:
            changed = ", ".join(f"{k} {v['from']!r} -> {v['to']!r}" for k, v in resume_plan[2].items())
            console.print(f"resume changes: {changed} (recorded in {RESUMES_FILE})")
    (run_dir / "grpo_config.json").write_text(args.to_json_string())

    resumed_step = 0
    if checkpoint is not None:
        state = json.loads((checkpoint / "trainer_state.json").read_text())
        resumed_step = int(state["global_step"])
        truncate_jsonl(run_dir / "metrics.jsonl", resumed_step)
        truncate_jsonl(run_dir / "diagnostics.jsonl", resumed_step)
        truncate_jsonl(run_dir / PROFILE_FILE, resumed_step)
        console.print(f"resuming {run_dir} from {checkpoint.name} (step {resumed_step})")

    console.print(f"loading model {config.model!r} ...")
    # the tokenizer the task was prepared with: read once per run
    loaded = load_model(config.model, seed=config.seed, tokenizer=prepared.tokenizer, **config.model_kwargs)
    if loaded.chat != prepared.chat:  # the preset decided otherwise: rebuild the rows
        prepared.dataset = prepared.task.rows(prepared.spec, "train", chat=loaded.chat)
    suite = prepared.suite
    fit = fit_prompts(prepared, loaded.tokenizer, loaded.chat, model_context(loaded.model, loaded.tokenizer),
                      args.max_completion_length or 0)
    dataset = prepared.dataset
    if fit is not None:
        console.print(fit.line(prepared.task.name))

    stop = StopCallback(config.max_wall_seconds, job_started)
    log_cb = RunLogCallback(run_dir, purge_step=resumed_step + 1 if resumed_step else None)
    progress = ProgressCallback(suite.names, stop, console=console)
    rollout_log = RolloutLogger(run_dir)  # every step's reward batch, for `mrgrpo analyze`
    profiler = StepProfiler(run_dir)  # first: it adds each step's time split to the logs the others write
    trainer_class, task_kwargs = MultiRewardGRPOTrainer, {}
    if prepared.task.rollout == "multi_turn":  # the task's environment answers between turns
        from mrgrpo.train.agent_rollout import AgentGRPOTrainer, AgentRollout

        rollout_options = {k: prepared.options[k] for k in prepared.task.rollout_options}
        trainer_class = AgentGRPOTrainer
        task_kwargs = {"rollout": AgentRollout(**rollout_options, episode_factory=prepared.task.episode)}
    trainer = trainer_class(
        **task_kwargs,
        model=loaded.model,
        args=args,
        train_dataset=dataset,
        processing_class=loaded.tokenizer,
        suite=suite,
        binding=binding,
        diagnostics_every=config.diagnostics_every,
        share_prompt=config.share_prompt,
        callbacks=[profiler, stop, log_cb, progress, rollout_log, ModelCardCallback(run_dir, config),
                   *(extra_callbacks or [])],
    )
    profiler.attach(trainer)
    log_cb.trainer = trainer
    rollout_log.trainer = trainer
    for callback in extra_callbacks or []:  # callbacks that read the trainer (e.g. RolloutLogger)
        if hasattr(callback, "trainer") and callback.trainer is None:
            callback.trainer = trainer
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(HFProgressCallback)
    if resumed_step:
        metrics = run_dir / "metrics.jsonl"
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        log_cb.elapsed_before = json.loads(lines[-1]).get("time_s", 0.0) if lines else 0.0

    console.print(
        f"training {loaded.name} with {config.estimator} on {config.task.name} "
        f"({', '.join(f'{n}×{w:g}' for n, w in zip(suite.names, suite.weights))}) → {run_dir}"
    )
    with _SigintStops(stop):
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    steps = int(trainer.state.global_step)
    reason = stop.reason or ("max_steps reached" if steps >= config.max_steps else "stopped")
    final = last_checkpoint(run_dir)
    seconds = time.monotonic() - job_started
    write_report(run_dir, config, steps=steps, stop_reason=reason, seconds=seconds, checkpoint=final)
    console.print(f"done: {steps} steps ({reason}) in {seconds:.0f} s; report: {run_dir / 'report.md'}")
    return RunResult(run_dir, steps, reason, seconds, final, interrupted=reason.startswith("interrupted"))


def end_process_group() -> None:
    """Destroy the default process group, if this process has one (``accelerate launch``, torchrun).

    For the process's last owner to call once no rank communicates any more (``mrgrpo train`` does
    after its run). A process that exits with the group alive can abort in interpreter
    finalization (gloo's threads: SIGABRT, "terminate called without an active exception") after
    a run that succeeded, which its launcher reports as a failed run. A library caller that made
    the group itself keeps it: :func:`run_train` does not end it.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


class _SigintStops:
    """Within the block, the first Ctrl-C or SIGTERM asks ``stop`` for a checkpoint and a clean stop.

    A signal inherited as ignored (SIGINT in a background job, ``nohup``) stays ignored: the
    parent asked for it, and Ctrl-C at a terminal is not meant for this process. Off the main
    thread signals cannot be set, so nothing is installed. The previous dispositions are restored
    on every exit.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, stop: Any) -> None:
        self.stop = stop
        self.previous: dict[int, Any] = {}
        self.installed = False

    def __enter__(self) -> _SigintStops:
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.getsignal(s) for s in self.SIGNALS}
            handled = tuple(s for s in self.SIGNALS if self.previous[s] is not signal.SIG_IGN)
            if handled:
                self.stop.install(handled)
                self.installed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.installed:
            self.stop.uninstall()
            for signum, previous in self.previous.items():
                if previous is not None and signal.getsignal(signum) is not previous:
                    signal.signal(signum, previous)
