"""Client of the sandbox launcher ("zygote"); runs in the caller.

Starting a Python interpreter and importing ``typing`` & co. costs more than most test suites
take to run. The launcher is one fresh ``python -I -S`` interpreter (started with the same
scrubbed environment as a direct run, never a fork of the caller) that preloads common
standard-library modules and then forks, from that pristine, secret-free state, one
*candidate* process per run and *judge servers* that judge one run at a time (a judge never
runs untrusted code, so it stays pristine; see ``child/judge.py``).

Protocol on a Unix socket pair: the caller sends ``C`` with a candidate's five pipe ends, or
``K`` with one end of a judge server's control socket, as SCM_RIGHTS; the launcher replies
``P <pid>`` and, when that process exits, ``X <pid> <wait status>``. The caller is root or the
same user as the processes' starting uid, so it kills them directly. When the caller's end of
the socket closes (normal exit, exception, SIGTERM, SIGKILL), the launcher kills every process
it started and exits; :meth:`Zygote.close` does the same on purpose and reaps the launcher.

A second socket goes to the launcher's *candidate launcher* (``child/boot.py``:
``_candidate_launcher``), which forks candidates already inside namespaces and a root made once
(without real root also a user namespace, each candidate in a PID namespace of its own): the
same ``C``/``P``/``X`` protocol (pids as the caller sees them), after a first ``R <pid>`` once it
is ready. If that socket closes before ``R`` (what it needs is refused) every candidate goes to
the launcher itself, which makes them all in each candidate; if it closes after ``R``, the
launcher counts as gone (:class:`ZygoteDied`). A job that refuses namespaces, the private root
or seccomp (tests, the layer costs) always goes to the launcher itself.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Sequence

#: The start of every sandbox interpreter's ``-c`` program: read the marshalled bootstrap from
#: stdin (10-digit length, then ``(name, code)`` pairs, see :mod:`.child`) and execute each as the
#: module ``_mrgrpo_sandbox.<name>`` (their builtins: a copy of the interpreter's, taken before anything
#: untrusted runs, so that a program's changes to ``builtins`` never reach the sandbox's own code);
#: ``g`` is the namespace of ``boot``. Callers append the line
#: that hands control to the bootstrap.
STUB_PREFIX = (
    "import posix,marshal,sys\n"
    "def _read(n):\n"
    " b=b''\n"
    " while len(b)<n:\n"
    "  c=posix.read(0,n-len(b))\n"
    "  if not c: posix._exit(70)\n"
    "  b+=c\n"
    " return b\n"
    "M=type(sys);P='_mrgrpo_sandbox';p=M(P);p.__path__=[];sys.modules[P]=p;B=dict(vars(sys.modules['builtins']))\n"
    "for _n,_c in marshal.loads(_read(int(_read(10)))):\n"
    " m=M(P+'.'+_n);m.__package__=P;m.__builtins__=B;sys.modules[m.__name__]=m;setattr(p,_n,m);exec(_c,m.__dict__)\n"
    "g=sys.modules[P+'.boot'].__dict__\n"
)
_STUB = STUB_PREFIX + (
    "posix.close(0); posix.open('/dev/null', posix.O_RDONLY)\n"
    "g['_zygote'](int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])\n"
)


class ZygoteDied(RuntimeError):
    pass


class _Channel:
    """One control socket and what its launcher has said on it."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.spawned: list[int] = []
        self.alive = True
        self.ready: int | None = None  # the user-namespace launcher's pid, once it said R


class Zygote:
    """One launcher process and the bookkeeping of its children (thread-safe)."""

    def __init__(self, executable: str, env: dict, boot_code: bytes, stdlib: str):
        self.owner = os.getpid()
        self.stdlib = stdlib  # the candidate launcher's prepared root holds this standard library
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        userns_ours, userns_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = subprocess.Popen(
                [executable, "-I", "-S", "-c", _STUB, str(theirs.fileno()), str(userns_theirs.fileno()), stdlib],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                cwd="/",
                start_new_session=True,
                pass_fds=(theirs.fileno(), userns_theirs.fileno()),
            )
        except BaseException:
            for sock in (ours, userns_ours):
                sock.close()
            raise
        finally:
            theirs.close()
            userns_theirs.close()
        self._proc.stdin.write(b"%010d" % len(boot_code) + boot_code)
        self._proc.stdin.close()
        self._main = _Channel(ours)
        self._userns = _Channel(userns_ours)
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self.idle_judges: list[tuple[int, socket.socket]] = []  # judge servers between runs
        self._exits: dict[int, int] = {}
        self._discarded: set[int] = set()  # killed, their exit not waited for (:meth:`discard`)
        self._owners: dict[int, _Channel] = {}  # candidates of the user-namespace launcher
        for channel, name in ((self._main, "mrgrpo-zygote-reader"), (self._userns, "mrgrpo-zygote-userns-reader")):
            threading.Thread(target=self._reader, args=(channel,), name=name, daemon=True).start()

    def _reader(self, channel: _Channel) -> None:
        buffer = b""
        try:
            while True:
                chunk = channel.sock.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                with self._cond:
                    for line in lines:
                        words = line.split()
                        if len(words) == 2 and words[0] == b"P" and int(words[1]) > 1:
                            channel.spawned.append(int(words[1]))
                        elif len(words) == 3 and words[0] == b"X":
                            if int(words[1]) in self._discarded:
                                self._discarded.discard(int(words[1]))
                                self._owners.pop(int(words[1]), None)
                            else:
                                self._exits[int(words[1])] = int(words[2])
                        elif len(words) == 2 and words[0] == b"R" and channel is self._userns and int(words[1]) > 1:
                            channel.ready = int(words[1])
                    self._cond.notify_all()
        except (OSError, ValueError):
            pass
        with self._cond:
            channel.alive = False
            # discarded candidates of this launcher will not be reported: nothing to wait for
            self._discarded = {pid for pid in self._discarded if self._owners.get(pid, self._main) is not channel}
            self._cond.notify_all()

    @property
    def alive(self) -> bool:
        return self._main.alive

    @alive.setter
    def alive(self, value: bool) -> None:
        self._main.alive = value

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def candidate_launcher_pid(self) -> int | None:
        """The candidate launcher's pid while it serves, else None."""
        channel = self._userns
        return channel.ready if channel.alive else None

    def _candidate_channel(self, timeout: float) -> _Channel:
        """Where a candidate that may go to the candidate launcher is forked."""
        channel = self._userns
        with self._cond:
            if not self._cond.wait_for(lambda: channel.ready is not None or not channel.alive, timeout):
                raise ZygoteDied("sandbox user-namespace launcher did not start")
            if channel.alive:
                return channel
            if channel.ready is not None:
                raise ZygoteDied("sandbox user-namespace launcher is gone")
        return self._main  # none (real root, or user namespaces refused): the launcher makes them per run

    def spawn(self, kind: bytes, fds: Sequence[int], timeout: float = 30.0, userns: bool = False,
              required: bool = False) -> int:
        """Fork a candidate (``C``, its five pipe ends) or a judge server (``K``, its socket); the
        pid. ``userns``: a candidate that may be forked by the candidate launcher; ``required``:
        only there (:class:`ZygoteDied` if it is not serving). ``C`` may carry the key of the
        candidate's limits (``C<key>``: see :func:`.processes.confinement_key`), for which the
        candidate launcher confines its spare candidates."""
        with self._send_lock:
            with self._cond:
                if not self.alive:
                    raise ZygoteDied("sandbox launcher is gone")
            channel = self._candidate_channel(timeout) if kind[:1] == b"C" and userns else self._main
            if required and channel is not self._userns:
                raise ZygoteDied("sandbox candidate launcher is not serving")
            try:
                socket.send_fds(channel.sock, [kind], list(fds))
            except OSError as error:
                raise ZygoteDied(str(error)) from error
            with self._cond:
                if not self._cond.wait_for(lambda: channel.spawned or not channel.alive, timeout):
                    raise ZygoteDied("sandbox launcher did not answer")
                if not channel.spawned:
                    raise ZygoteDied("sandbox launcher is gone")
                pid = channel.spawned.pop(0)
                if channel is self._userns:
                    self._owners[pid] = channel
                return pid

    def wait(self, pid: int, timeout: float | None) -> int | None:
        """Exit code as ``Popen.returncode`` (negative: signal), or ``None`` on timeout."""
        channel = self._owners.get(pid, self._main)
        with self._cond:
            if not self._cond.wait_for(lambda: pid in self._exits or not channel.alive, timeout):
                return None
            if pid not in self._exits:
                raise ZygoteDied("sandbox launcher is gone")
            self._owners.pop(pid, None)
            return os.waitstatus_to_exitcode(self._exits.pop(pid))

    def discard(self, pid: int) -> None:
        """``pid`` (killed) is not waited for: its exit status is dropped when it comes."""
        with self._cond:
            if self._exits.pop(pid, None) is None:
                self._discarded.add(pid)
            else:
                self._owners.pop(pid, None)

    def settle(self, timeout: float) -> bool:
        """Wait until every discarded process has been reaped (or the launcher is gone)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._discarded or not self.alive, timeout)

    def forget(self) -> None:
        """In a forked copy of the caller: close this copy's sockets, leave the launcher alone."""
        self.alive = False
        self._userns.alive = False
        self._main.sock.close()
        self._userns.sock.close()

    def exited(self, pid: int) -> bool:
        with self._cond:
            return pid in self._exits

    def close(self) -> None:
        """End the launcher and every process it started; reap it."""
        for _, sock in self.idle_judges:
            sock.close()
        for sock in (self._userns.sock, self._main.sock):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=5)
        except OSError:
            pass
