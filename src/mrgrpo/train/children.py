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


def _descendants() -> dict[int, float]:
    """``{pid: start time}`` of this process's descendants (``psutil`` when present, else ``/proc``)."""
    try:
        import psutil

        out = {}
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                out[child.pid] = child.create_time()
        return out
    except ImportError:  # pragma: no cover - psutil ships with accelerate
        return _proc_descendants()


def _proc_descendants() -> dict[int, float]:
    parents: dict[int, int] = {}
    starts: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        starts[int(entry)] = float(fields[19])
    found, frontier = {}, [os.getpid()]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in found:
                found[child] = starts[child]
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
    new = [pid for pid, start in _descendants().items() if since.get(pid) != start]
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
    before = _descendants()
    try:
        yield
    finally:
        reap(before, grace)
