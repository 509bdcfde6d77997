"""A short seeded comparison reproduces its committed summary (docs/results/repro-smoke) exactly.

The committed numbers of docs/results.md come from runs that are chaotic in float rounding: a
warm start of thousands of steps, then RL with sampling. One host reproduces them bit for bit;
two hosts whose CPU kernels round differently (torch's AVX2 vs AVX512 kernels, MKL's code paths)
do not. This check therefore runs in the portable numeric mode (``PORTABLE_ENV``: torch's
scalar kernels, MKL's conditional numerical reproducibility, one thread), in which the same seed
gives the same weights whatever the x86-64 CPU, and compares every cell of the summary with the
committed one with no tolerance: the objectives are means of discrete outcomes, so any drift in
the weights shows as a changed sample, not as a rounding difference.

Regenerate the committed summary (after a change that is meant to change the runs) with::

    env ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \\
      mrgrpo compare --config configs/testbed/learnable_scale1.yaml --estimators grpo,gdpo \\
      --seeds 2 --jobs 1 --out runs/repro-smoke $(python tests/experiments/test_reproducible.py)
    cp runs/repro-smoke/summary.json docs/results/repro-smoke/summary.json

(``python tests/experiments/test_reproducible.py`` prints the ``--set`` options; an import of
``tests.experiments`` can be shadowed by an installed package named ``tests``.)

History: regenerated on 2026-12-04 at commit 4fcd871 with ``trainer.bf16=false`` added; its
results equal those committed at 8442043 (2026-12-01). Without that override the runs trained in
bfloat16 on AVX512 hosts (``trainer.bf16`` auto, since eb04699) and ``grpo``'s differed there.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
CONFIG = ROOT / "configs" / "testbed" / "learnable_scale1.yaml"
COMMITTED = ROOT / "docs" / "results" / "repro-smoke" / "summary.json"
PORTABLE_ENV = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
OVERRIDES = [
    "experiment.warm_start.steps=100", "task.size=32", "task.eval_size=8", "max_steps=4", "save_steps=4",
    "trainer.num_generations=4", "trainer.per_device_train_batch_size=16", "trainer.max_completion_length=16",
    "experiment.eval.samples=4", "experiment.eval.max_new_tokens=16",
    # float32 everywhere: trainer.bf16's default (auto) trains in bfloat16 on CPUs that compute it
    # natively (AVX512 hosts) and in float32 elsewhere, which would make the runs host-dependent
    "trainer.bf16=false",
]
#: The summary's keys that are results (the rest says where, when and how fast it ran).
RESULT_KEYS = ("estimators", "seeds", "names", "objectives", "baseline", "ranges", "weights", "views", "table", "paired", "steps", "eval_info", "experiment")


def sets() -> str:
    return " ".join(f"--set {o}" for o in OVERRIDES)


@pytest.mark.slow  # ~45 s of CPU (two 100-step warm starts, four 4-step runs); 96 s wall at load average 7
def test_short_seeded_compare_reproduces_its_committed_summary(tmp_path):
    env = {**os.environ, **PORTABLE_ENV, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "mrgrpo.cli", "compare", "--config", str(CONFIG), "--estimators", "grpo,gdpo",
               "--seeds", "2", "--jobs", "1", "--out", str(tmp_path / "out")]
    for override in OVERRIDES:
        command += ["--set", override]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads((tmp_path / "out" / "summary.json").read_text())
    want = json.loads(COMMITTED.read_text())
    assert got["platform"]["cpu_capability"] == "DEFAULT" and got["platform"]["threads"] == 1  # the portable mode took effect
    assert want["overrides"] == OVERRIDES and want["platform"]["env"] == PORTABLE_ENV
    for key in RESULT_KEYS:
        assert got[key] == want[key], f"summary[{key!r}] differs from {COMMITTED.relative_to(ROOT)}"


if __name__ == "__main__":
    print(sets())
