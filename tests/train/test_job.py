"""End-to-end tiny runs: every estimator writes all run files; resume and Ctrl-C keep one history."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
import yaml
from transformers import TrainerCallback

from mrgrpo.estimators import available_estimators
from mrgrpo.train.config import ConfigError, validate_config
from mrgrpo.train.job import load_run_config, run_train

from .conftest import estimator_config, tiny_config

REPO = Path(__file__).resolve().parents[2]

RUN_FILES = [
    "config.yaml",
    "grpo_config.json",
    "metrics.jsonl",
    "diagnostics.jsonl",
    "rollouts.jsonl",
    "report.md",
    "rewards.png",
    "reward_total.png",
    "advantages.png",
    "correlation.png",
]


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("estimator", available_estimators())
def test_tiny_run_writes_all_files(estimator, tmp_path):
    # its example options; diagnostics every step (the default, every 10, would give step 2 none; see the test below)
    config = validate_config(estimator_config(estimator, max_steps=2, save_steps=2, diagnostics_every=1))
    result = run_train(config, out=tmp_path / "run", quiet=True)
    run = result.run_dir
    assert result.steps == 2 and result.stop_reason == "max_steps reached"
    for name in RUN_FILES:
        assert (run / name).is_file(), name
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert (run / "checkpoint-2" / "trainer_state.json").is_file()
    assert _steps(run / "metrics.jsonl") == [1, 2]
    record = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    for key in ("mrgrpo/rewards/correctness", "mrgrpo/rewards/format", "mrgrpo/rewards/length",
                "mrgrpo/reward_total", "mrgrpo/advantages/std", "mrgrpo/diag/zero_variance_fraction", "loss"):
        assert key in record, key
    diag = json.loads((run / "diagnostics.jsonl").read_text().splitlines()[0])
    assert diag["names"] == ["correctness", "format", "length"] and "correlation" in diag
    report = (run / "report.md").read_text()
    assert estimator in report and "rewards.png" in report
    _check_documented_keys(run, estimator, diag["names"])


def _key_patterns(markdown: str, estimator: str) -> list[re.Pattern]:
    """The metric keys a doc names, ``{a,b}`` expanded, ``<component>`` and ``<index>`` wildcards."""
    keys = []
    for key in re.findall(r"`(mrgrpo/[^`\s]+)`", markdown):
        parts = re.split(r"\{([^}]*)\}", key)
        expanded = [""]
        for i, part in enumerate(parts):
            expanded = [e + alt for e in expanded for alt in (part.split(",") if i % 2 else [part])]
        keys += expanded
    return [re.compile(re.escape(k).replace(re.escape("<component>"), "[^/]+").replace(re.escape("<estimator>"), estimator)
                       .replace(re.escape("<index>"), "[0-9]+") + "$")
            for k in keys]


def _check_documented_keys(run: Path, estimator: str, components: list[str]) -> None:
    """docs/estimators: every key a page names is logged by a real run, and every mrgrpo/ key the run
    logs is named on the estimator's page or on the page of keys every estimator logs."""
    logged = {k for line in (run / "metrics.jsonl").read_text().splitlines() for k in json.loads(line) if k.startswith("mrgrpo/")}
    page = (REPO / "docs" / "estimators" / f"{estimator}.md").read_text()
    section = page[page.index("**What it logs**"):].split("\n\n")[0]
    common = _key_patterns((REPO / "docs" / "estimators" / "logging.md").read_text(), estimator)
    named = _key_patterns(section, estimator)
    assert named, f"{estimator}.md names no metric key under 'What it logs'"
    for pattern in named + common:
        assert any(pattern.match(key) for key in logged), f"documented but never logged: {pattern.pattern}"
    for key in logged:
        assert any(p.match(key) for p in named + common), f"logged but documented nowhere: {key}"


class CrashAt(TrainerCallback):
    """Simulates a crash after step ``step`` was logged (before any later checkpoint)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.global_step == self.step and logs and "loss" in logs:
            raise RuntimeError("simulated crash")


def test_resume_after_crash_continues_the_same_run(tmp_path):
    config = validate_config(tiny_config(max_steps=4, save_steps=2, diagnostics_every=1))  # a diagnostics line per step
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_train(config, out=run, extra_callbacks=[CrashAt(3)], quiet=True)
    assert _steps(run / "metrics.jsonl") == [1, 2, 3]
    assert (run / "checkpoint-2").is_dir() and not (run / "checkpoint-4").exists()
    with pytest.raises(ConfigError, match="--resume"):  # a fresh run must not overwrite it
        run_train(config, out=run, quiet=True)

    result = run_train(config, resume=run, quiet=True)
    assert result.steps == 4
    assert _steps(run / "metrics.jsonl") == [1, 2, 3, 4]  # step 3 logged again, once
    assert _steps(run / "diagnostics.jsonl") == [1, 2, 3, 4]
    state = json.loads((run / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4

    # Same optimizer, RNG and data order: an uninterrupted run logs the same losses.
    straight = run_train(config, out=tmp_path / "straight", quiet=True)
    ours = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    ref = [json.loads(l) for l in (straight.run_dir / "metrics.jsonl").read_text().splitlines()]
    for a, b in zip(ours, ref):
        assert a["mrgrpo/reward_total"] == pytest.approx(b["mrgrpo/reward_total"])
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)


class SigintAt(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGINT)


@pytest.fixture
def sigint_default():
    """SIGINT as in an interactive terminal (a background job inherits it ignored), restored after."""
    inherited = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, inherited)


def test_ctrl_c_saves_a_checkpoint_and_stops_cleanly(tmp_path, sigint_default):
    config = validate_config(tiny_config(max_steps=10, save_steps=5))
    result = run_train(config, out=tmp_path / "run", extra_callbacks=[SigintAt(1)], quiet=True)
    assert result.steps == 2 and "interrupted" in result.stop_reason and result.interrupted
    assert (result.run_dir / "checkpoint-2").is_dir()
    assert (result.run_dir / "report.md").is_file()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # what it was before the run


class SigtermAt(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_saves_a_checkpoint_and_stops_like_ctrl_c(tmp_path):
    """A scheduler's preemption (SIGTERM) loses no work: checkpoint after the step, report, handler restored."""
    inherited = signal.getsignal(signal.SIGTERM)
    config = validate_config(tiny_config(max_steps=10, save_steps=5))
    result = run_train(config, out=tmp_path / "run", extra_callbacks=[SigtermAt(1)], quiet=True)
    assert result.steps == 2 and result.interrupted and "SIGTERM" in result.stop_reason
    assert (result.run_dir / "checkpoint-2").is_dir() and (result.run_dir / "report.md").is_file()
    assert signal.getsignal(signal.SIGTERM) is inherited


def test_an_ignored_sigint_stays_ignored(tmp_path):
    """A background job of a non-interactive shell inherits SIGINT as SIG_IGN: the run keeps ignoring it
    (Ctrl-C at the terminal is not meant for it), finishes, and leaves the disposition as it found it."""
    inherited = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        config = validate_config(tiny_config(max_steps=3, save_steps=3))
        result = run_train(config, out=tmp_path / "run", extra_callbacks=[SigintAt(1)], quiet=True)
        assert result.steps == 3 and result.stop_reason == "max_steps reached" and not result.interrupted
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_the_train_command_exits_130_after_ctrl_c(tmp_path, sigint_default, monkeypatch):
    from typer.testing import CliRunner

    import mrgrpo.train.job as job
    from mrgrpo.cli import app

    real = job.run_train
    monkeypatch.setattr(job, "run_train", lambda *a, **k: real(*a, **k, extra_callbacks=[SigintAt(1)]))
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app, ["train", "-c", str(REPO / "configs" / "tiny.yaml"), "--set", "max_steps=10", "--out", str(out)]
    )
    assert result.exit_code == 130, result.output
    assert (out / "checkpoint-2").is_dir()


def test_the_train_command_ends_the_process_group_it_ran_in(tmp_path):
    # (a gloo group left alive can abort the interpreter at exit after a run that succeeded)
    import torch.distributed as dist
    from typer.testing import CliRunner

    from mrgrpo.cli import app
    from mrgrpo.train.job import end_process_group

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        out = tmp_path / "run"
        result = CliRunner().invoke(
            app, ["train", "-c", str(REPO / "configs" / "tiny.yaml"), "--set", "max_steps=1", "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
        assert not dist.is_initialized()
    finally:
        end_process_group()
    end_process_group()  # none left: nothing to do


def test_resuming_a_finished_run_is_a_no_op(tmp_path):
    config = validate_config(tiny_config(max_steps=2, save_steps=2))
    run = run_train(config, out=tmp_path / "run", quiet=True).run_dir
    before = (run / "metrics.jsonl").read_text()
    again = run_train(load_run_config(run), resume=run, quiet=True)
    assert again.steps == 2 and again.stop_reason == "already finished"
    assert (run / "metrics.jsonl").read_text() == before and not (run / "checkpoint-3").exists()
    more = run_train(load_run_config(run, ["max_steps=3"]), resume=run, quiet=True)  # more steps: allowed
    assert more.steps == 3 and _steps(run / "metrics.jsonl") == [1, 2, 3]
    entry = json.loads((run / "resumes.jsonl").read_text().splitlines()[-1])
    assert entry["step"] == 2 and entry["changes"] == {"max_steps": {"from": 2, "to": 3}}
    assert yaml.safe_load((run / "config.yaml").read_text())["max_steps"] == 2  # the run's original config


def test_resume_with_a_changed_estimator_is_refused_unless_allowed(tmp_path):
    config = validate_config(tiny_config(estimator="grpo", max_steps=4, save_steps=2))
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_train(config, out=run, extra_callbacks=[CrashAt(3)], quiet=True)
    original = (run / "config.yaml").read_text()
    for overrides in (["estimator=gdpo"], ["estimator_options.eps=1e-3"], ["model=smollm2"], ["trainer.learning_rate=1e-2"]):
        with pytest.raises(ConfigError, match="--allow-change") as info:
            run_train(load_run_config(run, overrides), resume=run, quiet=True)
        assert overrides[0].split("=")[0] in str(info.value)
    assert (run / "config.yaml").read_text() == original and not (run / "resumes.jsonl").exists()

    result = run_train(load_run_config(run, ["estimator=gdpo"]), resume=run, quiet=True, allow_changes=True)
    assert result.steps == 4
    assert (run / "config.yaml").read_text() == original  # never rewritten as if all of it was gdpo
    entry = json.loads((run / "resumes.jsonl").read_text())
    assert entry["step"] == 2 and entry["changes"] == {"estimator": {"from": "grpo", "to": "gdpo"}}
    assert load_run_config(run).estimator == "gdpo"  # a later resume continues with what it last ran


def test_wall_clock_stop(tmp_path):
    config = validate_config(tiny_config(max_steps=1000, save_steps=500, max_wall_seconds=1.0))
    result = run_train(config, out=tmp_path / "run", quiet=True)
    assert result.steps < 1000 and "wall-clock" in result.stop_reason
    assert (result.run_dir / f"checkpoint-{result.steps}").is_dir()


def test_by_default_diagnostics_run_on_the_first_step_and_every_tenth_and_each_step_is_profiled(tmp_path):
    from mrgrpo.train.config import DEFAULT_DIAGNOSTICS_EVERY
    from mrgrpo.train.profiling import PHASES

    assert DEFAULT_DIAGNOSTICS_EVERY == 10
    result = run_train(validate_config(tiny_config(max_steps=2, save_steps=2)), out=tmp_path / "run", quiet=True)
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert ["mrgrpo/diag/zero_variance_fraction" in r for r in records] == [True, False]
    assert all("mrgrpo/rewards/format" in r and "profile/generation_s" in r for r in records)
    profile = [json.loads(line) for line in (result.run_dir / "profile.jsonl").read_text().splitlines()]
    assert [p["step"] for p in profile] == [1, 2] and all(set(PHASES) <= set(p) for p in profile)
    assert profile[1]["checkpoint"] > 0 and all(p["peak_rss_mb"] > 100 for p in profile)
    report = (result.run_dir / "report.md").read_text()
    assert "## Step time and memory" in report and "| loss_backward |" in report and "step_time.png" in report
    card = (result.run_dir / "README.md").read_text()
    assert "[None]" not in card and "base model `tiny`" in card and "`corr_grpo` estimator" in card
