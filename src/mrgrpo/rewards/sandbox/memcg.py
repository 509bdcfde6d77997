"""A memory cgroup of its own for each candidate, in a cgroup delegated to the sandbox (runs in the caller).

The rlimits bound a candidate's memory piece by piece (its address space, its files, its
inodes); a memory cgroup bounds all of it in one figure, the kernel's own allocations for it
(page tables, inodes and dentries, pipe buffers, socket buffers) included. A process may make
cgroups only where it is given one: a cgroup v2 directory delegated to it (``systemd-run
-p Delegate=yes``, a container runtime's delegation, a directory ``chown``-ed to its user)
with ``memory`` in its ``cgroup.subtree_control``, or, on a machine whose memory controller is
cgroup v1's, a directory of that hierarchy it may write. The sandbox is given one by
:attr:`~.results.Limits.cgroup` (default: the environment variable :data:`CGROUP_ENV`);
without one it makes none, and says so (the layer ``memcg`` is not reported).

Per run the caller makes ``<delegated>/mrgrpo-<pid>-<n>``, writes its limit
(:func:`limit_bytes`: ``memory.max``, swap 0; v1: ``memory.limit_in_bytes`` and, where swap is
accounted, ``memory.memsw.limit_in_bytes``), moves the candidate into it by pid before the
candidate has read its job (so no line of the program runs outside it), and after the run
reads its OOM-kill count (``memory.events`` / ``memory.oom_control``: a candidate the
kernel killed at the limit gets the verdict ``memory``) and removes it. A cgroup whose
candidate has not exited yet (a batch leaves killed candidates to the launcher to reap) is
removed later: at the next run, at :func:`settle` and at exit; those of a caller that was
killed (SIGKILL) are removed by the next caller that checks the directory.

The delegated directory is checked once per path, at the first run (:func:`delegated`): a
cgroup, the memory controller available to its children, and a probe child into which a
process of the caller's is moved. Anything missing is a :class:`~mrgrpo.errors.ConfigError`
naming the fix; a run never goes on without a cgroup it was given.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from mrgrpo.errors import ConfigError

#: The environment variable naming a delegated cgroup directory, read when a
#: :class:`~.results.Limits` is made without ``cgroup``.
CGROUP_ENV = "MRGRPO_SANDBOX_CGROUP"

#: The layer reported in :attr:`~.results.Result.isolation` where a run's candidate had a cgroup of its own.
LAYER = "memcg"

#: Room for what the rlimits do not count per candidate: its kernel stack, page tables and
#: the interpreter pages it copies on write (measured here, the cgroup's peak usage: 0.5 MiB
#: for a candidate of the launcher that imports nothing, 1.6 MiB importing json, decimal,
#: fractions and statistics, 7.3 MiB for a new interpreter with ``launcher=False``); the bound
#: is not meant to bite a program within its rlimits.
HEADROOM_MB = 32


@dataclass(frozen=True)
class Delegated:
    """A checked delegated cgroup directory: ``version`` 2 or 1 (the memory controller's)."""

    path: str
    version: int

    @property
    def limit_files(self) -> tuple[str, ...]:
        return ("memory.max", "memory.swap.max") if self.version == 2 else (
            "memory.limit_in_bytes", "memory.memsw.limit_in_bytes")

    @property
    def events_file(self) -> str:
        return "memory.events" if self.version == 2 else "memory.oom_control"


def limit_bytes(memory_mb: int, tmpfs_mb: int, tmpfs_inodes: int) -> int:
    """A candidate's cgroup limit: what its rlimits let it hold (``memory_mb`` of address
    space, ``tmpfs_mb`` of files, about 1 KiB of kernel memory per inode) plus
    :data:`HEADROOM_MB`, in bytes."""
    return ((memory_mb + tmpfs_mb + HEADROOM_MB) << 20) + (tmpfs_inodes << 10)


_checked: dict[str, Delegated] = {}
_lock = threading.Lock()
_made = [0]
_leftover: list[str] = []  # cgroups whose candidate had not exited when its run ended


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def delegated(path: str) -> Delegated:
    """``path`` checked as a cgroup the sandbox may make candidates' cgroups in (once per path);
    :class:`~mrgrpo.errors.ConfigError` naming the fix otherwise."""
    with _lock:
        if path in _checked:
            return _checked[path]
    where = f"the sandbox's cgroup {path!r} ({CGROUP_ENV} or Limits.cgroup)"
    if not os.path.isabs(path) or not os.path.isdir(path):
        raise ConfigError(f"{where} is not a directory: give the absolute path of a cgroup delegated to this process")
    if os.path.exists(os.path.join(path, "cgroup.controllers")):
        try:
            enabled = _read(os.path.join(path, "cgroup.subtree_control")).split()
            available = _read(os.path.join(path, "cgroup.controllers")).split()
        except OSError as error:
            raise ConfigError(f"{where} cannot be read ({error.strerror}): delegate it to this user") from None
        if "memory" not in enabled:
            fix = (f"enable it for its children: echo +memory > {path}/cgroup.subtree_control" if "memory" in available
                   else "its parent does not pass the memory controller down: delegate one that has it")
            raise ConfigError(f"{where} gives its children no memory controller; {fix}")
        found = Delegated(path, 2)
    elif os.path.exists(os.path.join(path, "memory.limit_in_bytes")):
        found = Delegated(path, 1)
    else:
        raise ConfigError(f"{where} is not a cgroup v2 directory nor one of cgroup v1's memory hierarchy: "
                          "give a delegated cgroup directory")
    _remove_stale(path)
    try:
        _probe(found)
    except OSError as error:
        raise ConfigError(f"{where} cannot hold a candidate ({error.strerror}: {error.filename or path}); "
                          "delegate it to this user (its cgroup.procs, and that of the cgroup this process is in, "
                          "writable)") from None
    with _lock:
        _checked[path] = found
    return found


def _remove_stale(path: str) -> None:
    """Remove the run cgroups (``mrgrpo-<pid>-<n>``) that a caller no longer alive left in
    ``path`` (one killed by SIGKILL removes none of its own); those of live processes stay."""
    try:
        names = os.listdir(path)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != "mrgrpo" or not (parts[1].isdigit() and parts[2].isdigit()):
            continue
        pid = int(parts[1])
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue  # alive: its own
        except ProcessLookupError:
            pass
        except OSError:
            continue  # alive, another user's
        try:
            os.rmdir(os.path.join(path, name))
        except OSError:
            pass  # still holds a process (its candidate, ending): left for a later caller


def _probe(where: Delegated) -> None:
    """Make a child cgroup with a limit, move a process of ours (a sleeping interpreter) into
    it, end the process, remove the cgroup."""
    cgroup = RunCgroup(where, 64 << 20)
    try:
        sleeper = subprocess.Popen([sys.executable, "-I", "-S", "-c", "import time; time.sleep(30)"],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            cgroup.enter(sleeper.pid)
        finally:
            sleeper.kill()
            sleeper.wait()
    finally:
        if not cgroup.remove(wait_s=1.0):
            raise OSError(16, "the probe cgroup could not be removed", cgroup.path)


class RunCgroup:
    """One candidate's cgroup in ``where``, limited to ``limit`` bytes (made on construction)."""

    def __init__(self, where: Delegated, limit: int):
        remove_leftovers()
        with _lock:
            _made[0] += 1
            name = f"mrgrpo-{os.getpid()}-{_made[0]}"
        self.where = where
        self.path = os.path.join(where.path, name)
        os.mkdir(self.path, 0o755)
        try:
            memory, swap = where.limit_files
            _write(os.path.join(self.path, memory), str(limit))
            swap_path = os.path.join(self.path, swap)
            if os.path.exists(swap_path):  # v2: swap off; v1: memory and swap together at the same figure
                _write(swap_path, "0" if where.version == 2 else str(limit))
        except BaseException:
            os.rmdir(self.path)
            raise

    def enter(self, pid: int) -> None:
        """Move process ``pid`` (as this process sees it) into this cgroup."""
        _write(os.path.join(self.path, "cgroup.procs"), str(pid))

    def oom_kills(self) -> int:
        """How many processes the kernel killed here at the limit."""
        try:
            text = _read(os.path.join(self.path, self.where.events_file))
        except OSError:
            return 0
        for line in text.splitlines():
            words = line.split()
            if len(words) == 2 and words[0] == "oom_kill":
                return int(words[1])
        return 0

    def remove(self, wait_s: float = 0.0) -> bool:
        """Remove the cgroup; if its candidate has not exited within ``wait_s``, leave it for
        :func:`remove_leftovers`. True if it is gone."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.002)
        with _lock:
            _leftover.append(self.path)
        return False


def remove_leftovers(wait_s: float = 0.0) -> list[str]:
    """Remove the cgroups left by runs whose candidate had not exited (up to ``wait_s``);
    the paths still there."""
    deadline = time.monotonic() + wait_s
    while True:
        with _lock:
            paths = list(_leftover)
            _leftover.clear()
        still = []
        for path in paths:
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                still.append(path)
        with _lock:
            _leftover.extend(still)
        if not still or time.monotonic() >= deadline:
            return still
        time.sleep(0.01)


atexit.register(remove_leftovers, 2.0)
