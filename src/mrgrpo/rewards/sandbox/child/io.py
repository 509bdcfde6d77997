"""Framing, fd plumbing and C calls shared by the sandbox processes (runs in them only).

Read as source by :mod:`mrgrpo.rewards.sandbox.child` and executed as the module
``_mrgrpo_sandbox.io`` of each sandbox interpreter; it imports only the standard library.
"""

from posix import write as _write

_SYMBOLS = {}


def _libc():
    """``call(name, *args)`` of a C library function (symbols resolved once, in the launcher)."""
    import _ctypes

    if not _SYMBOLS:
        handle = _ctypes.dlopen(None)
        for name in ("prctl", "unshare", "mount", "chroot", "setns"):
            _SYMBOLS[name] = _ctypes.dlsym(handle, name)

    def call(name, *args):
        return _ctypes.call_function(_SYMBOLS[name], args)

    return call


_PR_SET_PDEATHSIG, _PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 1, 3, 4


def _harden(pdeathsig):
    """Non-dumpable (no ptrace, ``/proc/<pid>/fd``, ``/proc/<pid>/mem`` or ``process_vm_readv`` by
    same-uid processes), checked; optional death signal. A process that cannot be made
    non-dumpable exits (status 71) rather than serve."""
    import posix

    libc = _libc()
    libc("prctl", _PR_SET_DUMPABLE, 0, 0, 0, 0)
    if libc("prctl", _PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
        posix._exit(71)
    if pdeathsig:
        libc("prctl", _PR_SET_PDEATHSIG, 9, 0, 0, 0)


def _arrange(sources, first, keep=None):
    """Move fds ``sources`` to ``first, first + 1, ...`` and close every other fd above them;
    ``keep``: ``(fd, number)``, that fd moved to that number (above the others) and kept."""
    import fcntl
    import posix

    # copies above every target first (so no dup2 below overwrites a source), yet low enough
    # for a process whose RLIMIT_NOFILE is already set (a prepared spare candidate)
    low = first + len(sources)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, low) for fd in sources]
    kept = None if keep is None else fcntl.fcntl(keep[0], fcntl.F_DUPFD, low)
    for target, fd in enumerate(high, first):
        posix.dup2(fd, target)
    if kept is None:
        posix.closerange(first + len(high), 1 << 16)
        return
    posix.dup2(kept, keep[1])
    posix.closerange(first + len(high), keep[1])
    posix.closerange(keep[1] + 1, 1 << 16)


def _read_exact(fd, n):
    import posix

    data = b""
    while len(data) < n:
        chunk = posix.read(fd, n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _send(fd, kind, payload=b""):
    data = len(payload).to_bytes(4, "big") + kind + payload
    sent = _write(fd, data)
    if sent < len(data):  # a pipe takes large messages in parts
        rest = memoryview(data)[sent:]
        while rest:
            rest = rest[_write(fd, rest):]


def _recv(fd, cap):
    """``(kind, payload)`` of one message; EOFError at end; ValueError past ``cap`` bytes."""
    header = _read_exact(fd, 5)
    n = int.from_bytes(header[:4], "big")
    if n > cap:
        raise ValueError(n)
    return header[4:5], _read_exact(fd, n) if n else b""
