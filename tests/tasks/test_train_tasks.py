"""Every domain trains end to end from its example config on the tiny preset, resumes, and ends clean.

Each run is a real ``mrgrpo train`` process: its stdout and stderr are pipes read to the end, so
a child process left holding them (the issue's orphaned scoring workers) would hang the test.
Its peak RSS (the trainer process) is reported and must stay under 4 GB.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RSS_LIMIT_KB = 4 * 1024 * 1024
# Runs the CLI, then reports the process's peak RSS on stderr (children have their own): VmHWM,
# not ru_maxrss, which Linux carries over from the parent across fork and exec (a test process
# that loaded a model would lend the run its own peak).
WRAPPER = (
    "import sys\n"
    "from mrgrpo.cli import main\n"
    "from mrgrpo.train.profiling import trainer_max_rss_mb\n"
    "sys.argv = ['mrgrpo', *sys.argv[1:]]\n"
    "try:\n    main()\n"
    "finally:\n    print('MAXRSS_KB', int(trainer_max_rss_mb() * 1024), file=sys.stderr)\n"
)


def mrgrpo(*args: str, timeout: float = 900) -> tuple[int, str, int]:
    """``(exit status, stderr, peak RSS in kB)`` of ``mrgrpo ARGS`` run in a fresh process."""
    done = subprocess.run([sys.executable, "-c", WRAPPER, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    rss = [int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("MAXRSS_KB")]
    return done.returncode, done.stdout + done.stderr, rss[-1] if rss else 0


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # ~1-2 minutes per config (two processes: the run, then its resume)
@pytest.mark.parametrize("name", ["math", "code", "tool_call", "agentdojo"])
def test_example_config_trains_resumes_and_scores_every_component(name, tmp_path):
    run = tmp_path / "run"
    status, log, rss = mrgrpo("train", "--config", f"configs/{name}.yaml", "--out", str(run),
                              "--set", "max_steps=2", "--set", "save_steps=1")
    assert status == 0, log[-3000:]
    print(f"{name}: peak RSS {rss / 1024:.0f} MB")
    assert 0 < rss < RSS_LIMIT_KB
    assert (run / "report.md").is_file() and (run / "checkpoint-2").is_dir()
    suite = yaml.safe_load((run / "config.yaml").read_text())["rewards"]["suite"]
    names = json.loads((run / "diagnostics.jsonl").read_text().splitlines()[0])["names"]
    records = _metrics(run)
    assert [r["step"] for r in records] == [1, 2]
    for component in names:  # every component scored: a finite mean over the run
        values = [r.get(f"mrgrpo/rewards/{component}") for r in records]
        kept = [v for v in values if v is not None and math.isfinite(v)]
        assert kept, f"{suite}: component {component} never scored"

    status, log, _ = mrgrpo("train", "--resume", str(run), "--set", "max_steps=3")
    assert status == 0, log[-3000:]
    assert [r["step"] for r in _metrics(run)] == [1, 2, 3] and (run / "checkpoint-3").is_dir()
