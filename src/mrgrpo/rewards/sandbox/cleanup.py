"""Removing a run's working directory (runs in the caller).

A program may leave any tree in its directory: thousands of nested levels (deeper than
``PATH_MAX``, so no path names the bottom), hundreds of thousands of files, directories it
made unreadable. :func:`remove_tree` removes it without recursion (an explicit stack of names,
one open directory at a time, so neither the interpreter's stack nor the caller's file
descriptors grow with the depth), relative to directory fds (no path is ever longer than one
name), never following a symbolic link, under a deadline; :func:`remove_workdir` never raises:
what it could not remove is logged, one line.

A caller killed outright (SIGKILL, the OOM killer) removes none of its runs' directories. Each
is named after its caller (:func:`owned_prefix`: the caller's PID namespace, pid and start
time), and the next caller in the same temporary directory and PID namespace removes those
whose caller is gone (:func:`sweep_stale`, at its first run there).
"""

from __future__ import annotations

import logging
import os
import stat
import time

logger = logging.getLogger("mrgrpo.rewards.sandbox")

#: Seconds one working directory's removal may take before the rest is left (and logged).
#: Removing costs about what creating cost, and a candidate creates within its CPU limit.
CLEANUP_S = 60.0
#: The start of every run directory's name (then, where /proc tells them, the caller's PID
#: namespace, pid and start time: :func:`owned_prefix`).
PREFIX = "mrgrpo-sbx-"
#: Seconds one sweep of what killed callers left may take in all (the first run waits for it);
#: what is left then is removed by a later caller's sweep.
SWEEP_S = 10.0
#: Subdirectory names remembered per scan of a directory (it is scanned again when they are done).
_BATCH = 4096
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class CleanupTimeout(OSError):
    """The deadline passed before the tree was gone."""


def _open_dir(name: str, dir_fd: int | None) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        # a directory the program made unreadable (mode 000): its owner or root may chmod it
        os.chmod(name, 0o700, dir_fd=dir_fd, follow_symlinks=False)
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def remove_tree(path: str, deadline: float | None = None) -> None:
    """Remove ``path`` and everything under it, iteratively; raises :class:`CleanupTimeout` past
    ``deadline`` (``time.monotonic()``), ``OSError`` for what cannot be removed. A ``path`` that
    does not exist is nothing to do; a symbolic link anywhere is removed, never followed."""
    try:
        top = _open_dir(path, None)
    except FileNotFoundError:
        return
    except OSError:
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            raise
        os.unlink(path)  # not a directory (a link): itself only
        return
    # One frame per level below ``path``: (its name in its parent, (st_dev, st_ino), subdirectory
    # names still to visit). Only the deepest level's fd is open.
    frames: list[tuple[str, tuple[int, int], list[str]]] = [("", _identity(top), [])]
    fd = top
    try:
        scan = True
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise CleanupTimeout(f"removing {path} took past its deadline ({len(frames)} levels deep)")
            name, here, pending = frames[-1]
            if scan:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            if len(pending) < _BATCH:
                                pending.append(entry.name)
                        else:
                            try:
                                os.unlink(entry.name, dir_fd=fd)
                            except FileNotFoundError:
                                pass
                scan = False
            if pending:
                sub = pending.pop()
                try:
                    child = _open_dir(sub, fd)
                except FileNotFoundError:
                    continue
                except NotADirectoryError:  # changed since the scan: not followed
                    os.unlink(sub, dir_fd=fd)
                    continue
                os.close(fd)
                fd = child
                frames.append((sub, _identity(fd), []))
                scan = True
                continue
            # Every subdirectory seen is gone: look again (a batch was full), else this level is empty.
            with os.scandir(fd) as entries:
                if any(True for _ in entries):
                    scan = True
                    continue
            if len(frames) == 1:
                os.close(fd)
                fd = -1
                os.rmdir(path)
                return
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            frames.pop()
            if _identity(parent) != frames[-1][1]:  # moved meanwhile: stop rather than remove elsewhere
                os.close(parent)
                raise OSError(f"{path}: a directory moved while it was being removed")
            os.close(fd)
            fd = parent
            os.rmdir(name, dir_fd=fd)
    finally:
        if fd >= 0:
            os.close(fd)


def remove_workdir(path: str, timeout: float = CLEANUP_S) -> bool:
    """Remove a run's working directory; True if it is gone. Never raises (what is left is
    logged: the scoring call must not fail because of what a program left behind)."""
    started = time.monotonic()
    try:
        remove_tree(path, started + timeout)
        return True
    except Exception as error:  # noqa: BLE001 - contained and reported, by design
        logger.warning("mrgrpo sandbox: could not remove the working directory %s (%s: %s)", path,
                       type(error).__name__, str(error)[:200])
        return False


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks after boot: ``/proc/<pid>/stat``'s 22nd field),
    None where there is no such process (or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
        return data.rsplit(b")", 1)[1].split()[19].decode("ascii")
    except (OSError, IndexError, UnicodeDecodeError):
        return None


def _pid_namespace() -> str | None:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return None


_prefixes: dict[int, str] = {}  # pid -> its owned_prefix
_swept: set[tuple[int, str]] = set()  # (pid, temporary directory) swept already


def owned_prefix() -> str:
    """``mrgrpo-sbx-<pid namespace>-<pid>-<start>-``: the start of the name of a run directory
    this process makes, so that a later caller can tell when its maker is gone (a pid alone
    could be another process's by then). Just ``mrgrpo-sbx-`` without ``/proc`` (never swept)."""
    pid = os.getpid()
    if pid not in _prefixes:  # (a forked caller is another process: its own prefix)
        namespace, start = _pid_namespace(), _process_start(pid)
        _prefixes[pid] = PREFIX if namespace is None or start is None else f"{PREFIX}{namespace}-{pid}-{start}-"
    return _prefixes[pid]


def sweep_stale(tempdir: str) -> list[str]:
    """Remove the run directories in ``tempdir`` whose caller, of this PID namespace, is gone
    (killed before it could remove them); once per process and directory. Directories of live
    callers, of other PID namespaces (whose pids this one cannot check), of other users (unless
    this is root) and of another naming are left; at most :data:`SWEEP_S` seconds in all.
    Returns the paths removed."""
    key = (os.getpid(), tempdir)
    if key in _swept:
        return []
    _swept.add(key)
    namespace = _pid_namespace()
    if namespace is None:
        return []
    ours = PREFIX + namespace + "-"
    try:
        names = [name for name in os.listdir(tempdir) if name.startswith(ours)]
    except OSError:
        return []
    removed, deadline = [], time.monotonic() + SWEEP_S
    for name in names:
        if time.monotonic() >= deadline:
            break
        fields = name[len(ours):].split("-")
        if len(fields) != 3 or not (fields[0].isdigit() and fields[1].isdigit()):
            continue
        if _process_start(int(fields[0])) == fields[1]:
            continue  # its caller is alive
        path = os.path.join(tempdir, name)
        try:
            found = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(found.st_mode) or (os.geteuid() != 0 and found.st_uid != os.geteuid()):
            continue
        if remove_workdir(path, timeout=max(0.0, deadline - time.monotonic())):
            removed.append(path)
    return removed
