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
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Sequence

#: The start of every sandbox interpreter's ``-c`` program: read the marshalled bootstrap from
#: stdin (10-digit length, then ``(name, code)`` pairs, see :mod:`.child`) and execute each as the
#: module ``_mrgrpo_sandbox.<name>``; ``g`` is the namespace of ``boot``. Callers append the line
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
    "M=type(sys);P='_mrgrpo_sandbox';p=M(P);p.__path__=[];sys.modules[P]=p\n"
    "for _n,_c in marshal.loads(_read(int(_read(10)))):\n"
    " m=M(P+'.'+_n);m.__package__=P;sys.modules[m.__name__]=m;setattr(p,_n,m);exec(_c,m.__dict__)\n"
    "g=sys.modules[P+'.boot'].__dict__\n"
)
_STUB = STUB_PREFIX + (
    "posix.close(0); posix.open('/dev/null', posix.O_RDONLY)\n"
    "g['_zygote'](int(sys.argv[1]))\n"
)


class ZygoteDied(RuntimeError):
    pass


class Zygote:
    """One launcher process and the bookkeeping of its children (thread-safe)."""

    def __init__(self, executable: str, env: dict, boot_code: bytes):
        self.owner = os.getpid()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._proc = subprocess.Popen(
            [executable, "-I", "-S", "-c", _STUB, str(theirs.fileno())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd="/",
            start_new_session=True,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self._proc.stdin.write(b"%010d" % len(boot_code) + boot_code)
        self._proc.stdin.close()
        self._sock = ours
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._spawned: list[int] = []
        self.idle_judges: list[tuple[int, socket.socket]] = []  # judge servers between runs
        self._exits: dict[int, int] = {}
        self.alive = True
        threading.Thread(target=self._reader, name="mrgrpo-zygote-reader", daemon=True).start()

    def _reader(self) -> None:
        buffer = b""
        try:
            while True:
                chunk = self._sock.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                with self._cond:
                    for line in lines:
                        words = line.split()
                        if len(words) == 2 and words[0] == b"P":
                            self._spawned.append(int(words[1]))
                        elif len(words) == 3 and words[0] == b"X":
                            self._exits[int(words[1])] = int(words[2])
                    self._cond.notify_all()
        except OSError:
            pass
        with self._cond:
            self.alive = False
            self._cond.notify_all()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def spawn(self, kind: bytes, fds: Sequence[int], timeout: float = 30.0) -> int:
        """Fork a candidate (``C``, its five pipe ends) or a judge server (``K``, its socket); the pid."""
        with self._send_lock:
            with self._cond:
                if not self.alive:
                    raise ZygoteDied("sandbox launcher is gone")
            try:
                socket.send_fds(self._sock, [kind], list(fds))
            except OSError as error:
                raise ZygoteDied(str(error)) from error
            with self._cond:
                if not self._cond.wait_for(lambda: self._spawned or not self.alive, timeout):
                    raise ZygoteDied("sandbox launcher did not answer")
                if not self._spawned:
                    raise ZygoteDied("sandbox launcher is gone")
                return self._spawned.pop(0)

    def wait(self, pid: int, timeout: float | None) -> int | None:
        """Exit code as ``Popen.returncode`` (negative: signal), or ``None`` on timeout."""
        with self._cond:
            if not self._cond.wait_for(lambda: pid in self._exits or not self.alive, timeout):
                return None
            if pid not in self._exits:
                raise ZygoteDied("sandbox launcher is gone")
            return os.waitstatus_to_exitcode(self._exits.pop(pid))

    def forget(self) -> None:
        """In a forked copy of the caller: close this copy's socket, leave the launcher alone."""
        self.alive = False
        self._sock.close()

    def exited(self, pid: int) -> bool:
        with self._cond:
            return pid in self._exits

    def close(self) -> None:
        """End the launcher and every process it started; reap it."""
        for _, sock in self.idle_judges:
            sock.close()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._sock.close()
        finally:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
            except OSError:
                pass
