"""The caller survives every program: what a program leaves in its working directory (trees
thousands of levels deep, hundreds of thousands of files, directories it made unreadable) is
removed without recursion and within a deadline, a failure to remove is logged and never
raised out of ``run``/``run_many``, and the guards resolve paths relative to a directory fd
against that fd's directory."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from mrgrpo.rewards.sandbox.cleanup import remove_tree, remove_workdir  # noqa: E402

HERE = Path(__file__).parent
SRC = HERE.parents[1] / "src"
CHILD = SRC / "mrgrpo" / "rewards" / "sandbox" / "child"


def _deep_tree(top: str, depth: int, files: int = 0) -> None:
    """``depth`` nested directories made relative to directory fds (deeper than PATH_MAX)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
            below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
        for i in range(files):
            os.close(os.open(f"x{i}", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
    finally:
        os.close(fd)


def test_remove_tree_deep_wide_locked_and_linked(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("kept")
    deep = tempfile.mkdtemp(dir=tmp_path)
    _deep_tree(deep, 5000)
    with pytest.raises(RecursionError):  # the control: a recursive removal cannot
        shutil.rmtree(deep)
    assert os.path.isdir(deep)
    top = tmp_path / "work"
    top.mkdir()
    _deep_tree(str(top), 3000, files=2000)
    for i in range(5000):
        (top / f"s{i}").mkdir()
    locked = top / "locked"
    locked.mkdir()
    (locked / "inside").write_text("x")
    locked.chmod(0)
    (top / "link").symlink_to(outside)  # removed, never followed
    (top / "s7" / "link").symlink_to(outside / "keep")
    remove_tree(deep)
    remove_tree(str(top))
    assert not os.path.exists(deep) and not top.exists()
    assert (outside / "keep").read_text() == "kept"
    remove_tree(str(top))  # gone already: nothing to do


def test_remove_workdir_never_raises(tmp_path, caplog):
    top = tmp_path / "work"
    _deep_tree(str(tmp_path), 1)
    (tmp_path / "d").rename(top)
    _deep_tree(str(top), 200)
    with caplog.at_level(logging.WARNING, logger="mrgrpo.rewards.sandbox"):
        assert remove_workdir(str(top), timeout=-1.0) is False  # its deadline passed: left, logged
    assert top.exists()
    assert any("could not remove the working directory" in r.getMessage() for r in caplog.records)
    assert remove_workdir(str(top)) is True and not top.exists()


GUARD_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, types
    child, work, outside, stdlib = sys.argv[1:5]
    package = types.ModuleType("_mrgrpo_sandbox")
    package.__path__ = [child]
    sys.modules["_mrgrpo_sandbox"] = package
    from _mrgrpo_sandbox.candidate import _install_guard
    out_fd = os.open(outside, os.O_RDONLY)  # a directory fd outside, opened before the guard
    os.chdir(work)
    _install_guard(work, stdlib, guards_only=True)
    done = {}
    def attempt(name, call):
        try:
            call()
            done[name] = True
        except PermissionError:
            done[name] = False
    attempt("mkdir-outside-fd", lambda: os.mkdir("escaped", dir_fd=out_fd))
    os.mkdir("inside")
    in_fd = os.open("inside", os.O_RDONLY)
    attempt("mkdir-inside-fd", lambda: os.mkdir("sub", dir_fd=in_fd))
    attempt("rename-to-outside-fd", lambda: os.rename("inside/sub", "moved", src_dir_fd=None, dst_dir_fd=out_fd))
    attempt("rename-up-within", lambda: os.rename("sub", "../up", src_dir_fd=in_fd, dst_dir_fd=in_fd))
    attempt("rmdir-climbing-out", lambda: os.rmdir("../../" + os.path.basename(outside), dir_fd=in_fd))
    attempt("chmod-outside-fd", lambda: os.chmod(".", 0o777, dir_fd=out_fd))
    attempt("read-climbing", lambda: os.close(os.open("../x", os.O_RDONLY, dir_fd=in_fd)))
    fd, depth = os.open(".", os.O_RDONLY), 0
    try:
        for depth in range(1, 200):
            os.mkdir("d", dir_fd=fd)
            below = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = below
    except PermissionError:
        pass
    done["depth"] = depth
    print(json.dumps(done))
    """
)


def test_guards_resolve_directory_fds(tmp_path):
    """The guards (no kernel layer here) resolve a path relative to a directory fd against that
    fd's directory: writes through an fd of a directory outside are refused, those inside
    allowed, and dir_fd-relative nesting stops at a bounded depth."""
    import sysconfig

    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    proc = subprocess.run([sys.executable, "-I", "-c", GUARD_SCRIPT, str(CHILD), str(work), str(outside),
                           sysconfig.get_paths()["stdlib"]], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    done = json.loads(proc.stdout.strip().splitlines()[-1])
    assert done == {"mkdir-outside-fd": False, "mkdir-inside-fd": True, "rename-to-outside-fd": False,
                    "rename-up-within": True, "rmdir-climbing-out": False, "chmod-outside-fd": False,
                    "read-climbing": False, "depth": done["depth"]}, done
    assert 60 <= done["depth"] <= 66, done
    assert os.listdir(outside) == [] and outside.stat().st_mode & 0o777 != 0o777
    assert (work / "up").is_dir()


# A program nesting directories relative to directory fds, then by chdir, writing a file at
# every level; and a program making as many files as its CPU time allows.
DEEP = """
import os
def nest():
    made = [0, 0, 0]
    try:
        fd = os.open(".", os.O_RDONLY)
        for i in range(5000):
            os.mkdir("d", dir_fd=fd)
            try:
                os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
                made[2] += 1
            except OSError:
                pass
            below = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = below
            made[0] += 1
    except Exception:
        pass
    print("MADE", made, flush=True)
    try:
        for i in range(3000):
            os.mkdir("c")
            os.chdir("c")
            open("f", "w").close()
            made[1] += 1
    except Exception:
        pass
    return made
MADE = nest()
print("NESTED", MADE, flush=True)
def f(x):
    return -1
"""
FLOOD = """
import os
n = 0
try:
    os.mkdir("flood")
    while n < 3000000:
        os.close(os.open("flood/%d" % n, os.O_CREAT | os.O_WRONLY, 0o600))
        n += 1
        if n % 25000 == 0:
            print("FLOOD", n, flush=True)
except BaseException:
    pass
print("MADE", n, flush=True)
def f(x):
    return -1
"""
TESTS3 = "def check(candidate):\n    assert candidate(1) == 42\n"


@pytest.mark.parametrize("mode", ["as-is", "userns-root", "nobody", "no-namespaces", "no-namespaces-no-landlock",
                                  "userns-root-no-namespaces", "userns-wide-no-namespaces"])
def test_deep_trees_and_floods_leave_nothing(mode):
    """In every privilege mode: ``run_many`` returns (the script would exit non-zero on an
    exception), nothing passes, dir_fd-relative nesting is bounded by the guards, and the
    temporary directory the sandbox used is empty afterwards. (Runs without a private root make
    no file unless the caller allows it: allowed here, ``Limits.disk_files``, so that the trees
    are made in every mode.)"""
    top = Path(tempfile.mkdtemp(prefix="mrgrpo-cleanup-"))  # reachable by uid 65534 too
    try:
        _deep_and_flood(mode, top)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _deep_and_flood(mode: str, top: Path) -> None:
    from test_sandbox_modes import run_mode

    top.chmod(0o755)
    tmp = top / "tmp"
    tmp.mkdir()
    tmp.chmod(0o777)
    jobs = top / "jobs.json"
    specs = [{"program": p, "tests": TESTS3, "entry_point": "f", "wall_s": 20.0, "cpu_s": 3, "disk_files": True}
             for p in (DEEP, FLOOD)]
    jobs.write_text(json.dumps(specs))
    jobs.chmod(0o644)
    got = run_mode(mode, str(jobs), tmpdir=str(tmp))
    deep, flood = got["results"]
    for result in (deep, flood):
        assert result["verdict"] != "passed" and result["cases_passed"] == 0, result
    made = [line for line in deep["stdout"].splitlines() if line.startswith("MADE")]
    assert made, deep
    by_fd, by_chdir, fd_files = json.loads(made[0].split(None, 1)[1])
    assert 1 <= by_fd <= 66 and fd_files == 0, made  # the guards stop dir_fd nesting; seccomp dir_fd writes
    assert os.listdir(tmp) == [], os.listdir(tmp)  # nothing left behind
    assert got["signals"] == []


# --- what a killed caller left ------------------------------------------------------------

def _started(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return handle.read().rsplit(b")", 1)[1].split()[19].decode()


def test_the_run_directories_of_a_caller_that_is_gone_are_removed_by_the_next(tmp_path, monkeypatch):
    """Named after their caller (PID namespace, pid, start time): those of a caller that ended
    go; those of live callers (this one, another), of another PID namespace, and of another
    naming stay."""
    from mrgrpo.rewards.sandbox import cleanup

    monkeypatch.setattr(cleanup, "_swept", set())
    namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    ended = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ended_start = _started(ended.pid)
    ended.kill()
    ended.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        prefix = lambda ns, pid, start: f"mrgrpo-sbx-{ns}-{pid}-{start}-"
        names = {
            "ended": prefix(namespace, ended.pid, ended_start) + "a1b2c3d4",
            "reused pid": prefix(namespace, alive.pid, "1") + "e5f6g7h8",  # its pid now another's
            "alive": prefix(namespace, alive.pid, _started(alive.pid)) + "i9j0k1l2",
            "this one": cleanup.owned_prefix() + "m3n4o5p6",
            "other namespace": prefix(int(namespace) + 1, ended.pid, ended_start) + "q7r8s9t0",
            "other naming": "mrgrpo-sbx-u1v2w3x4",
        }
        for name in names.values():
            (tmp_path / name / "tmp" / "work").mkdir(parents=True)
            (tmp_path / name / "tmp" / "work" / "left").write_text("x")
        monkeypatch.setattr(cleanup, "SWEEP_S", 0.0)  # bounded in time: past it, left for a later sweep
        assert cleanup.sweep_stale(str(tmp_path)) == [] and all((tmp_path / name).exists() for name in names.values())
        monkeypatch.setattr(cleanup, "SWEEP_S", 10.0)
        monkeypatch.setattr(cleanup, "_swept", set())
        removed = cleanup.sweep_stale(str(tmp_path))
        gone = {key for key, name in names.items() if not (tmp_path / name).exists()}
        assert gone == {"ended", "reused pid"} and len(removed) == 2, (gone, removed)
        assert cleanup.sweep_stale(str(tmp_path)) == []  # once per process and directory
    finally:
        alive.kill()
        alive.wait()


KILLED_CALLER = """
import sys
sys.path.insert(0, sys.argv[1])
import mrgrpo.rewards.sandbox as sandbox
from mrgrpo.rewards.sandbox import Job, Limits, run
sandbox._refused_layers = frozenset({"namespaces"})  # a directory of the caller's for each run
print("RUNNING", flush=True)
run(Job("import time\\ntime.sleep(60)\\ndef f(x):\\n    return x\\n", "def check(candidate):\\n    assert candidate(1) == 1\\n",
        "humaneval", "f", Limits(wall_s=60, cpu_s=60)))
"""


def test_a_caller_killed_in_a_run_leaves_a_directory_the_next_caller_removes(tmp_path, monkeypatch):
    """SIGKILL, as the OOM killer sends: the caller removes nothing, its sandbox processes end
    with it, and the next caller's first run in that temporary directory removes what it left."""
    import signal
    import time

    import mrgrpo.rewards.sandbox as sandbox
    from mrgrpo.rewards.sandbox import Job, Limits, Verdict, cleanup, run

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    caller = subprocess.Popen([sys.executable, "-c", KILLED_CALLER, str(SRC)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(tmp)})
    try:
        assert caller.stdout.readline().strip() == "RUNNING"
        deadline = time.monotonic() + 30
        while not list(tmp.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # its candidate is in the run
    finally:
        caller.send_signal(signal.SIGKILL)
        caller.wait()
    left = list(tmp.iterdir())
    assert len(left) == 1 and left[0].name.startswith(f"mrgrpo-sbx-{os.stat('/proc/self/ns/pid').st_ino}-{caller.pid}-"), left
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(cleanup, "_swept", set())
    monkeypatch.setattr(sandbox, "_refused_layers", frozenset({"namespaces"}))
    result = run(Job("def f(x):\n    return x\n", "def check(candidate):\n    assert candidate(1) == 1\n", "humaneval",
                     "f", Limits(wall_s=10, cpu_s=5)))
    assert result.verdict is Verdict.PASSED, result
    assert list(tmp.iterdir()) == []  # the killed caller's directory, and this run's own
