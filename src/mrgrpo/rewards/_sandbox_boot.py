"""Bootstrap of a sandbox child (private; read as *source* by :mod:`mrgrpo.rewards.sandbox`).

This file is never imported by the trainer. The parent compiles it once, marshals the code
object and sends it, followed by a 32-byte nonce and the marshalled job, on the stdin of a
fresh ``python -I -S`` interpreter whose ``-c`` stub (``sandbox._STUB``) executes it.

Sequence in the child (all before any untrusted code runs):

1. The nonce goes straight into a closure of the *vault* audit hook and is bound to no
   variable, global, file or environment entry. Only the vault writes report lines
   ``<nonce> <message>\\n`` to the report fd, and only when ``sys.audit("mrgrpo.report", msg)``
   is called from the bootstrap's own ``_main`` frame (checked by frame identity), so user code
   can neither read the nonce nor make the vault speak for it.
2. stdin is replaced by ``/dev/null``.
3. Isolation, when the parent is root: new network and mount namespaces (``unshare``), a
   private size-capped tmpfs on ``/tmp`` (the working directory lives there and disappears
   with the namespace), read-only empty tmpfs over the other world-writable directories, the
   standard library bind-mounted read-only where an unprivileged uid can reach it, then a drop
   to a per-run uid (so RLIMIT_NPROC = 1 forbids fork and threads, root's files and processes
   are out of reach). Without privileges: the parent's temporary directory and the guards.
4. rlimits (CPU, address space, file size, open files, processes, core).
5. The guard audit hook: no processes, signals, sockets, new audit hooks, tracing, gc walking,
   rlimit changes; writes, deletions and renames only inside the working directory.
6. The program runs in a fresh namespace; builtins are restored from a snapshot before the
   tests; the tests' case generator (built by the parent, see ``_sandbox_cases``) is
   instantiated from its code object directly (never looked up by a name the program could
   shadow); each case outcome and the final ``done`` are reported through the vault.

``_main`` uses only its locals once untrusted code has started (a program may rebind this
module's globals through frames; it cannot rebind another frame's locals).
"""


def _install_vault(nonce, report_fd, main_frame):
    import posix
    import sys

    getframe = sys._getframe
    write = posix.write
    bytes_ = bytes
    type_ = type
    prefix = bytes_(nonce) + b" "
    del nonce

    def vault(event, args):
        if event != "mrgrpo.report":
            return
        if getframe(1) is not main_frame or type_(args) is not tuple or len(args) != 1:
            return
        message = args[0]
        if type_(message) is not bytes_:
            return
        try:
            write(report_fd, prefix + message + b"\n")
        except OSError:
            pass

    sys.addaudithook(vault)


def _libc():
    import _ctypes

    handle = _ctypes.dlopen(None)

    def call(name, *args):
        return _ctypes.call_function(_ctypes.dlsym(handle, name), args)

    return call


_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = (
    1, 2, 4, 32, 4096, 16384, 1 << 18,
)
_MOUNT_POINT = "/tmp/.mrgrpo-python"
_PRIVATE_WORKDIR = "/tmp/work"


def _isolate(job):
    """Namespaces + private tmpfs + uid drop. Returns (workdir, flags) or raises OSError."""
    import posix
    import sys

    libc = _libc()
    if libc("unshare", _CLONE_NEWNS | _CLONE_NEWNET) != 0:
        raise OSError("unshare failed")
    flags = ["netns", "mountns"]
    if libc("mount", None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError("mount --make-rprivate / failed")
    tmp_opts = b"size=%dk,mode=1777" % (job["tmpfs_kb"],)
    if libc("mount", b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV, tmp_opts) != 0:
        raise OSError("tmpfs on /tmp failed")
    for path in job["readonly_dirs"]:
        libc("mount", b"tmpfs", path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV | _MS_RDONLY, b"size=4k,mode=755")
    stdlib = job["stdlib"]
    posix.mkdir(_MOUNT_POINT, 0o755)
    if libc("mount", stdlib.encode(), _MOUNT_POINT.encode(), None, _MS_BIND | _MS_REC, None) != 0:
        raise OSError("bind mount of the standard library failed")
    libc("mount", None, _MOUNT_POINT.encode(), None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None)
    sys.path[:] = [_MOUNT_POINT + p[len(stdlib):] if p.startswith(stdlib) else p for p in sys.path]
    sys.path_importer_cache.clear()
    for module in list(sys.modules.values()):  # packages imported so far (encodings, ...)
        path = getattr(module, "__path__", None)
        if type(path) is list:
            path[:] = [_MOUNT_POINT + p[len(stdlib):] if p.startswith(stdlib) else p for p in path]
    posix.mkdir(_PRIVATE_WORKDIR, 0o700)
    uid = job["uid"]
    posix.chown(_PRIVATE_WORKDIR, uid, uid)
    return _PRIVATE_WORKDIR, flags


def _limit(job, drop_uid):
    import resource

    def cap(which, value):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass

    cpu = job["cpu_s"]
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    except (ValueError, OSError):
        pass
    cap(resource.RLIMIT_FSIZE, job["fsize"])
    cap(resource.RLIMIT_NOFILE, job["nofile"])
    cap(resource.RLIMIT_CORE, 0)
    cap(resource.RLIMIT_NPROC, 1)
    if drop_uid is not None:
        import posix

        posix.setgroups([])
        posix.setgid(drop_uid)
        posix.setuid(drop_uid)
    cap(resource.RLIMIT_AS, job["address_space"])


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


def _install_guard(workdir):
    import posix
    import sys

    getcwd = posix.getcwd
    fsdecode_ok = (str, bytes)
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
        if type_(path) not in fsdecode_ok:
            return False
        full = normalize(path)
        return full == root or full.startswith(root + "/") or full in allowed_devices

    def deny(event):
        raise PermissionError("sandbox: %s is not allowed" % event)

    def guard(event, args):
        if event in _BLOCKED:
            deny(event)
        if event == "open":
            path, mode, flags = args
            writing = (type_(flags) is int and flags & write_flags) or (
                type_(mode) is str and any(c in mode for c in "wax+")
            )
            if writing and not inside(path):
                deny("writing outside the working directory")
        elif event in _PATH_EVENTS:
            for arg in args:
                if type_(arg) in fsdecode_ok and not inside(arg):
                    deny(event + " outside the working directory")

    sys.addaudithook(guard)


def _main(read, report_fd):
    import builtins
    import io
    import marshal
    import posix
    import sys
    import time

    # The nonce goes from fd 0 straight into the vault's closure: never bound to a name here.
    _install_vault(read(32), report_fd, sys._getframe(0))
    job = marshal.loads(read(int(read(10))))
    posix.close(0)
    posix.open("/dev/null", posix.O_RDONLY)
    workdir, flags, drop = job["workdir"], [], None
    if job["isolate"]:
        try:
            workdir, flags = _isolate(job)
            drop = job["uid"]
        except OSError:
            workdir, flags = job["workdir"], []
    posix.chdir(workdir)
    _limit(job, drop)
    if drop is not None:
        flags.append("uid")
    audit = sys.audit
    audit("mrgrpo.report", ("iso " + ",".join(flags or ["guards"])).encode())
    _install_guard(workdir)

    # From here on: locals only.
    type_, len_, str_, bytes_, range_ = type, len, str, bytes, range
    base_exc, stop_iter, system_exit = BaseException, StopIteration, SystemExit
    function_type = type(_main)
    type_name = type.__dict__["__name__"].__get__
    perf = time.perf_counter_ns
    next_ = next
    # Everything read after the program starts is an immutable local: a program can reach
    # this frame's f_locals and mutate a dict or list it finds there, not rebind a local.
    builtins_snapshot = tuple(builtins.__dict__.items())
    builtins_dict = builtins.__dict__
    source, mode, entry = job["program"], job["mode"], job["entry_point"]
    tests_source, expected_cases = job["tests"], job["n_cases"]
    stdio_cases = tuple((str_(i), str_(o)) for i, o in job["stdio_cases"])
    # Modules the tests import: their attributes are restored before the tests run.
    for name in job["test_modules"]:
        try:
            __import__(name)
        except BaseException:
            pass
    module_snapshot = tuple(
        (sys.modules[name].__dict__, tuple(sys.modules[name].__dict__.items()))
        for name in job["test_modules"] if name in sys.modules
    )
    del job

    def name_of(error):
        try:
            name = type_name(type_(error))
            if type_(name) is not str_:
                return b"Exception"
            return (name.encode("ascii", "replace").replace(b" ", b"_") or b"Exception")[:80]
        except base_exc:
            return b"Exception"

    try:
        program = compile(source, "<program>", "exec", dont_inherit=True, optimize=0)
    except base_exc as error:
        audit("mrgrpo.report", b"invalid " + name_of(error))
        return
    if mode == "stdio":
        text_io, bytes_io = io.TextIOWrapper, io.BytesIO
        real_stdin, real_stdout = sys.stdin, sys.stdout
        cases = stdio_cases
        elapsed = 0
        for index in range_(len_(cases)):
            stdin_text, expected = cases[index]
            out = bytes_io()
            sys.stdin = text_io(bytes_io(stdin_text.encode()), encoding="utf-8")
            sys.stdout = writer = text_io(out, encoding="utf-8", write_through=True)
            namespace = {"__name__": "__main__", "__builtins__": builtins}
            failure = None
            start = perf()
            try:
                exec(program, namespace)
            except system_exit as error:
                if error.code not in (None, 0):
                    failure = error
            except base_exc as error:
                failure = error
            elapsed += perf() - start
            builtins_dict.clear()
            builtins_dict.update(builtins_snapshot)
            sys.stdin, sys.stdout = real_stdin, real_stdout
            if failure is not None:
                audit("mrgrpo.report", b"case %d fail " % index + name_of(failure))
                continue
            if index == 0:
                audit("mrgrpo.report", b"loaded")
            try:
                writer.flush()
            except base_exc:
                pass
            got = out.getvalue().decode("utf-8", "replace")
            same = [l.rstrip() for l in got.rstrip().splitlines()] == [
                l.rstrip() for l in expected.rstrip().splitlines()
            ]
            audit("mrgrpo.report", b"case %d ok" % index if same else b"case %d fail WrongAnswer" % index)
        audit("mrgrpo.report", b"done %d %d" % (len_(cases), elapsed))
        return

    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(program, namespace)
    except base_exc as error:
        builtins_dict.clear()
        builtins_dict.update(builtins_snapshot)
        audit("mrgrpo.report", b"error " + name_of(error))
        return
    builtins_dict.clear()
    builtins_dict.update(builtins_snapshot)
    namespace["__builtins__"] = builtins
    audit("mrgrpo.report", b"loaded")
    if mode == "none":
        audit("mrgrpo.report", b"done 0 0")
        return
    try:
        for module_dict, items in module_snapshot:
            module_dict.clear()
            module_dict.update(items)
        tests = compile(tests_source, "<tests>", "exec", dont_inherit=True, optimize=0)
        cases_code = [c for c in tests.co_consts if type_(c) is type_(tests) and c.co_name == "__mrgrpo_cases__"][0]
    except base_exc as error:
        audit("mrgrpo.report", b"error TestsInvalid_" + name_of(error))
        return
    try:
        exec(tests, namespace)
        builtins_dict.clear()
        builtins_dict.update(builtins_snapshot)
        candidate = namespace[entry] if entry else None
        generator = function_type(cases_code, namespace, "check")(candidate)
    except base_exc as error:
        audit("mrgrpo.report", b"error " + name_of(error))
        return
    index = 0
    elapsed = 0
    while True:
        start = perf()
        try:
            outcome = next_(generator)
        except stop_iter:
            elapsed += perf() - start
            break
        except base_exc as error:
            audit("mrgrpo.report", b"error " + name_of(error))
            return
        elapsed += perf() - start
        if index >= expected_cases:
            audit("mrgrpo.report", b"error UnexpectedYield")
            return
        if outcome is None:
            audit("mrgrpo.report", b"case %d ok" % index)
        else:
            audit("mrgrpo.report", b"case %d fail " % index + name_of(outcome))
        index += 1
    audit("mrgrpo.report", b"done %d %d" % (index, elapsed))


def _boot(read):
    """Entry point called by the ``-c`` stub with its exact-length reader of fd 0."""
    import sys

    _main(read, int(sys.argv[1]))


_PRELOAD = (
    "typing", "collections", "re", "math", "itertools", "functools", "heapq", "string", "bisect",
    "copy", "random", "hashlib", "fractions", "statistics", "operator", "resource", "_ctypes",
)


def _zygote(control_fd):
    """A launcher: a fresh interpreter that preloads common modules, then forks one child per job.

    It never sees a job: the parent sends, over the control socket, only the four pipe ends of
    a run (stdin, stdout, stderr, report); the child reads its nonce and job from its own
    stdin. Each child is a copy of this pristine, secret-free state. Replies on the control
    socket: ``P <pid>`` per spawn, ``X <pid> <wait status>`` per exit.
    """
    import importlib
    import posix
    import signal
    import socket
    import sys

    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    control = socket.socket(fileno=control_fd)
    wake_r, wake_w = posix.pipe()
    posix.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    import select

    def reap():
        lines = []
        while True:
            try:
                pid, status = posix.waitpid(-1, posix.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            lines.append(b"X %d %d\n" % (pid, status))
        if lines:
            control.sendall(b"".join(lines))

    while True:
        try:
            ready, _, _ = select.select([control, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            posix.read(wake_r, 4096)
        reap()
        if control not in ready:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(control, 16, 4)
        except OSError:
            posix._exit(0)
        if not message:
            posix._exit(0)
        if len(fds) != 4:
            for fd in fds:
                posix.close(fd)
            continue
        pid = posix.fork()
        if pid == 0:
            _zygote_child(fds, control, wake_r, wake_w)
        for fd in fds:
            posix.close(fd)
        control.sendall(b"P %d\n" % pid)


def _zygote_child(fds, control, wake_r, wake_w):
    import posix
    import signal
    import sys

    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (control.detach(), wake_r, wake_w):
            posix.close(fd)
        posix.setsid()
        for target, fd in zip((0, 1, 2, 3), fds):
            posix.dup2(fd, target)
        posix.closerange(4, 1 << 16)
        if "random" in sys.modules:
            sys.modules["random"].seed()

        def read(n):
            data = b""
            while len(data) < n:
                chunk = posix.read(0, n - len(data))
                if not chunk:
                    posix._exit(70)
                data += chunk
            return data

        _main(read, 3)
        code = 0
    except SystemExit:
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        posix._exit(code)
