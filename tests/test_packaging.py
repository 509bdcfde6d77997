"""Packaging: the wheel and sdist build; the core installs light; installing mrgrpo beside a
user's own torch and transformers changes neither.

Each test builds fresh virtual environments, so these are ``slow`` (CI runs them). The
"user's own stack" is torch 2.14.1 and transformers 5.24.0, neither of them the pinned
releases (torch 2.13.0, transformers 5.10.4). torch 2.14.1 is the CUDA build (found on this
machine's disk, else on PyPI), installed without its CUDA libraries: pip's resolver reads only
metadata, so what it would *add* to complete that torch is measured first (the baseline) and
set apart; what matters is that mrgrpo's requirements make pip replace nothing installed.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from mrgrpo.train.trl_compat import SUPPORTED_TRL

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
USER_STACK = {"torch": "2.14.1", "transformers": "5.24.0"}
HEAVY = {"transformers", "trl", "datasets", "accelerate", "matplotlib", "tensorboard", "pandas", "scipy", "pyarrow"}


def run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{args}: {result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    return result


def new_venv(path: Path) -> Path:
    run(sys.executable, "-m", "venv", path)
    return path / "bin" / "python"


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed(python: Path) -> dict[str, str]:
    listed = json.loads(run(python, "-m", "pip", "list", "--format=json").stdout)
    return {canonical(p["name"]): p["version"] for p in listed}


def dry_run(python: Path, tmp_path: Path, name: str, *requirements: str) -> dict[str, str]:
    """What ``pip install`` would install (name -> version), from its ``--dry-run --report``."""
    report = tmp_path / f"{name}.json"
    run(python, "-m", "pip", "install", "-q", "--dry-run", "--report", report, *requirements)
    return {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> tuple[Path, Path]:
    """``python -m build``: an sdist and a wheel (built from the sdist), from a copy of the tree."""
    tree = tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, tree)
    (wheel,) = out.glob("mrgrpo-*.whl")
    (sdist,) = out.glob("mrgrpo-*.tar.gz")
    return wheel, sdist


def test_wheel_and_sdist(dist):
    wheel, sdist = dist
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        lines = zf.read(metadata).decode().splitlines()
        entry_points = zf.read(metadata.replace("METADATA", "entry_points.txt")).decode()
    assert "mrgrpo/train/trl_compat.py" in names and "mrgrpo = mrgrpo.cli:main" in entry_points
    requires = [Requirement(line.split(":", 1)[1].strip()) for line in lines if line.startswith("Requires-Dist:")]
    for req in requires:
        if req.name in ("torch", "transformers", "trl"):
            assert req.specifier and all(s.operator not in ("==", "===") for s in req.specifier), str(req)
    core = {r.name for r in requires if r.marker is None}
    assert core == {"torch", "numpy", "typer", "click", "rich", "pyyaml"}
    (trl,) = [r for r in requires if r.name == "trl"]
    assert trl.specifier == SUPPORTED_TRL and 'extra == "trl"' in str(trl.marker)
    with tarfile.open(sdist) as tf:
        members = {m.split("/", 1)[1] for m in tf.getnames() if "/" in m}
    assert {"pyproject.toml", "src/mrgrpo/__init__.py", "src/mrgrpo/train/trl_compat.py"} <= members


def test_the_core_installs_light_and_works(dist, tmp_path):
    wheel, _ = dist
    python = new_venv(tmp_path / "core")
    bare = set(installed(python))
    run(python, "-m", "pip", "install", "-q", "torch==2.13.0")
    run(python, "-m", "pip", "install", "-q", "-c", ROOT / "constraints.txt", wheel)
    packages = {name: v for name, v in installed(python).items() if name not in bare}
    assert not (set(packages) & HEAVY), set(packages) & HEAVY
    assert len(packages) <= 25, packages  # torch and its 9 dependencies, numpy, the CLI libraries, mrgrpo
    site = next((tmp_path / "core" / "lib").glob("python*/site-packages"))
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file() and not f.is_symlink())
    # import mrgrpo loads nothing beyond what torch itself loads
    probe = (
        "import sys, time; t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); "
        "before = {m.split('.')[0] for m in sys.modules}; import mrgrpo; t2 = time.perf_counter(); "
        "new = sorted({m.split('.')[0] for m in sys.modules} - before - set(sys.stdlib_module_names)); "
        "print(repr(new), t1 - t0, t2 - t1)"
    )
    times = []
    for _ in range(3):
        new, torch_s, mrgrpo_s = run(python, "-c", probe).stdout.rsplit(maxsplit=2)
        assert new.strip() == "['mrgrpo']", new
        times.append(float(mrgrpo_s))
    cli = tmp_path / "core" / "bin" / "mrgrpo"
    out = run(cli, "advantages", "--example", "corrgrpo-fig2").stdout
    assert "1.8607" in out and "0.9304" in out
    missing = subprocess.run([cli, "train"], capture_output=True, text=True)
    assert missing.returncode == 2 and "pip install 'mrgrpo[trl]'" in missing.stderr, missing.stderr
    print(
        f"\ncore install: {len(packages)} packages ({', '.join(sorted(packages))}), {size / 2**20:.0f} MiB in "
        f"site-packages; import mrgrpo beyond torch: {min(times) * 1000:.0f} ms (best of 3; torch {float(torch_s):.2f} s)"
    )


def test_installing_beside_the_users_own_torch_and_transformers_changes_neither(dist, tmp_path):
    wheel, _ = dist
    python = new_venv(tmp_path / "user")
    run(python, "-m", "pip", "install", "-q", "--no-deps", f"torch=={USER_STACK['torch']}")
    run(python, "-m", "pip", "install", "-q", f"transformers=={USER_STACK['transformers']}")
    before = installed(python)
    assert {name: before[name] for name in USER_STACK} == USER_STACK
    stack = [f"{name}=={version}" for name, version in USER_STACK.items()]
    # What pip would do to complete the user's own stack (torch's CUDA libraries and small
    # dependencies, as torch went in with --no-deps): set apart, it is not mrgrpo's doing.
    baseline = dry_run(python, tmp_path, "baseline", *stack)
    for name, requirement in (("core", str(wheel)), ("trl", f"mrgrpo[trl] @ {wheel.as_uri()}")):
        plan = dry_run(python, tmp_path, name, requirement)
        changed = {n: (before[n], v) for n, v in plan.items() if n in before and baseline.get(n) != v}
        assert not changed, f"installing {name} would change the user's packages: {changed}"
        added = sorted(set(plan) - set(baseline))
        assert "mrgrpo" in added and not {"torch", "transformers"} & set(plan)
        print(f"\n{name}: replaces nothing of {len(before)} installed; adds {', '.join(added)}")


def wheel_user(wheel: Path, tmp_path: Path) -> tuple[Path, Path, Path, dict[str, str]]:
    """A pip user without a checkout: ``(python, mrgrpo executable, empty working directory, env)``.
    Offline: the fresh venv gets mrgrpo from the wheel (``--no-deps``) and borrows the running
    environment's installed dependencies as a plain path entry (so its editable mrgrpo is not seen)."""
    import os
    import sysconfig

    python = new_venv(tmp_path / "pip-user")
    run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel)
    site = next((tmp_path / "pip-user" / "lib").glob("python*/site-packages"))
    (site / "borrowed-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"  # `mrgrpo`, `python` are the venv's
    where = run(python, "-c", "import mrgrpo; print(mrgrpo.__file__)", cwd=empty, env=env).stdout.strip()
    assert where.startswith(str(site)), where  # the wheel's mrgrpo, not a checkout's
    return python, python.parent / "mrgrpo", empty, env


def test_the_wheel_ships_every_example_config_and_runs_one_by_name_from_an_empty_directory(dist, tmp_path):
    """A pip user without a checkout: ``mrgrpo configs list`` shows every config of the repository's
    ``configs/`` (and the verl kit) and ``mrgrpo train --config NAME --check`` resolves one from the
    installed wheel."""
    wheel, _ = dist
    with zipfile.ZipFile(wheel) as zf:
        shipped = {n.removeprefix("mrgrpo/configs/") for n in zf.namelist() if n.startswith("mrgrpo/configs/")}
    in_repo = {p.relative_to(ROOT / "configs").as_posix() for p in (ROOT / "configs").rglob("*.yaml")}
    assert in_repo and shipped == in_repo, shipped ^ in_repo
    python, cli, empty, env = wheel_user(wheel, tmp_path)
    listed = run(cli, "configs", "list", cwd=empty, env=env).stdout
    assert {line.split()[0] for line in listed.splitlines()} == {n.removesuffix(".yaml") for n in in_repo} | {"verl"}
    checked = run(cli, "train", "--config", "smollm2_tool_call", "--check", cwd=empty, env=env).stdout
    assert "task:" in checked and "bfcl" in checked
    readme_style = run(cli, "train", "--config", "configs/gpu_math.yaml", "--check", cwd=empty, env=env).stdout
    assert "gsm_symbolic" in readme_style
    copied = run(cli, "configs", "copy", "tiny", cwd=empty, env=env).stdout.strip()
    assert (empty / "tiny.yaml").read_text() == (ROOT / "configs" / "tiny.yaml").read_text(), copied
    assert not list(empty.glob("runs")), "--check must not create a run directory"


#: README commands that are resolved (``--check``: validated, nothing loaded) instead of run, and why.
RESOLVED_ONLY = {"mrgrpo train": "the embedded demo trains SmolLM2-135M for about 9 minutes (make demo runs it)"}


def readme_blocks(language: str) -> list[str]:
    """The README's fenced code blocks in ``language``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)


def shell_commands(block: str) -> list[str]:
    """A shell block's commands: comments dropped, ``;``-separated commands split."""
    commands = []
    for line in block.splitlines():
        command: list[str] = []
        for word in [*shlex.split(line, comments=True), ";"]:
            ends = word.endswith(";")
            if word.rstrip(";"):
                command.append(word.rstrip(";"))
            if ends and command:
                commands.append(shlex.join(command))
                command = []
    return commands


def test_the_readmes_command_blocks_run_as_written_from_the_wheel(dist, tmp_path):
    """Every command of the README's shell blocks, as written, in the order written, from an empty
    directory with only the wheel installed (what a pip user has): the CPU-runnable ones run and
    must exit 0 (a tiny model trains, resumes, is evaluated, analyzed; the testbed comparison runs
    and is redrawn); the demo is resolved with ``--check``; the verl launcher, which needs GPUs, is
    copied out of the wheel and must parse and find its files; ``make`` lines are a checkout's (CI
    runs them). The Python blocks: the quick start runs; the TRL sketch (its reward functions and
    dataset are the user's) has its imports and its ``GRPOConfig`` line run, on CPU as its comment says."""
    wheel, _ = dist
    python, cli, empty, env = wheel_user(wheel, tmp_path)
    env = {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    ran, resolved = [], []
    for block in readme_blocks("bash"):
        for command in shell_commands(block):
            words = shlex.split(command)
            assignments = [w for w in words if re.match(r"[A-Z_]+=", w)]
            words = words[len(assignments):]
            if words[0] == "make":
                continue
            if words[:2] == ["bash", "examples/verl/run.sh"]:  # needs GPUs and a Ray cluster
                run("bash", "-n", words[1], cwd=empty, env=env)
                script = (empty / words[1]).read_text()
                for name in re.findall(r'\$HERE/([\w.]+)', script) + re.findall(r"--config-name (\w+)", script):
                    assert list((empty / "examples" / "verl").glob(f"{name}*")), f"run.sh names {name}, not copied"
                resolved.append(command)
                continue
            if command in RESOLVED_ONLY:
                words.append("--check")
                resolved.append(command)
            else:
                ran.append(command)
            executable = {"mrgrpo": str(cli), "python": str(python)}.get(words[0])
            assert executable, f"README runs {words[0]!r}: add it to this test"
            done = subprocess.run([executable, *words[1:]], cwd=empty, env=env, capture_output=True, text=True, timeout=1200)
            assert done.returncode == 0, f"README: {command} exited {done.returncode}: {done.stderr[-1500:]}"
    assert (empty / "runs" / "x" / "checkpoint-80").is_dir() and (empty / "curves.png").stat().st_size > 10_000
    assert len(ran) >= 12 and len(resolved) == 4, (ran, resolved)

    quick_start, trl_sketch = readme_blocks("python")
    run(python, "-c", quick_start, cwd=empty, env=env)
    tree = ast.parse(trl_sketch)
    imports = [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    config = next(ast.unparse(node) for node in tree.body if "GRPOConfig(" in ast.unparse(node))
    config = config.replace("reward_weights=", "use_cpu=True, report_to=[], reward_weights=")
    check = "; ".join([*imports, config, "import inspect",
                       "assert {'estimator', 'estimator_options'} <= set(inspect.signature(MultiRewardGRPOTrainer).parameters)"])
    run(python, "-c", check, cwd=empty, env=env)
