"""The candidate side of a sandbox run (runs in the candidate process only).

Read as source by :mod:`mrgrpo.rewards.sandbox.child` and executed as the module
``_mrgrpo_sandbox.candidate``. :func:`_candidate_main` isolates the process
(:func:`~.confine.confine`), checks that the layers in force meet the caller's minimum, installs
the audit guards (:func:`_install_guard`), then runs the untrusted program and serves the
judge's requests.
"""

from _pickle import loads as _unpickle

from .confine import PREPARED as _PREPARED
from .confine import confine
from .io import _read_exact, _send
from .wire import decode, encode

_BLOCKED = frozenset(
    (
        "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.startfile",
        "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill", "os.symlink", "os.chroot",
        "socket.__new__", "socket.bind", "socket.connect", "socket.getaddrinfo", "socket.gethostbyname",
        "socket.gethostbyaddr", "socket.sendto", "socket.sendmsg", "sys.addaudithook", "sys.settrace",
        "sys.setprofile", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "resource.setrlimit",
        "resource.prlimit", "os.setxattr", "os.removexattr", "pty.spawn", "webbrowser.open",
    )
)
_PATH_EVENTS = frozenset(
    (
        "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
        "os.link", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile", "shutil.copytree",
        "shutil.chown", "os.chflags", "os.lchflags", "os.mkfifo", "os.mknod",
    )
)


_GUARDS_ONLY_BLOCKED = frozenset(
    (
        "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function", "ctypes.cdata",
        "ctypes.cdata/buffer", "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at",
    )
)
# Events naming a directory fd: (index of a path, index of the directory fd it is relative to)
_AT_EVENTS = {
    "os.mkdir": ((0, 2),), "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.rename": ((0, 2), (1, 3)),
    "os.chmod": ((0, 2),), "os.chown": ((0, 3),), "os.link": ((0, 2), (1, 3)), "os.utime": ((0, 3),),
}
# How many levels below the working directory a directory fd's directory is looked for
_AT_DEPTH = 64
# Modules that write files without an audit event (readline's history, sqlite and dbm databases,
# POSIX shared memory in /dev/shm: memory no limit counts, and state outliving the run)
_GUARDS_ONLY_MODULES = frozenset(("readline", "_sqlite3", "sqlite3", "_dbm", "_gdbm", "dbm", "_posixshmem"))


def _install_guard(workdir, stdlib, guards_only, disk=None, makes_files=True):
    """Audit hook: no processes, signals, sockets, tracing, gc walking, rlimit changes; writes,
    deletions and renames only inside the working directory. With ``guards_only`` (no OS-level
    isolation: the program runs as the caller's uid), also no ``ctypes`` and no reading outside
    the standard library, the working directory and ``/dev/null``/``/dev/urandom`` (so neither
    ``/proc/<pid>/mem`` nor the datasets on disk). Defence in depth: the verdict does not depend
    on it (the candidate never holds the judge's state).

    ``disk``: ``(bytes, file size limit, open files limit)`` where the working directory is on
    the caller's disk (no private root, so no tmpfs of the run's own caps it): a file is opened
    for writing (or truncated by path) only while the run's files on disk, plus the file size
    limit for each regular file it holds open for writing and for the new one, stay within
    ``bytes``; each of those can then grow to the file size limit (``RLIMIT_FSIZE``) and no
    further, so the run's files never hold more than ``bytes``. A directory it cannot list
    counts as full.

    ``makes_files`` False (a working directory on the caller's disk, which concurrent runs share,
    unless ``Limits.disk_files``): no file, directory or node is made (an ``open`` that would
    create one, ``O_TMPFILE``, ``mkdir``, ``mkfifo``, ``mknod``); opening one that exists for
    writing (``/dev/null``) still works. Landlock and seccomp refuse the same in the kernel."""
    import posix
    import sys

    getcwd = posix.getcwd
    type_ = type
    write_flags = posix.O_WRONLY | posix.O_RDWR | posix.O_APPEND | posix.O_CREAT | posix.O_TRUNC
    root = workdir.rstrip("/")
    allowed_devices = ("/dev/null",)

    def normalize(path):
        if type_(path) is bytes:
            path = path.decode("utf-8", "surrogateescape")
        if not path.startswith("/"):
            path = getcwd() + "/" + path
        parts = []
        for part in path.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if parts:
                    parts.pop()
            else:
                parts.append(part)
        return "/" + "/".join(parts)

    def inside(path):
        if type_(path) is int:
            return True
        if type_(path) not in (str, bytes):
            return False
        full = normalize(path)
        return full == root or full.startswith(root + "/") or full in allowed_devices

    stat = posix.stat
    root_id = (stat(root).st_dev, stat(root).st_ino) if root else None
    top_id = (stat("/").st_dev, stat("/").st_ino)

    def level(fd):
        """How many levels below the working directory the directory of ``fd`` is (None: not
        under it within _AT_DEPTH). Walks up with ``..`` from the fd (stat: no audit event)."""
        up = "."
        for depth in range(_AT_DEPTH + 1):
            try:
                st = stat(up, dir_fd=fd)
            except (OSError, ValueError, TypeError, OverflowError):
                return None
            here = (st.st_dev, st.st_ino)
            if here == root_id:
                return depth
            if here == top_id:
                return None
            up = ".." if depth == 0 else up + "/.."
        return None

    def climbs(path, start):
        """Whether relative ``path``, walked from ``start`` levels down, goes above level 0."""
        if type_(path) is bytes:
            path = path.decode("utf-8", "surrogateescape")
        for part in path.split("/"):
            if part == "..":
                start -= 1
                if start < 0:
                    return True
            elif part not in ("", "."):
                start += 1
        return False

    def inside_at(path, dir_fd):
        """``path`` relative to the directory fd ``dir_fd`` (-1 or None: the cwd) lands inside."""
        if dir_fd is None or dir_fd == -1 or type_(path) not in (str, bytes):
            return inside(path)
        if (path[:1] if type_(path) is str else path[:1].decode("latin-1")) == "/":
            return inside(path)
        if type_(dir_fd) is not int:
            return False
        depth = level(dir_fd)
        return depth is not None and not climbs(path, depth)

    libraries = tuple({normalize(p) for p in [stdlib] + [p for p in sys.path if type_(p) is str and p]})
    readable_devices = ("/dev/null", "/dev/urandom", "/dev/zero")

    def readable(path):
        if type_(path) is int:
            return True
        if type_(path) not in (str, bytes):
            return False
        full = normalize(path)
        if inside(path) or full in readable_devices:
            return True
        return any(full == lib or full.startswith(lib + "/") for lib in libraries)

    def deny(event):
        raise PermissionError("sandbox: %s is not allowed" % event)

    tmpfile = getattr(posix, "O_TMPFILE", 0)  # (its bits include O_DIRECTORY's: all of them, or not it)
    no_files = ("sandbox: making files is not allowed without a private root (the caller's disk is shared "
                "by concurrent runs); write to memory (io.StringIO) or set Limits.disk_files")

    def makes(path, flags):
        """Whether this ``open`` would make a file: ``O_TMPFILE``, or an ``O_CREAT`` naming no
        file that exists."""
        if type_(flags) is not int:
            return False
        if tmpfile and flags & tmpfile == tmpfile:
            return True
        if not flags & posix.O_CREAT:
            return False
        if type_(path) not in (str, bytes):
            return True  # creating from what is not a path
        try:
            stat(path)
        except OSError:
            return True
        except (ValueError, TypeError):
            return False  # the open itself fails on such a path
        return False

    def room(path):
        return True

    if guards_only and disk is not None and root:
        import fcntl

        limit, file_size, open_files = disk
        if file_size > limit:  # no one file beyond the whole
            import resource

            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
            file_size = limit
        fstat, scandir, get_flags, F_GETFL = posix.fstat, posix.scandir, fcntl.fcntl, fcntl.F_GETFL
        for_writing = posix.O_WRONLY | posix.O_RDWR
        disk_id = stat(root).st_dev

        def held_for_writing():
            """(dev, inode) of each regular file of the working directory's filesystem that this
            process holds open for writing (none can be at an fd past its ``RLIMIT_NOFILE``)."""
            held = set()
            for fd in range(open_files):
                try:
                    st = fstat(fd)
                    if st.st_dev == disk_id and st.st_mode & 0o170000 == 0o100000 and get_flags(fd, F_GETFL) & for_writing:
                        held.add((st.st_dev, st.st_ino))
                except OSError:
                    pass
            return held

        def on_disk(skip):
            """Bytes of the working directory's regular files but ``skip``'s (hard links once);
            None where a directory cannot be listed."""
            total, todo, seen = 0, [root], set(skip)
            while todo:
                try:
                    with scandir(todo.pop()) as entries:
                        for entry in entries:
                            if entry.is_dir(follow_symlinks=False):
                                todo.append(entry.path)
                            elif entry.is_file(follow_symlinks=False):
                                st = entry.stat(follow_symlinks=False)
                                if (st.st_dev, st.st_ino) not in seen:
                                    seen.add((st.st_dev, st.st_ino))
                                    total += st.st_blocks * 512
                except OSError:
                    return None
            return total

        def room(path):
            if type_(path) in (str, bytes) and normalize(path) in allowed_devices:
                return True
            held = held_for_writing()
            used = on_disk(held)
            return used is not None and used + (len(held) + 1) * file_size <= limit

    def guard(event, args):
        if event in _BLOCKED or (guards_only and event in _GUARDS_ONLY_BLOCKED):
            deny(event)
        if guards_only and event == "import" and args and type_(args[0]) is str and args[0].split(".")[0] in _GUARDS_ONLY_MODULES:
            deny("importing " + args[0])
        if event == "open":
            path, mode, flags = args
            writing = (type_(flags) is int and flags & write_flags) or (
                type_(mode) is str and any(c in mode for c in "wax+")
            )
            if writing and not inside(path):
                deny("writing outside the working directory")
            if writing and not room(path):
                deny("writing more than the run's files may hold (Limits.tmpfs_mb)")
            if not makes_files and makes(path, flags):  # (the event's flags: the open's own, always an int)
                raise PermissionError(no_files)
            if guards_only and not readable(path):
                deny("reading outside the standard library and the working directory")
            # The event names no dir_fd: a relative path that climbs above where it starts could
            # land anywhere from a directory fd (writes relative to one: seccomp refuses them).
            if guards_only and type_(path) in (str, bytes) and climbs(path, 0):
                deny("a relative path climbing out of its directory")
        elif guards_only and event in ("os.listdir", "os.scandir"):
            # Listing is reading a directory: not outside what it may read (the host's /proc
            # among others: its pids). Landlock refuses it too, where present.
            if args and args[0] is not None and not readable(args[0]):
                deny("listing a directory outside the standard library and the working directory")
        elif not makes_files and event in ("os.mkdir", "os.mkfifo", "os.mknod"):
            raise PermissionError(no_files)
        elif event in _AT_EVENTS:
            for at, fd_at in _AT_EVENTS[event]:
                if at < len(args) and not inside_at(args[at], args[fd_at] if fd_at < len(args) else None):
                    deny(event + " outside the working directory")
        elif event in _PATH_EVENTS:
            for arg in args:
                if type_(arg) in (str, bytes) and not inside(arg):
                    deny(event + " outside the working directory")
            if event == "os.truncate" and args and type_(args[0]) in (str, bytes) and not room(args[0]):
                deny("growing a file past what the run's files may hold (Limits.tmpfs_mb)")

    sys.addaudithook(guard)


def _error_payload(error):
    try:
        name = type(error).__name__
        message = str(error)
    except BaseException:
        name, message = "Exception", ""
    if type(name) is not str:
        name = "Exception"
    return encode((name[:80], message[:1000] if type(message) is str else ""))


def _candidate_main(read, prepared=None):
    """The untrusted side: fds 0 (program, then /dev/null), 1, 2 (captured), 3 (requests), 4 (replies).
    ``prepared``: ``(job, working directory, layers)`` of a spare candidate, confined already
    for that job's limits (:func:`~.boot._prepare`); it runs only a job with the same ones."""
    import gc
    import io
    import marshal
    import posix
    import sys

    # No collection during the sandbox's own setup: a collection walks (and so writes, a copy-on-
    # write fault a page) objects the launcher made, and none of ours is garbage worth it. The
    # setup's objects are frozen (never walked) and collection is back on before the program runs.
    gc.disable()
    job = marshal.loads(read(int(read(10))))
    posix.close(0)
    posix.open("/dev/null", posix.O_RDONLY)
    if prepared is None:
        workdir, layers = confine(job)
    else:
        for name in _PREPARED:
            if job[name] != prepared[0][name]:
                posix._exit(71)  # never: the candidate launcher hands a spare only the run it was made for
        workdir, layers = prepared[1], prepared[2]
    private = "chroot" in layers
    minimum = job["minimum"]
    if (minimum == "private-root" and not private) or (
        minimum == "kernel" and not (private or "seccomp" in layers or "landlock" in layers)
    ):
        _send(4, b"H", b"unavailable " + ",".join(layers or ["guards"]).encode())
        return
    # Without a private root the guards also refuse ctypes and reading outside (Landlock, where
    # present, enforces the files part in the kernel).
    _install_guard(workdir, job["stdlib"], guards_only=not private,
                   disk=None if private else (job["tmpfs_kb"] << 10, job["fsize"], job["nofile"]),
                   makes_files=private or bool(job.get("disk_files")))
    source, stdout, stderr = job["program"], sys.stdout, sys.stderr
    builtins_module = sys.modules["builtins"]
    builtins_dict = builtins_module.__dict__
    # Taken only where it is used, stdio runs: a snapshot writes the reference count of every
    # builtin object, and so copies their pages, as does restoring them (together about 60
    # copy-on-write faults and 0.06-0.17 ms of a fresh candidate's CPU, measured).
    snapshot = tuple(builtins_dict.items()) if job["stdio"] else None
    del job
    namespace = {"__name__": "__main__", "__builtins__": builtins_module}
    # Compiled before the handshake (the timed part starts with running it): compiling is a
    # fresh process's first heavy use of its heap, whose copy-on-write faults would otherwise
    # add a millisecond of noise to the load time.
    try:
        program, compile_error = compile(source, "<program>", "exec", dont_inherit=True, optimize=0), None
    except BaseException as error:
        program, compile_error = None, error
    gc.freeze()
    gc.enable()  # the program runs with the interpreter's usual collection
    _send(4, b"H", ",".join(layers + ["guards"]).encode())  # ready: what follows is timed

    loads, read_fd = _unpickle, posix.read

    def flush(restore=False):
        # The sandbox's own code has builtins of its own (a copy: see launcher.STUB_PREFIX), so a
        # program's changes to the interpreter's builtins never reach this server. They stay
        # the program's own, as in plain Python (the tests, in the judge, never see them), and
        # are undone only after each stdio case, each of which runs the program afresh.
        if restore and snapshot is not None:
            builtins_dict.clear()
            builtins_dict.update(snapshot)
        for stream in (stdout, stderr):
            try:
                stream.flush()
            except BaseException:
                pass

    def receive():
        # One request: one read where it fits (the judge writes each in one go and sends the next
        # only after the reply), then the rest exactly.
        data = read_fd(3, 1 << 16)
        if len(data) < 5:
            if not data:
                raise EOFError
            data += _read_exact(3, 5 - len(data))
        size = int.from_bytes(data[:4], "big")
        if size > 1 << 30:
            raise ValueError(size)
        if len(data) < 5 + size:
            data += _read_exact(3, 5 + size - len(data))
        elif len(data) > 5 + size:
            raise ValueError("more than one request")
        return data[4:5], data[5:]

    while True:
        try:
            kind, payload = receive()
        except (EOFError, OSError, ValueError):
            flush()
            return
        try:
            if kind == b"C":  # first: the one request made per call
                name, args, kwargs = loads(payload)  # the judge's pickle of a plain value
                try:
                    value = namespace[name](*args, **kwargs)
                except BaseException as error:
                    flush()
                    _send(4, b"E", _error_payload(error))
                    continue
                flush()
                try:
                    data = encode(value)
                except BaseException as error:
                    _send(4, b"N", encode(str(error)[:300]))
                    continue
                _send(4, b"O", data)
            elif kind == b"P":  # the judge's untimed pings, before the program loads: the least a request costs
                _send(4, b"O", b"N")
            elif kind == b"L":
                if program is None:
                    flush()
                    _send(4, b"I", _error_payload(compile_error))
                    continue
                try:
                    exec(program, namespace)
                except BaseException as error:
                    flush()
                    _send(4, b"E", _error_payload(error))
                    continue
                flush()
                _send(4, b"O", encode(None))
            elif kind == b"R":
                answer = []
                for name in decode(payload):
                    if name not in namespace:
                        answer.append(("x", "not defined"))
                        continue
                    value = namespace[name]
                    if callable(value):
                        answer.append(("f", ""))
                        continue
                    try:
                        answer.append(("v", decode(encode(value))))
                    except BaseException as error:
                        answer.append(("x", str(error)[:200]))
                _send(4, b"O", encode(tuple(answer)))
            elif kind == b"S":
                if program is None:
                    _send(4, b"I", _error_payload(compile_error))
                    continue
                out = io.BytesIO()
                sys.stdin = io.TextIOWrapper(io.BytesIO(decode(payload).encode("utf-8", "surrogatepass")), encoding="utf-8")
                sys.stdout = writer = io.TextIOWrapper(out, encoding="utf-8", errors="surrogatepass", write_through=True)
                failure = None
                try:
                    exec(program, {"__name__": "__main__", "__builtins__": sys.modules["builtins"]})
                except SystemExit as error:
                    if error.code not in (None, 0):
                        failure = error
                except BaseException as error:
                    failure = error
                try:
                    writer.flush()
                except BaseException:
                    pass
                sys.stdin, sys.stdout = sys.__stdin__, stdout
                flush(restore=True)
                if failure is not None:
                    _send(4, b"E", _error_payload(failure))
                else:
                    _send(4, b"O", encode(out.getvalue().decode("utf-8", "replace")))
            else:
                return
        except (BrokenPipeError, OSError):
            return
        except BaseException as error:  # keep serving: an encode/decode failure is one reply
            try:
                _send(4, b"E", _error_payload(error))
            except BaseException:
                return


