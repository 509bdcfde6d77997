"""Starting, feeding, collecting and ending the two processes of each run (runs in the caller).

The launcher (:mod:`.launcher`) is started on first use and forks a candidate per run and
judge servers reused from run to run; without it (``launcher=False``, or after it died three
times) both are new interpreters. Every channel the caller holds that carries trusted data
(the judge's job, the judge's report) is a Unix socket pair: a socket cannot be reopened
through ``/proc/<pid>/fd``, so a same-uid process cannot write a verdict into the caller or read
another run's tests out of it, although the caller's own process stays dumpable.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import random
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from functools import lru_cache

from mrgrpo.errors import IsolationError
from mrgrpo.rewards.sandbox import memcg
from mrgrpo.rewards.sandbox.child import bootstrap_code
from mrgrpo.rewards.sandbox.launcher import STUB_PREFIX, Zygote, ZygoteDied
from mrgrpo.rewards.sandbox.results import Limits, Result, parse_report

# When the judge reports that the candidate ended early, the caller waits this long for its
# exit status (the launcher that reaps it, or its PID namespace's relay, passes on how it ended:
# a segfault stays a segfault) before killing it; otherwise it is killed at once.
_EXIT_GRACE_S = 0.2
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


@lru_cache(maxsize=1)
def _interpreter() -> tuple[str, str]:
    """(real interpreter path, standard library directory) for the child."""
    import sysconfig

    return os.path.realpath(sys.executable), os.path.realpath(sysconfig.get_paths()["stdlib"])


# --- launching the two processes ----------------------------------------------------------

_zygote_lock = threading.Lock()
_zygote_instance: Zygote | None = None
_zygote_deaths = 0
_MAX_ZYGOTE_DEATHS = 3  # then every run starts fresh interpreters instead


def _zygote() -> Zygote | None:
    """The process's launcher, started on first use (again after a fork of the caller)."""
    global _zygote_instance, _zygote_deaths
    with _zygote_lock:
        z = _zygote_instance
        if z is not None and z.alive and z.owner == os.getpid():
            return z
        if _zygote_deaths >= _MAX_ZYGOTE_DEATHS:
            return None
        try:
            _zygote_instance = Zygote(_interpreter()[0], _ENV, bootstrap_code(), _interpreter()[1])
        except OSError:
            _zygote_deaths = _MAX_ZYGOTE_DEATHS
            return None
        return _zygote_instance


def _drop_zygote(z: Zygote) -> None:
    global _zygote_instance, _zygote_deaths
    with _zygote_lock:
        if _zygote_instance is z:
            _zygote_instance = None
            _zygote_deaths += 1
    z.close()


def _forget_zygote_in_child() -> None:
    """After a fork of the caller: drop the child's copies of the launcher's sockets, so the
    launcher still sees its owner's end close when the owner exits (the child starts its own)."""
    global _zygote_instance
    z, _zygote_instance = _zygote_instance, None
    if z is not None:
        for _, sock in z.idle_judges:
            sock.close()
        z.forget()


os.register_at_fork(after_in_child=_forget_zygote_in_child)


@atexit.register
def _close_zygote() -> None:
    """At interpreter exit: end the launcher, and with it every sandbox process, and reap it."""
    global _zygote_instance
    with _zygote_lock:
        z, _zygote_instance = _zygote_instance, None
    if z is not None and z.owner == os.getpid():
        z.close()


class _DirectPair:
    """Judge and candidate started as new interpreters (``python -I -S -c <stub> <fds>``)."""

    def start(self, judge_fds, candidate_fds) -> tuple[int, int]:
        exe = _interpreter()[0]
        self.procs = {}
        j_in, j_report, j_to, j_from = judge_fds
        c_in, c_out, c_err, c_from, c_to = candidate_fds
        for role, stdin, stdout, stderr, extra in (
            ("candidate", c_in, c_out, c_err, (c_from, c_to)),
            ("judge", j_in, subprocess.DEVNULL, subprocess.DEVNULL, (j_report, j_to, j_from)),
        ):
            stub = STUB_PREFIX + f"g['_boot'](_read, {role!r})\n"
            proc = subprocess.Popen(
                [exe, "-I", "-S", "-c", stub, *map(str, extra)],
                stdin=stdin, stdout=stdout, stderr=stderr, env=_ENV, cwd="/",
                start_new_session=True, pass_fds=extra,
            )
            self.procs[proc.pid] = proc
        judge_pid, candidate_pid = list(self.procs)[1], list(self.procs)[0]
        return judge_pid, candidate_pid

    def wait(self, pid: int, timeout: float | None) -> int | None:
        try:
            return self.procs[pid].wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def end(self, pids: tuple[int, int], judge_done: bool, status_wanted: bool = False,
            reap: bool = True) -> int | None:
        judge_pid, candidate_pid = pids
        returncode = self.wait(candidate_pid, _EXIT_GRACE_S) if status_wanted else None
        _kill(candidate_pid)
        if not judge_done:
            _kill(judge_pid)
        if returncode is None:
            returncode = self.wait(candidate_pid, 5.0)
        if self.wait(judge_pid, 1.0) is None:
            _kill(judge_pid)
            self.wait(judge_pid, 5.0)
        return returncode


class _ZygotePair:
    """A judge server (reused from run to run) and a candidate forked by the launcher."""

    def __init__(self, zygote: Zygote, userns: bool, required: bool = False, key: bytes = b""):
        self.zygote = zygote
        self.userns = userns  # the candidate may be forked by the candidate launcher
        self.required = required  # ... and only there
        self.key = key  # its limits, for the candidate launcher's spare (confinement_key)
        self.judge: tuple[int, socket.socket] | None = None

    def _judge(self) -> tuple[int, socket.socket]:
        with _zygote_lock:
            if self.zygote.idle_judges:
                return self.zygote.idle_judges.pop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = self.zygote.spawn(b"K", [theirs.fileno()])
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return pid, ours

    def start(self, judge_fds, candidate_fds) -> tuple[int, int]:
        for attempt in range(3):
            pid, sock = self._judge()
            try:
                socket.send_fds(sock, [b"J"], list(judge_fds))
                break
            except OSError:  # that judge server is gone: take another
                sock.close()
                _kill(pid)
                if attempt == 2:
                    raise ZygoteDied("sandbox judge servers keep failing") from None
        self.judge = (pid, sock)
        try:
            candidate = self.zygote.spawn(b"C" + self.key, candidate_fds, userns=self.userns, required=self.required)
        except BaseException:
            self.end_judge(ok=False)
            raise
        return pid, candidate

    def end_judge(self, ok: bool) -> None:
        """The run is over: keep its judge for the next run (``ok``) or kill and reap it."""
        pid, sock = self.judge  # type: ignore[misc]
        if ok and not self.zygote.exited(pid):
            with _zygote_lock:
                if self.zygote.alive:
                    self.zygote.idle_judges.append((pid, sock))
                    return
        sock.close()
        _kill(pid)
        self.zygote.wait(pid, 5.0)

    def end(self, pids: tuple[int, int], judge_done: bool, status_wanted: bool = False,
            reap: bool = True) -> int | None:
        judge_pid, candidate_pid = pids
        returncode = self.zygote.wait(candidate_pid, _EXIT_GRACE_S) if status_wanted else None
        _kill(candidate_pid)
        if returncode is None and not reap:
            # Killed, its exit not waited for: the launcher reaps it while the next run starts
            # (the teardown of its namespaces takes a millisecond or more); see :func:`settle`.
            self.zygote.discard(candidate_pid)
        elif returncode is None:
            returncode = self.zygote.wait(candidate_pid, 5.0)
        self.end_judge(judge_done)
        return returncode

    def wait(self, pid: int, timeout: float | None) -> int | None:
        return self.zygote.wait(pid, timeout)


_live_lock = threading.Lock()
_live: set[int] = set()  # pids of the judge and candidate processes of runs in progress


def _live_pids() -> set[int]:
    """Sandbox processes started and not yet reaped: runs in progress, idle judge servers and
    the launcher."""
    with _live_lock:
        pids = set(_live)
    z = _zygote_instance
    if z is not None and z.alive:
        pids.add(z.pid)
        pids.update(pid for pid, _ in list(z.idle_judges))
        if z.candidate_launcher_pid is not None:
            pids.add(z.candidate_launcher_pid)
    return pids


def _kill(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _kill_all_live() -> None:
    with _live_lock:
        pids = list(_live)
    for pid in pids:
        _kill(pid)


def settle(timeout: float = 5.0) -> None:
    """Wait (up to ``timeout``) until every candidate killed without waiting for its exit has been
    reaped: :func:`execute` with ``reap=False`` leaves them to the launcher."""
    started = time.monotonic()
    z = _zygote_instance
    if z is not None and z.alive:
        z.settle(timeout)
    memcg.remove_leftovers(max(0.0, timeout - (time.monotonic() - started)))


def _private_root(reports: list[str]) -> bool:
    """The judge's ``iso`` line (the layers the candidate reported before any untrusted code ran)
    names a private root: then nothing the candidate wrote outlives its mount namespace."""
    return bool(reports) and reports[0].startswith("iso ") and "chroot" in reports[0][4:].split(",")


def _run_pair(pair, stdins: tuple[bytes, bytes], n_cases: int, limits: Limits, reap: bool = True) -> Result:
    # judge: stdin, report (sockets: see the module's docstring); candidate: stdin, stdout,
    # stderr; judge->candidate, candidate->judge (pipes only the two processes hold)
    j_in, report = (tuple(reversed([s.detach() for s in socket.socketpair()])) for _ in range(2))
    c_in, c_out, c_err, j2c, c2j = (os.pipe() for _ in range(5))
    judge_fds = (j_in[0], report[1], j2c[1], c2j[0])
    candidate_fds = (c_in[0], c_out[1], c_err[1], j2c[0], c2j[1])
    ours = (j_in[1], report[0], c_in[1], c_out[0], c_err[0])
    # A cgroup of its own (given one to make it in): the candidate is moved into it before it
    # has its job, so its stdin waits until then; memcg.delegated checked the directory.
    group = None
    if limits.cgroup:
        try:
            group = memcg.RunCgroup(memcg.delegated(limits.cgroup),
                                    memcg.limit_bytes(limits.memory_mb, limits.tmpfs_mb, limits.tmpfs_inodes))
        except BaseException as error:
            for fd in ours + judge_fds + candidate_fds:
                os.close(fd)
            if not isinstance(error, OSError):
                raise
            raise IsolationError(f"the sandbox could not make a candidate's cgroup in {limits.cgroup!r} "
                                 f"({error.strerror}); check that it is still delegated to this user") from None
    # Fill both stdin pipes before the processes exist (a pipe holds 64 KiB), so that each
    # starts working at once; _collect writes whatever did not fit.
    stdins = (_prefill(j_in[1], stdins[0]), stdins[1] if group is not None else _prefill(c_in[1], stdins[1]))
    started = time.monotonic()
    pids: tuple[int, int] | None = None
    try:
        try:
            with _live_lock:  # register before the pids exist: a cancel kills them
                pids = pair.start(judge_fds, candidate_fds)
                _live.update(pids)
        finally:
            for fd in judge_fds + candidate_fds:
                os.close(fd)
    except BaseException:
        for fd in ours:
            os.close(fd)
        if group is not None:
            group.remove()
        raise
    cpu = _placement.pin(pids)
    stdins = (stdins[0] + b"%010d" % pids[1], stdins[1])  # the judge's CPU clock reads the candidate's pid
    owned = set(ours)  # _collect closes the stdins early and removes them: never close twice
    got = None
    try:
        if group is not None:
            try:
                group.enter(pids[1])
            except ProcessLookupError:
                pass  # gone already: it ran nothing (it had no job), the judge reports it gone
            except OSError as error:
                raise IsolationError(f"the sandbox could not move a candidate into its cgroup {group.path!r} "
                                     f"({error.strerror}); check that it is still delegated to this user") from None
        got = _collect(pids, ours, owned, stdins, limits, started)
    finally:
        for fd in owned:
            os.close(fd)
        # the judge has spoken (or failed): the candidate's part is over
        # how the candidate ended matters when the judge says it ended early (a crash, a limit)
        status_wanted = bool(got and got[4] and got[0] and got[0][-1].startswith(("error", "case")))
        status_wanted = status_wanted or bool(got and got[4] and any(line.endswith("CandidateGone") for line in got[0]))
        # The judge is done and the candidate had a private root: its exit status says nothing the
        # report does not, so it is killed and not waited for.
        returncode, oom = None, False
        try:
            returncode = pair.end(pids, judge_done=got is not None and got[4], status_wanted=status_wanted,
                                  reap=reap or not (got and got[4] and _private_root(got[0])))
        finally:
            with _live_lock:
                _live.difference_update(pids)
            _placement.release(cpu)
            if group is not None:  # removed (or left for memcg.remove_leftovers) on every path
                oom = group.oom_kills() > 0
                group.remove(wait_s=0.05 if returncode is not None else 0.0)
    reports, stdout, stderr, killed_for, _ = got
    if oom and killed_for is None:
        killed_for = "memory"
    result = parse_report(reports, n_cases, returncode, killed_for, time.monotonic() - started, stdout, stderr)
    if group is not None:
        result = dataclasses.replace(result, isolation=",".join(filter(None, (result.isolation, memcg.LAYER))))
    return result


#: Set this environment variable to ``0`` to leave the placement of the sandbox's processes to
#: the kernel (see :class:`_Placement`); read at every run.
PLACEMENT_ENV = "MRGRPO_SANDBOX_CPU_PLACEMENT"


class _Placement:
    """Which CPU each run's judge and candidate share.

    The two take turns (the judge sends a request and waits for the reply), so on one CPU each
    hand-over is a direct switch from the writer to the reader; on two, it wakes the other CPU,
    which costs about ten times as much (70 against 7 microseconds a round trip on this
    project's 2-core VM). A run goes to the CPU, among those the calling thread may use, with the
    fewest of this process's runs on it; ties go round from a place drawn once per process, so
    that several processes using the sandbox (one per GPU, say) do not all start on the first
    CPUs. The two pids are moved there with ``sched_setaffinity`` (the caller's own threads never
    are); best effort: a process that may not be moved (or is gone) stays where it is. Set
    :data:`PLACEMENT_ENV` to ``0`` to leave them to the kernel's balancing instead (each run then
    pays the cross-CPU hand-overs)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._load: dict[int, int] = {}
        self._start = random.randrange(1 << 16)

    def pin(self, pids: tuple[int, int]) -> int | None:
        if os.environ.get(PLACEMENT_ENV, "1").strip() == "0":
            return None
        with self._lock:
            try:
                allowed = sorted(os.sched_getaffinity(0))
            except OSError:
                return None
            if len(allowed) < 2:
                return None
            turn = self._start % len(allowed)
            order = allowed[turn:] + allowed[:turn]
            cpu = min(order, key=lambda c: self._load.get(c, 0))
            self._load[cpu] = self._load.get(cpu, 0) + 1
        for pid in pids:
            try:
                os.sched_setaffinity(pid, (cpu,))
            except OSError:
                pass
        return cpu

    def release(self, cpu: int | None) -> None:
        if cpu is None:
            return
        with self._lock:
            self._load[cpu] -= 1


_placement = _Placement()


class NeedsWorkdir(Exception):
    """A job made without a working directory cannot go to the candidate launcher after all."""


def candidate_launcher_ready(stdlib: str) -> bool:
    """The launcher's candidate launcher is serving, with ``stdlib`` in its prepared root."""
    z = _zygote_instance
    return (z is not None and z.alive and z.owner == os.getpid() and z.stdlib == stdlib
            and z.candidate_launcher_pid is not None)


def confinement_key(candidate_job: dict) -> bytes:
    """What a candidate's confinement depends on, besides its uid (the limits and the refused
    layers), as the candidate launcher reads it: it confines its next spare candidate for the
    key of the last run, and hands a spare only to a run with the same key."""
    numbers = (candidate_job[name] for name in ("tmpfs_kb", "tmpfs_inodes", "cpu_s", "fsize", "nofile", "address_space",
                                                "disk_files"))
    return (",".join(str(int(n)) for n in numbers) + ";" + ",".join(candidate_job["refuse"])).encode("ascii")


def execute(stdins: tuple[bytes, bytes], n_cases: int, limits: Limits, launcher: bool,
            shared_userns: bool = True, reap: bool = True, stdlib: str | None = None,
            has_workdir: bool = True, key: bytes = b"") -> Result:
    """One run: the judge's and the candidate's framed jobs -> the judged :class:`Result`.
    ``shared_userns``: the candidate may be forked by the candidate launcher, in its namespaces
    and under its prepared root (False when its job refuses namespaces, chroot or seccomp, which
    that launcher's candidates cannot do without); ``stdlib``: the job's standard library, which
    must be the one in that root. ``has_workdir`` False: the job names no working directory, so it
    runs only there (:class:`NeedsWorkdir` otherwise).
    ``reap``: wait for the candidate's exit; otherwise (a batch: :func:`settle` at its end), a
    candidate with a private root whose judge finished is killed and left to the launcher to reap.
    ``key``: :func:`confinement_key` of the candidate's job."""
    zygote = _zygote() if launcher else None
    if zygote is not None:
        shared = shared_userns and stdlib == zygote.stdlib
        if not has_workdir and not (shared and zygote.candidate_launcher_pid is not None):
            raise NeedsWorkdir
        try:
            return _run_pair(_ZygotePair(zygote, shared, required=not has_workdir, key=key), stdins, n_cases, limits,
                             reap)
        except ZygoteDied:
            _drop_zygote(zygote)
    if not has_workdir:
        raise NeedsWorkdir
    boot = bootstrap_code()
    return _run_pair(_DirectPair(), tuple(b"%010d" % len(boot) + boot + s for s in stdins), n_cases, limits)


def _prefill(fd: int, data: bytes) -> bytes:
    """Write what fits into ``fd`` (a pipe or socket) without blocking; the rest."""
    os.set_blocking(fd, False)
    try:
        return data[os.write(fd, data) :]
    except BlockingIOError:
        return data


def _collect(pids, fds, owned, stdins, limits, started):
    """Feed both stdins, gather output and the judge's report until the judge is done (then what
    the candidate's pipes already hold) or the deadline; kills on timeout/output."""
    judge_pid, candidate_pid = pids
    j_in, report_fd, c_in, out_fd, err_fd = fds
    deadline = started + limits.wall_s
    # poll, not epoll: nothing to create, register or close in the kernel for each run
    poller = select.poll()
    buffers = {out_fd: bytearray(), err_fd: bytearray(), report_fd: bytearray()}
    for fd in buffers:
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
    pending = {}
    for fd, data in ((j_in, stdins[0]), (c_in, stdins[1])):
        if data:
            pending[fd] = memoryview(data)
            poller.register(fd, select.POLLOUT)
        else:
            owned.discard(fd)
            os.close(fd)
    open_reads = set(buffers)
    total = 0
    killed_for = None
    while open_reads:
        now = time.monotonic()
        if now >= deadline:
            killed_for = "timeout"
            break
        for fd, _ in poller.poll((deadline - now) * 1000):
            if fd in pending:
                try:
                    pending[fd] = pending[fd][os.write(fd, pending[fd][: 1 << 16]) :]
                except BlockingIOError:
                    continue
                except BrokenPipeError:
                    pending[fd] = pending[fd][:0]
                if not pending[fd]:
                    del pending[fd]
                    poller.unregister(fd)
                    owned.discard(fd)
                    os.close(fd)
                continue
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                poller.unregister(fd)
                open_reads.discard(fd)
                if fd == report_fd:
                    # The judge is done. The candidate wrote its output before each reply
                    # (it flushes first), so what it printed is in its pipes now: take that
                    # and stop, without waiting for the candidate to exit.
                    total, killed_for = _drain(open_reads - {report_fd}, buffers, total, limits)
                    open_reads.clear()
                    break
                continue
            keep = buffers[fd]
            if fd == report_fd:
                if len(keep) < (1 << 20):
                    keep += chunk
                continue
            total += len(chunk)
            if len(keep) < limits.output_bytes:
                keep += chunk[: limits.output_bytes - len(keep)]
            if total > limits.kill_output_bytes:
                killed_for = "output"
                break
        if killed_for:
            break
    if killed_for:
        _kill(judge_pid)
    reports = bytes(buffers[report_fd]).decode("ascii", "replace").splitlines()
    judge_done = not killed_for and report_fd not in open_reads and bool(reports) and reports[-1].split()[0] in _LAST
    return (
        reports,
        bytes(buffers[out_fd]).decode("utf-8", "replace"),
        bytes(buffers[err_fd]).decode("utf-8", "replace"),
        killed_for,
        judge_done,
    )


def _drain(fds, buffers, total, limits):
    """Read what is already in the output pipes ``fds`` (non-blocking); ``(total, killed_for)``."""
    for fd in fds:
        keep = buffers[fd]
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except (BlockingIOError, InterruptedError):
                break
            if not chunk:
                break
            total += len(chunk)
            if len(keep) < limits.output_bytes:
                keep += chunk[: limits.output_bytes - len(keep)]
            if total > limits.kill_output_bytes:
                return total, "output"
    return total, None


_LAST = ("done", "error", "invalid")  # the judge's last line of a run it finished


