"""Step accounting: the phase split's arithmetic, the wrapped methods, and the tree RSS sampler."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from mrgrpo.train.profiling import PHASES, PROFILE_FILE, StepProfiler, profile_lines, summarize, tree_rss_bytes


def test_the_split_subtracts_nested_phases_and_leaves_the_rest_to_optimizer_other():
    profiler = StepProfiler()
    raw = {"generation": 4.0, "rewards": 1.0, "advantages": 0.01, "diagnostics": 0.02, "_batch": 5.5,
           "_prepare": 5.6, "_training_step": 8.6, "logging": 0.1, "checkpoint": 0.5}
    split = profiler.split(raw, step_s=10.0)
    assert split["batch_other"] == pytest.approx(5.5 - 4.0 - 1.0 - 0.01 - 0.02)
    assert split["loss_backward"] == pytest.approx(8.6 - 5.6)
    # 10 s = the batch (5.5) + buffer handling (0.1) + loss (3.0) + logging + checkpoint (0.6) + the rest (0.8)
    assert split["optimizer_other"] == pytest.approx(0.8)
    assert list(split) == list(PHASES)


class _Trainer:
    def _generate(self, prompts):
        time.sleep(0.02)
        return prompts

    def _generate_and_score_completions(self, inputs):
        return self._generate(inputs)

    def _prepare_inputs(self, batch):
        return self._generate_and_score_completions(batch)

    def training_step(self, model, inputs, n):
        self._prepare_inputs(inputs)
        time.sleep(0.03)
        return 1.0


def test_attach_times_the_instance_methods_and_the_step_record_is_written(tmp_path):
    trainer = _Trainer()
    profiler = StepProfiler(tmp_path, interval=0.05)
    profiler.attach(trainer)
    profiler.attach(trainer)  # idempotent: no double wrapping
    state = SimpleNamespace(global_step=0)
    profiler.on_train_begin(None, state, None)
    profiler.on_step_begin(None, state, None)
    assert trainer.training_step(None, [1], 1) == 1.0
    logs = {"loss": 0.1}
    profiler.on_log(None, state, None, logs=logs)
    assert logs["profile/generation_s"] >= 0.02 and logs["profile/loss_backward_s"] >= 0.03
    assert logs["profile/peak_rss_mb"] > 10
    profiler.on_train_end(None, state, None)
    (record,) = [json.loads(line) for line in (tmp_path / PROFILE_FILE).read_text().splitlines()]
    assert record["step"] == 1 and record["step_s"] >= record["generation"] + record["loss_backward"]
    summary = summarize([record])
    assert summary["steps"] == 1 and 0 <= summary["mrgrpo_share"] < 0.01
    assert any(line.startswith("| loss_backward |") for line in profile_lines(summary))


def test_tree_rss_counts_the_children():
    before = tree_rss_bytes()
    child = subprocess.Popen([sys.executable, "-c", "b = bytearray(300 * 2**20); import time; b[::4096] = b'x' * len(b[::4096]); time.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            alone = tree_rss_bytes(child.pid)
            if alone and alone > 300 * 2**20:
                break
            time.sleep(0.2)
        assert tree_rss_bytes(child.pid) > 300 * 2**20
        assert tree_rss_bytes() >= before + 300 * 2**20 - 50 * 2**20  # the parent's sum includes it
    finally:
        child.kill()
        child.wait()


def test_the_trainer_peak_is_its_own_not_the_parents_it_was_started_from():
    # Linux carries ru_maxrss over fork and exec: a run started by a process that once held a
    # large resident set (a test runner that loaded a model) must not report that peak as its own.
    ballast = bytearray(1200 * 2**20)
    ballast[:: 4096] = b"x" * len(ballast[:: 4096])  # touch every page: resident
    code = "from mrgrpo.train.profiling import trainer_max_rss_mb; print(trainer_max_rss_mb())"
    peak_mb = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    del ballast
    assert 0 < peak_mb < 900  # importing transformers alone takes ~350 MB


def test_tree_rss_walks_the_tree_with_the_childrens_walk(monkeypatch):
    # one process-tree walk (mrgrpo.train.children.descendants): without descendants, the sum is the process alone
    import os

    import mrgrpo.train.children as children

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and child.pid not in children.descendants():
            time.sleep(0.05)
        with_child = tree_rss_bytes()
        monkeypatch.setattr(children, "descendants", lambda pid=None: {})
        alone = tree_rss_bytes()
        with open(f"/proc/{os.getpid()}/statm") as handle:
            own = int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        assert abs(alone - own) < 20 * 2**20 and with_child > alone + 2 * 2**20  # the child's interpreter counted
    finally:
        child.kill()
        child.wait()
