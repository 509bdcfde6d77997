"""Bootstrap of the sandbox processes (private; read as *source* by :mod:`mrgrpo.rewards.sandbox`).

Never imported by the trainer. The parent compiles this file and ``_sandbox_wire.py`` once,
marshals the code objects and sends them on the stdin of a fresh ``python -I -S``
interpreter whose ``-c`` stub (``_sandbox_zygote.STUB_PREFIX``) executes them. That
interpreter is either the launcher (:func:`_zygote`, which forks the two processes of every
run from its pristine state) or, without the launcher, one of the two processes itself
(:func:`_boot`).

The two processes of a run:

* the **candidate** (:func:`_candidate_main`): reads the program and its limits from its own
  stdin, isolates itself (see :func:`_isolate`), sets rlimits, installs the audit guards, then
  runs the program and serves the judge's requests on fds 3 (requests in) / 4 (replies out):
  ``L`` load the program, ``R`` resolve names, ``C`` call a function, ``S`` run the program on
  one stdin. Replies carry plain data only (``_sandbox_wire``). It never holds the tests, the
  expected outputs or any fd of the caller's other than its stdin/stdout/stderr.
* the **judge** (:func:`_judge_main`): trusted; no untrusted code ever runs in it. It reads the
  tests (code compiled by the caller), the trusted context (e.g. HumanEval's prompt) and the
  stdin/stdout cases from its stdin, runs the tests in its own namespace with its own pristine
  builtins and modules, calls the candidate over the pipe (timing each call itself), decodes
  each reply with the restricted decoder, compares, and writes the verdict lines on fd 3,
  which only it holds. It is marked non-dumpable (no ptrace, no ``/proc/<pid>/mem``).
"""


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


_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4


def _harden(pdeathsig):
    """Non-dumpable (no ptrace/process_vm_readv by same-uid processes); optional death signal."""
    try:
        libc = _libc()
        libc("prctl", _PR_SET_DUMPABLE, 0, 0, 0, 0)
        if pdeathsig:
            libc("prctl", _PR_SET_PDEATHSIG, 9, 0, 0, 0)
    except Exception:
        pass


def _arrange(sources, first):
    """Move fds ``sources`` to ``first, first + 1, ...`` and close every other fd above them."""
    import fcntl
    import posix

    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 256) for fd in sources]
    for target, fd in enumerate(high, first):
        posix.dup2(fd, target)
    posix.closerange(first + len(high), 1 << 16)


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
    import posix

    data = memoryview(len(payload).to_bytes(4, "big") + kind + payload)
    while data:
        data = data[posix.write(fd, data):]


def _recv(fd, cap):
    """``(kind, payload)`` of one message; EOFError at end; ValueError past ``cap`` bytes."""
    header = _read_exact(fd, 5)
    n = int.from_bytes(header[:4], "big")
    if n > cap:
        raise ValueError(n)
    return header[4:5], _read_exact(fd, n) if n else b""


# --- the candidate ------------------------------------------------------------------------

_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = (
    1, 2, 4, 32, 4096, 16384, 1 << 18,
)
_ROOT = "/tmp/.mrgrpo-root"
_PRIVATE_WORKDIR = "/tmp/work"


def _isolate(job):
    """New network + mount namespaces, a fresh root on a private tmpfs, then chroot into it.

    The new root holds only the standard library (read-only, ``site-packages`` hidden),
    ``/dev/null``/``/dev/zero``/``/dev/urandom`` and a private ``/tmp`` with the working
    directory, all on one size-capped tmpfs that vanishes with the process: the caller's
    files, the datasets, ``/proc`` and every other process's files are out of sight.
    Returns ``(workdir, flags)`` or raises OSError (then back in the original mount
    namespace, the new network namespace kept). The uid drop follows in :func:`_limit`.
    """
    import posix

    try:
        original_ns = posix.open("/proc/self/ns/mnt", posix.O_RDONLY)
    except OSError:
        original_ns = None

    libc = _libc()
    try:
        if libc("unshare", _CLONE_NEWNS | _CLONE_NEWNET) != 0:
            raise OSError("unshare failed")
        try:
            return _new_root(job, libc)
        except OSError:
            if original_ns is not None:  # back to the caller's view of the files for the guards-only run
                libc("setns", original_ns, _CLONE_NEWNS)
            raise
    finally:
        if original_ns is not None:
            posix.close(original_ns)


def _new_root(job, libc):
    import posix

    if libc("mount", None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError("mount --make-rprivate / failed")
    tmp_opts = b"size=%dk,mode=1777" % (job["tmpfs_kb"],)
    if libc("mount", b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV, tmp_opts) != 0:
        raise OSError("tmpfs on /tmp failed")
    root = _ROOT

    def makedirs(path, mode=0o755):
        at = ""
        for part in path.strip("/").split("/"):
            at += "/" + part
            try:
                posix.mkdir(at, mode)
            except FileExistsError:
                pass

    def bind(source, target, readonly=True):
        if libc("mount", source.encode(), target.encode(), None, _MS_BIND | _MS_REC, None) != 0:
            raise OSError("bind mount of %s failed" % source)
        if readonly:
            flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
            libc("mount", None, target.encode(), None, flags, None)

    stdlib = job["stdlib"]
    makedirs(root + stdlib)
    bind(stdlib, root + stdlib)
    hidden = root + stdlib + "/site-packages"
    try:
        posix.stat(hidden)
        libc("mount", b"tmpfs", hidden.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV | _MS_RDONLY, b"size=4k,mode=755")
    except OSError:
        pass
    makedirs(root + "/dev")
    for device in ("/dev/null", "/dev/zero", "/dev/urandom"):
        posix.close(posix.open(root + device, posix.O_CREAT | posix.O_WRONLY, 0o644))
        bind(device, root + device, readonly=False)
    makedirs(root + "/tmp", 0o1777)
    posix.chmod(root + "/tmp", 0o1777)
    posix.mkdir(root + _PRIVATE_WORKDIR, 0o700)
    posix.chown(root + _PRIVATE_WORKDIR, job["uid"], job["uid"])
    posix.chdir(root)
    if libc("chroot", b".") != 0:
        raise OSError("chroot failed")
    return _PRIVATE_WORKDIR, ["netns", "mountns", "chroot"]


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


_GUARDS_ONLY_BLOCKED = frozenset(
    (
        "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function", "ctypes.cdata",
        "ctypes.cdata/buffer", "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at",
    )
)


def _install_guard(workdir, stdlib, guards_only):
    """Audit hook: no processes, signals, sockets, tracing, gc walking, rlimit changes; writes,
    deletions and renames only inside the working directory. With ``guards_only`` (no OS-level
    isolation: the program runs as the caller's uid), also no ``ctypes`` and no reading outside
    the standard library, the working directory and ``/dev/null``/``/dev/urandom`` (so neither
    ``/proc/<pid>/mem`` nor the datasets on disk). Defence in depth: the verdict does not depend
    on it (the candidate never holds the judge's state)."""
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

    def guard(event, args):
        if event in _BLOCKED or (guards_only and event in _GUARDS_ONLY_BLOCKED):
            deny(event)
        if event == "open":
            path, mode, flags = args
            writing = (type_(flags) is int and flags & write_flags) or (
                type_(mode) is str and any(c in mode for c in "wax+")
            )
            if writing and not inside(path):
                deny("writing outside the working directory")
            if guards_only and not readable(path):
                deny("reading outside the standard library and the working directory")
        elif event in _PATH_EVENTS:
            for arg in args:
                if type_(arg) in (str, bytes) and not inside(arg):
                    deny(event + " outside the working directory")

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


def _candidate_main(read):
    """The untrusted side: fds 0 (program, then /dev/null), 1, 2 (captured), 3 (requests), 4 (replies)."""
    import io
    import marshal
    import posix
    import sys

    job = marshal.loads(read(int(read(10))))
    posix.close(0)
    posix.open("/dev/null", posix.O_RDONLY)
    workdir, flags, drop = job["workdir"], [], None
    if job["isolate"]:
        try:
            workdir, flags = _isolate(job)
            drop = job["uid"]
        except OSError:
            if job["require_isolation"]:
                _send(4, b"H", b"unavailable")
                return
            workdir, flags = job["workdir"], []
    posix.chdir(workdir)
    _limit(job, drop)
    if drop is not None:
        flags.append("uid")
    _send(4, b"H", ",".join(flags or ["guards"]).encode())
    _install_guard(workdir, job["stdlib"], guards_only=drop is None)
    source, stdout, stderr = job["program"], sys.stdout, sys.stderr
    del job
    builtins_module = sys.modules["builtins"]
    builtins_dict = builtins_module.__dict__
    snapshot = tuple(builtins_dict.items())
    namespace = {"__name__": "__main__", "__builtins__": builtins_module}
    program = None

    def flush():
        # The program's changes to builtins stay its own: this server's code needs the real ones.
        builtins_dict.clear()
        builtins_dict.update(snapshot)
        for stream in (stdout, stderr):
            try:
                stream.flush()
            except BaseException:
                pass

    while True:
        try:
            kind, payload = _recv(3, 1 << 30)
        except (EOFError, OSError, ValueError):
            flush()
            return
        try:
            if kind == b"L":
                try:
                    program = compile(source, "<program>", "exec", dont_inherit=True, optimize=0)
                except BaseException as error:
                    flush()
                    _send(4, b"I", _error_payload(error))
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
            elif kind == b"C":
                name, args, kwargs = decode(payload)
                try:
                    value = namespace[name](*args, **kwargs)
                except BaseException as error:
                    flush()
                    _send(4, b"E", _error_payload(error))
                    continue
                flush()  # restores the builtins before encoding
                try:
                    data = encode(value)
                except BaseException as error:
                    _send(4, b"N", encode(str(error)[:300]))
                    continue
                _send(4, b"O", data)
            elif kind == b"S":
                if program is None:
                    try:
                        program = compile(source, "<program>", "exec", dont_inherit=True, optimize=0)
                    except BaseException as error:
                        _send(4, b"I", _error_payload(error))
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
                flush()
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


# --- the judge ------------------------------------------------------------------------------

class CandidateGone(Exception):
    """The candidate's process ended (or broke the protocol) before answering."""


class RemoteError(Exception):
    """An exception the candidate reported that is not a built-in exception type."""

    def __init__(self, name, message):
        super().__init__(message)
        self.remote_name = name


class UnsendableArgument(TypeError):
    """The tests passed the candidate something that is not plain data."""


class ValueTooLarge(Exception):
    """The candidate's reply was larger than the judge accepts."""


_NOT_MAPPED = frozenset(("SystemExit", "KeyboardInterrupt", "GeneratorExit", "StopIteration", "StopAsyncIteration"))


_EXCEPTIONS = {}


def _exceptions(builtins_dict):
    """Built-in exception types by name (those a candidate's error may map to); computed once."""
    if not _EXCEPTIONS:
        _EXCEPTIONS.update(
            (k, v) for k, v in builtins_dict.items()
            if type(v) is type and issubclass(v, BaseException) and k not in _NOT_MAPPED
        )
    return _EXCEPTIONS


class _Link:
    """The judge's end of the pipe pair: one request, one reply, timed on the judge's clock."""

    def __init__(self, to_fd, from_fd, cap, builtins_dict):
        import select
        import time

        self.to_fd, self.from_fd, self.cap = to_fd, from_fd, cap
        self.elapsed = 0
        self.gone = None
        self.clock = time.perf_counter_ns
        self.poll = select.poll()
        self.poll.register(from_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        self.exceptions = _exceptions(builtins_dict)

    def request(self, kind, payload=b"", timed=False):
        """``(kind, payload)`` of the reply, or raises (CandidateGone, ValueTooLarge).

        ``timed``: add the wall time from sending the request to receiving the whole reply
        to ``elapsed`` (the candidate's calls; loading and name resolution are not counted).
        """
        if self.gone is not None:
            raise CandidateGone(self.gone)
        if self.poll.poll(0):  # the candidate spoke before being asked, or is gone
            try:
                self.gone = "the candidate wrote before being asked" if _read_exact(self.from_fd, 1) else "ended"
            except (EOFError, OSError):
                self.gone = "ended"
            raise CandidateGone(self.gone)
        start = self.clock()
        try:
            _send(self.to_fd, kind, payload)
            reply = _recv(self.from_fd, self.cap)
        except ValueError:
            self.gone = "reply larger than the limit"
            raise ValueTooLarge("the candidate's reply is larger than %d bytes" % self.cap) from None
        except (EOFError, OSError):
            self.gone = "ended"
            raise CandidateGone("the candidate's process ended") from None
        finally:
            if timed:
                self.elapsed += self.clock() - start
        return reply

    def raise_remote(self, payload):
        try:
            name, message = decode(payload)
        except WireError:
            name, message = "Exception", ""
        if type(name) is not str or type(message) is not str:
            name, message = "Exception", ""
        cls = self.exceptions.get(name)
        if cls is not None:
            try:
                error = cls(message)
            except BaseException:
                error = RemoteError(name, message)
        else:
            error = RemoteError(name, message)
        raise error

    def value(self, kind, payload):
        if kind == b"O":
            try:
                return decode(payload)
            except WireError as error:
                raise NotPlainData("the candidate sent malformed data: %s" % error) from None
        if kind == b"N":
            try:
                reason = decode(payload)
            except WireError:
                reason = ""
            raise NotPlainData(reason if type(reason) is str else "not plain data")
        if kind == b"E":
            self.raise_remote(payload)
        self.gone = "protocol error"
        raise CandidateGone("the candidate broke the protocol")

    def call(self, name, args, kwargs):
        try:
            payload = encode((name, args, kwargs))
        except NotPlainData as error:
            raise UnsendableArgument(str(error)) from None
        return self.value(*self.request(b"C", payload, timed=True))


class _Remote:
    """A function of the candidate, as the tests see it: each call goes over the pipe."""

    __slots__ = ("_link", "_name")

    def __init__(self, link, name):
        self._link, self._name = link, name

    def __call__(self, *args, **kwargs):
        return self._link.call(self._name, args, kwargs)

    def __repr__(self):
        return "<candidate function %s>" % self._name


def _name_of(error):
    name = error.remote_name if isinstance(error, RemoteError) else type(error).__name__
    if type(name) is not str:
        name = "Exception"
    keep = "".join(c if (c.isalnum() or c in "_.") else "_" for c in name)[:80]
    return (keep or "Exception").encode("ascii", "replace")


def _invalid_name(payload):
    try:
        name = decode(payload)[0]
    except Exception:
        name = "SyntaxError"
    return _name_of(RemoteError(name, ""))


def _judge_main(read):
    """The trusted side: fds 0 (job), 3 (verdict lines to the caller), 4 (to the candidate), 5 (from it)."""
    import builtins
    import marshal
    import posix

    def report(line):
        try:
            posix.write(3, line + b"\n")
        except OSError:
            pass

    job = marshal.loads(read(int(read(10))))
    posix.close(0)
    link = _Link(4, 5, job["value_cap"], builtins.__dict__)
    try:
        kind, payload = _recv(5, 4096)
    except (EOFError, OSError, ValueError):
        report(b"error CandidateGone")
        return
    if kind != b"H":
        report(b"error CandidateGone")
        return
    if payload == b"unavailable":
        report(b"error IsolationUnavailable")
        return
    report(b"iso " + payload.replace(b" ", b"_").replace(b"\n", b"_")[:100])
    mode = job["mode"]
    if mode == "stdio":
        cases = job["stdio_cases"]
        loaded = False
        for index, (stdin_text, expected) in enumerate(cases):
            try:
                kind, payload = link.request(b"S", encode(stdin_text), timed=True)
                if kind == b"I":
                    report(b"invalid " + _invalid_name(payload))
                    return
                got = link.value(kind, payload)
            except BaseException as error:
                report(b"case %d fail " % index + _name_of(error))
                continue
            if not loaded:
                loaded = True
                report(b"loaded")
            if type(got) is not str:
                report(b"case %d fail NotPlainData" % index)
                continue
            same = [l.rstrip() for l in got.rstrip().splitlines()] == [l.rstrip() for l in expected.rstrip().splitlines()]
            report(b"case %d ok" % index if same else b"case %d fail WrongAnswer" % index)
        report(b"done %d %d" % (len(cases), link.elapsed))
        return
    try:
        kind, payload = link.request(b"L")
    except BaseException as error:
        report(b"error " + _name_of(error))
        return
    if kind == b"I":
        report(b"invalid " + _invalid_name(payload))
        return
    if kind != b"O":
        try:
            link.value(kind, payload)
        except BaseException as error:
            report(b"error " + _name_of(error))
        return
    report(b"loaded")
    if mode == "none":
        report(b"done 0 0")
        return
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    entry = job["entry_point"]
    try:
        if job["context"] is not None:
            exec(marshal.loads(job["context"]), namespace)
        for name in job["declared"]:
            namespace.pop(name, None)
        exec(marshal.loads(job["tests"]), namespace)
        cases_function = namespace["__mrgrpo_cases__"]
    except BaseException as error:
        report(b"error TestsInvalid_" + _name_of(error))
        return
    wanted = [n for n in job["names"] if n != entry and n not in namespace and n not in builtins.__dict__]
    if entry:
        wanted.append(entry)
    try:
        answers = link.value(*link.request(b"R", encode(tuple(wanted))))
        if type(answers) is not tuple or len(answers) != len(wanted):
            raise CandidateGone("malformed answer")
    except BaseException as error:
        report(b"error " + _name_of(error))
        return
    candidate = None
    for name, answer in zip(wanted, answers):
        kind_ = answer[0] if type(answer) is tuple and answer else "x"
        if kind_ == "f":
            value = _Remote(link, name)
        elif kind_ == "v" and len(answer) == 2:
            value = answer[1]
        else:
            if name == entry:
                report(b"error NameError")
                return
            continue
        if name == entry:
            candidate = value
        namespace[name] = value
    try:
        generator = cases_function(candidate)
    except BaseException as error:
        report(b"error " + _name_of(error))
        return
    index, expected_cases = 0, job["n_cases"]
    while True:
        try:
            outcome = next(generator)
        except StopIteration:
            break
        except BaseException as error:
            report(b"error " + _name_of(error))
            return
        if index >= expected_cases:
            report(b"error UnexpectedYield")
            return
        report(b"case %d ok" % index if outcome is None else b"case %d fail " % index + _name_of(outcome))
        index += 1
    report(b"done %d %d" % (index, link.elapsed))


def _judge_server(control_fd, read):
    """A judge that serves the runs of one caller thread, one at a time, each in a fresh namespace.

    Forked from the launcher's pristine state, it never runs untrusted code, so it stays
    pristine from one run to the next; each run arrives as four pipe ends over ``control_fd``
    (job, report, to-candidate, from-candidate), is judged by :func:`_judge_main` on fds 0/3/4/5,
    and ends with those fds closed (the caller sees the report's end, the candidate its
    requests' end). It exits when the control socket closes; a run that timed out kills it.
    """
    import gc
    import posix
    import socket

    control = socket.socket(fileno=control_fd)
    null = posix.open("/dev/null", posix.O_RDWR)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 16, 8)
        except OSError:
            return
        if not message:
            return
        if len(fds) == 4:
            high = [posix.dup(fd) if fd in (0, 3, 4, 5) else fd for fd in fds]
            for target, fd in zip((0, 3, 4, 5), high):
                posix.dup2(fd, target)
            for fd in set(high) | set(fds):
                if fd not in (0, 3, 4, 5):
                    posix.close(fd)
            try:
                _judge_main(read)
            except BaseException:
                pass
            gc.collect()
        else:
            for fd in fds:
                posix.close(fd)
        for target in (0, 3, 4, 5):
            posix.dup2(null, target)


# --- process entry points -----------------------------------------------------------------

def _boot(read, role):
    """Entry of a run's process started as a new interpreter (no launcher): ``role`` is
    ``judge`` or ``candidate``; ``sys.argv[1:]`` are the fd numbers to move to 3, 4(, 5)."""
    import sys

    _harden(pdeathsig=True)
    _arrange([int(a) for a in sys.argv[1:]], 3)
    if role == "judge":
        import posix

        null = posix.open("/dev/null", posix.O_RDWR)
        posix.dup2(null, 1)
        posix.dup2(null, 2)
        posix.close(null)
        _judge_main(read)
    else:
        _candidate_main(read)


_PRELOAD = (  # common in tests and programs; binascii/zlib/_ctypes need shared libraries the chroot lacks
    "typing", "collections", "re", "math", "itertools", "functools", "heapq", "string", "bisect", "copy",
    "random", "hashlib", "fractions", "statistics", "operator", "resource", "_ctypes", "binascii", "zlib",
    "fcntl", "select",
)


def _zygote(control_fd):
    """A launcher: a fresh interpreter that preloads common modules, then forks the two
    processes of each run from that pristine, secret-free state.

    It never sees a job. Messages on the control socket: ``C`` with the five pipe ends of a
    run's candidate (stdin, stdout, stderr, from-judge, to-judge) forks a candidate; ``K``
    with one socket end forks a judge server (:func:`_judge_server`). Replies: ``P <pid>`` per
    fork, ``X <pid> <wait status>`` per exit. When the control socket closes (the caller
    ended, however it ended), it kills every process it started and exits.
    """
    import gc
    import importlib
    import posix
    import select
    import signal
    import socket
    import sys

    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    _harden(pdeathsig=False)
    _exceptions(sys.modules["builtins"].__dict__)
    gc.collect()
    gc.freeze()  # forked children do not copy the preloaded heap's pages by collecting it
    control = socket.socket(fileno=control_fd)
    wake_r, wake_w = posix.pipe()
    posix.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    live = set()

    def reap():
        lines = []
        while True:
            try:
                pid, status = posix.waitpid(-1, posix.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            live.discard(pid)
            lines.append(b"X %d %d\n" % (pid, status))
        if lines:
            try:
                control.sendall(b"".join(lines))
            except OSError:
                pass

    def shutdown():
        for pid in list(live):
            for kill in (posix.killpg, posix.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        for pid in list(live):
            try:
                posix.waitpid(pid, 0)
            except OSError:
                pass
        posix._exit(0)

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
            message, fds, _, _ = socket.recv_fds(control, 16, 16)
        except OSError:
            shutdown()
        if not message:
            shutdown()
        role = {(b"C", 5): "candidate", (b"K", 1): "judge"}.get((message[:1], len(fds)))
        if role is None:
            for fd in fds:
                posix.close(fd)
            continue
        pid = posix.fork()
        if pid == 0:
            _zygote_child(role, fds, control, wake_r, wake_w)
        live.add(pid)
        for fd in fds:
            posix.close(fd)
        control.sendall(b"P %d\n" % pid)


def _zygote_child(role, fds, control, wake_r, wake_w):
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
        _harden(pdeathsig=True)
        if "random" in sys.modules:
            sys.modules["random"].seed()

        def read(n):
            try:
                return _read_exact(0, n)
            except EOFError:
                posix._exit(70)

        if role == "judge":
            null = posix.open("/dev/null", posix.O_RDWR)
            _arrange([null, null, null, null, null, null, fds[0]], 0)
            _judge_server(6, lambda n: _read_exact(0, n))
        else:
            _arrange(fds, 0)
            _candidate_main(read)
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
