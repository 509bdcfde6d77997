"""Every child process a train or eval job starts is ended and reaped when the job ends.

A job starts children through its tasks and rewards: AgentDojo's scoring pool
(:mod:`mrgrpo.rewards.agent`), the sandbox's launcher and program interpreters
(:mod:`mrgrpo.rewards.sandbox`), data-loading workers. Left running, they keep the job's
stdout open, so ``mrgrpo train ... | tail`` would wait for them. :func:`reaped_children` wraps
a job: on every way out of it (normal end, exception, ``KeyboardInterrupt`` from SIGINT, and the
exception the job raises for SIGTERM) it first asks the known pools to shut down, then sends
SIGTERM to every descendant that appeared during the job, waits up to ``grace`` seconds and
SIGKILLs what is left. Children that existed before the job are left alone, and exit statuses
are left to the children's owners to collect.

Children also die with the job when it is killed outright (SIGKILL, the OOM killer): the
AgentDojo scoring workers set ``PR_SET_PDEATHSIG`` (see :mod:`mrgrpo.rewards.agent`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterator

log = logging.getLogger("mrgrpo.train")


def descendants(pid: int | None = None) -> dict[int, float]:
    """``{pid: start time}`` of the descendants of process ``pid`` (default: this one), ``{}`` when it
    does not run. The one process-tree walk of mrgrpo (:func:`reaped_children`, and the memory
    sampler of :mod:`mrgrpo.train.profiling` every half second): on Linux it follows
    ``/proc/<pid>/task/<tid>/children`` down the tree, so its cost grows with the job's tree, not
    with every process of the machine (start times in clock ticks); elsewhere ``psutil`` (seconds).
    Compare start times only with those of the same walk."""
    root = os.getpid() if pid is None else pid
    if os.path.exists(f"/proc/self/task/{os.getpid()}/children"):
        return _proc_descendants(root)
    try:  # pragma: no cover - Linux has /proc
        import psutil
    except ImportError:  # pragma: no cover - psutil ships with accelerate
        return {}
    try:  # pragma: no cover
        children = psutil.Process(root).children(recursive=True)
    except psutil.Error:  # pragma: no cover - it does not run
        return {}
    out = {}
    for child in children:  # pragma: no cover
        with contextlib.suppress(psutil.Error):
            out[child.pid] = child.create_time()
    return out


def _start_time(pid: int) -> float | None:
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks after boot); ``None`` once it has exited."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return float(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _proc_descendants(root: int) -> dict[int, float]:
    found: dict[int, float] = {}
    frontier = [root]
    while frontier:
        current = frontier.pop()
        try:
            threads = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue  # exited meanwhile
        for thread in threads:
            try:
                with open(f"/proc/{current}/task/{thread}/children") as handle:
                    children = [int(c) for c in handle.read().split()]
            except (OSError, ValueError):
                continue
            for child in children:
                start = _start_time(child) if child not in found else None
                if start is not None:
                    found[child] = start
                    frontier.append(child)
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie has exited and closed its files: not alive). The exit
    status is left to the child's owner (``multiprocessing``, ``subprocess``) to collect."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def shutdown_pools() -> None:
    """Ask the pools mrgrpo keeps per process to stop (they restart on next use)."""
    from mrgrpo.rewards import agent

    agent.shutdown_pool()
    from mrgrpo.rewards import sandbox

    shutdown = getattr(sandbox, "shutdown", None)  # the sandbox's launcher, when it offers a shutdown
    if callable(shutdown):
        shutdown()


def reap(since: dict[int, float], grace: float = 3.0) -> list[int]:
    """End every descendant not in ``since`` (pid with the same start time); returns their pids."""
    with contextlib.suppress(Exception):
        shutdown_pools()
    new = [pid for pid, start in descendants().items() if since.get(pid) != start]
    for pid in new:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    alive = list(new)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _alive(pid)]
        if alive:
            time.sleep(0.05)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    # SIGKILL is delivered asynchronously: wait (briefly) until the killed ones have exited and
    # closed their files, so nothing of the job still holds its stdout when this returns.
    killed, deadline = list(alive), time.monotonic() + 5.0
    while killed and time.monotonic() < deadline:
        killed = [pid for pid in killed if _alive(pid)]
        if killed:
            time.sleep(0.01)
    if new:
        log.debug("reaped %d child processes (%d killed)", len(new), len(alive))
    return new


@contextlib.contextmanager
def reaped_children(grace: float = 3.0) -> Iterator[None]:
    """Run a job; on any exit, end and reap the children it started (see the module docstring)."""
    before = descendants()
    try:
        yield
    finally:
        reap(before, grace)
