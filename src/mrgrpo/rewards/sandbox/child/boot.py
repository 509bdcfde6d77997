"""Entry points of the sandbox processes (runs in them only).

Never imported by the trainer. :mod:`mrgrpo.rewards.sandbox.child` reads the child modules as
source, compiles them once and sends the code objects to a fresh ``python -I -S`` interpreter
whose ``-c`` stub (:data:`mrgrpo.rewards.sandbox.launcher.STUB_PREFIX`) executes each as a
module of the private package ``_mrgrpo_sandbox`` (so their ``from .x import y`` lines resolve
there as they do for a reader). That interpreter is either the launcher (:func:`_zygote`,
which forks from its pristine state a candidate for every run and judge servers that judge
one run after another) or, without the launcher, one of a run's two processes itself
(:func:`_boot`).

The two sides of a run:

* the **candidate** (``candidate.py``): reads the program and its limits from its own stdin,
  isolates itself (``confine.py``), installs the audit guards, then runs the program and
  serves the judge's requests on fds 3 (requests in) / 4 (replies out): ``L`` load the
  program, ``R`` resolve names, ``C`` call a function, ``S`` run the program on one stdin.
  Replies carry plain data only (``wire.py``). It never holds the tests, the expected outputs
  or any fd of the caller's other than its stdin/stdout/stderr.
* the **judge** (``judge.py``): trusted; no untrusted code ever runs in it. It reads the tests
  (code compiled by the caller), the trusted context (e.g. HumanEval's prompt) and the
  stdin/stdout cases from its stdin, runs the tests in its own namespace with its own pristine
  builtins and modules, calls the candidate over the pipe (timing each call itself), decodes
  each reply with the restricted decoder, compares, and writes the verdict lines on fd 3 (a
  Unix socket: no process can reopen it through ``/proc``), which only it holds. It and the
  launcher are non-dumpable before any candidate exists (no ptrace, no ``/proc/<pid>/fd`` or
  ``/proc/<pid>/mem``).
"""

from . import confine
from .candidate import _candidate_main
from .io import _arrange, _harden, _read_exact
from .judge import _exceptions, _judge_main, _judge_server


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
    "fcntl", "select", "ctypes", "struct",
    "socket",  # the launcher's own (send_fds/recv_fds), with _socket and array: loaded before their pages are locked
)


def _zygote(control_fd, userns_fd=-1, stdlib=None):
    """A launcher: a fresh interpreter that preloads common modules, then forks the two
    processes of each run from that pristine, secret-free state.

    It never sees a job. Messages on the control socket: ``C`` with the five pipe ends of a
    run's candidate (stdin, stdout, stderr, from-judge, to-judge) forks a candidate; ``K``
    with one socket end forks a judge server (:func:`_judge_server`). Replies: ``P <pid>`` per
    fork, ``X <pid> <wait status>`` per exit. When the control socket closes (the caller
    ended, however it ended), it kills every process it started and exits.

    ``userns_fd``: the control socket of the candidate launcher (:func:`_candidate_launcher`),
    started here from the same preloaded state with ``stdlib`` (the standard library's path) for
    its prepared root, unless the system refuses what it needs (then that socket just closes
    and the caller sends every candidate here).
    """
    import gc
    import importlib
    import posix
    import sys

    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    _harden(pdeathsig=False)
    confine.warm()
    _exceptions(sys.modules["builtins"].__dict__)
    # The first compile() of source text builds the interpreter's AST node types (~120 classes,
    # over a millisecond of CPU): built here once, every forked candidate inherits them.
    compile("pass", "<warm>", "exec", dont_inherit=True)
    gc.collect()
    gc.freeze()  # forked children do not copy the preloaded heap's pages by collecting it
    confine.lock_mapped_files()  # every page of the files every candidate maps: always cached
    live = set()
    if userns_fd >= 0:
        if stdlib:
            pid = posix.fork()
            if pid == 0:
                _candidate_launcher(userns_fd, control_fd, stdlib)
            live.add(pid)
        posix.close(userns_fd)
    _serve(control_fd, live, _fork_role)


_IMAGE_TRIED = False


def _build_image():
    """The standard library's image for candidates without a private root
    (:func:`~.confine.stdlib_image`), once, on this launcher's first fork of a candidate (the
    candidate launcher, where it runs, serves every candidate with a private root; this launcher
    forks the others); the heap it leaves frozen again, as after the preload."""
    import gc
    import sys

    global _IMAGE_TRIED
    _IMAGE_TRIED = True
    library = getattr(sys.modules.get("os"), "__file__", None)
    if library:
        confine.stdlib_image(library.rpartition("/")[0])
    gc.collect()
    gc.freeze()
    confine.lock_mapped_files()  # the extension modules just loaded, and the libraries they need


def _fork_role(message, fds, control, wake_r, wake_w):
    """The launcher's fork: ``(pid, pid to report)``, or None for a message it does not serve."""
    import posix

    role = {(b"C", 5): "candidate", (b"K", 1): "judge"}.get((message[:1], len(fds)))
    if role is None:
        return None
    if role == "candidate" and confine.IMAGE_PATH is None and not _IMAGE_TRIED:
        _build_image()
    pid = posix.fork()
    if pid == 0:
        _zygote_child(role, fds, control, wake_r, wake_w)
    return pid, pid


def _serve(control_fd, live, fork, after=None, unreported=frozenset()):
    """The loop of a launcher: fork on each message (``fork`` says how), report forks and exits
    (``X`` with the pid it reported for that child), kill everything when the control socket closes.
    ``after(control, wake_r, wake_w)``: called once each fork has been reported (off the caller's
    path); a child in ``unreported`` (a set the caller of this loop keeps) exits unreported."""
    import posix
    import select
    import signal
    import socket

    control = socket.socket(fileno=control_fd)
    wake_r, wake_w = posix.pipe()
    posix.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    reported = {}  # pid -> the pid the caller knows it by

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
            if pid in unreported:  # a spare candidate that never got a run (see _candidate_launcher)
                unreported.discard(pid)
                continue
            lines.append(b"X %d %d\n" % (reported.pop(pid, pid), status))
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
            message, fds, _, _ = socket.recv_fds(control, 512, 16)
        except OSError:
            shutdown()
        if not message:
            shutdown()
        try:
            forked = fork(message, fds, control, wake_r, wake_w)
        except OSError:
            forked = False
        if forked:
            live.add(forked[0])
            reported[forked[0]] = forked[1]
        for fd in fds:
            posix.close(fd)
        if forked is False:  # could not start it as promised: end, and the caller sees why
            shutdown()
        if forked:
            control.sendall(b"P %d\n" % forked[1])
        if after is not None:
            after(control, wake_r, wake_w)


_CLONE_NEWUSER, _CLONE_NEWPID = 0x10000000, 0x20000000


def _candidate_launcher(control_fd, other_fd, stdlib):
    """The launcher of candidates (forked by :func:`_zygote`): the namespaces and the root that
    every candidate would otherwise make for itself, made once.

    Not real root, this process first unshares a user namespace (mapping the caller's uid and
    gid to themselves) and a PID namespace and forks the launcher proper, process 1 of that PID
    namespace, then stays outside as its relay. As real root there is no user namespace and no
    relay (each candidate also drops to a fresh uid of its own). In both, the launcher proper
    forks each candidate into a PID namespace of its own (``unshare(CLONE_NEWPID)`` before the
    fork, ``setns`` back to its own after it), so the candidate is process 1 there, with one fork
    and no relay: it can name no other process (signal, time or probe one).

    Then, once: a network namespace with no interface but a loopback that stays down, an IPC
    namespace, and a mount namespace whose root is the candidates' prepared root
    (:func:`~.confine.prepare_root`: a read-only copy of the standard library in memory, three devices, an empty
    ``/tmp``). Each candidate makes only its own mount namespace (a copy of those few mounts)
    with its own size-capped tmpfs on ``/tmp``, its working directory in it, and drops every
    capability (:func:`~.confine.confine`). Candidates share the network and IPC namespaces
    (and, not root, the user namespace) and nothing in them: each is alone in its PID namespace
    (and, as root, has a uid of its own), none holds a capability, and the seccomp filter refuses every call
    through which they could meet there (any socket but an ``AF_UNIX`` pair, any socket address,
    SysV IPC and POSIX message queues, the key calls of a user namespace's keyrings). So this
    launcher starts only where a child of it can install that filter and make a candidate's
    namespace and tmpfs, the caller sends it no job that refuses namespaces, chroot or seccomp,
    and its candidates never run without the filter.

    Same protocol as :func:`_zygote` on its own socket (``C`` only), the pids reported as the
    caller sees them; first ``R <pid>`` once ready. If anything above is refused, it exits and
    the socket closes: the caller then sends its candidates to :func:`_zygote`.
    """
    import posix
    import socket
    import sys

    code = 70
    try:
        posix.close(other_fd)
        posix.setsid()
        _harden(pdeathsig=True)
        libc = confine._c()[1]
        real_root = confine._real_root()
        own = proc = None
        if not real_root:
            uid, gid = posix.geteuid(), posix.getegid()
            if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWPID) != 0:
                posix._exit(0)
            # /proc/self/*_map of a non-dumpable process belong to root: dumpable while writing them
            libc.prctl(confine._PR_SET_DUMPABLE, 1, 0, 0, 0)
            try:
                confine._write("/proc/self/setgroups", "deny")
                confine._write("/proc/self/uid_map", "%d %d 1" % (uid, uid))
                confine._write("/proc/self/gid_map", "%d %d 1" % (gid, gid))
            finally:
                _harden(pdeathsig=True)
            child = posix.fork()
            if child:
                confine._relay(child)
            _harden(pdeathsig=True)  # ends with its relay (and everything in its PID namespace with it)
            # the caller's /proc, kept for the pids of the candidates as the caller sees them
            proc = posix.open("/proc", posix.O_PATH | posix.O_DIRECTORY | posix.O_CLOEXEC)
        own = posix.open("/proc/self/ns/pid", posix.O_RDONLY | posix.O_CLOEXEC)
        me = int(posix.readlink("/proc/self"))  # as the caller sees it (the caller's /proc)
        if libc.unshare(confine._CLONE_NEWNS | confine._CLONE_NEWNET | confine._CLONE_NEWIPC) != 0:
            posix._exit(0)
        if not confine.prepare_root(stdlib):
            posix._exit(0)
        confine.IN_LAUNCHER, confine.LAUNCHER_REAL_ROOT = True, real_root
        confine.prepare_seccomp(1, private_root=True)  # every candidate here: process 1 of its PID namespace, this root
        confine.install_prefilter()  # installing the candidates' filter then costs a quarter
        if real_root:
            confine.BOUNDING_SET_EMPTY = confine.drop_bounding_set()
        if not _candidate_works():
            posix._exit(0)  # before R: the caller sends its candidates to the launcher itself
        posix.write(control_fd, b"R %d\n" % me)
        live, spares, state, jobs = set(), set(), {}, {}
        pair, unix_stream = sys.modules["_socket"].socketpair, (int(socket.AF_UNIX), int(socket.SOCK_STREAM))
        made = [0]  # spares made: as root each gets the next uid of their range (round it goes)

        def start(fds, control, wake_r, wake_w, spare=None):
            """Fork a candidate into a PID namespace of its own: ``(pid, pid as the caller sees it)``,
            None if refused. With ``spare`` (``(its end of a socket pair, its prepared job)``) and
            no ``fds`` it is a spare."""
            if libc.unshare(_CLONE_NEWPID) != 0:  # never fork a candidate into this PID namespace
                return None
            try:
                pid = posix.fork()
            except OSError:
                pid = -1
            if pid == 0:
                _zygote_child("candidate", fds, control, wake_r, wake_w, spare)
            if libc.setns(own, _CLONE_NEWPID) != 0:  # the next candidate's PID namespace: not this one's
                posix._exit(71)
            if pid < 0:
                return None
            if real_root:  # this launcher is in the caller's PID namespace: the pid is the caller's
                return pid, pid
            host = _caller_pid(pid, proc)
            if host is None:
                try:
                    posix.kill(pid, 9)
                    posix.waitpid(pid, 0)
                except OSError:
                    pass
                return None
            return pid, host

        def fork(message, fds, control, wake_r, wake_w):
            if (message[:1], len(fds)) != (b"C", 5):
                return None
            key = message[1:]
            state["key"] = key
            spare = state.pop("spare", None)
            if spare is not None:
                pid, host, sock, prepared_for = spare
                try:
                    if prepared_for == key:
                        socket.send_fds(sock, [b"J"], fds)
                        spares.discard(pid)  # from now on its exit is reported like any candidate's
                        return pid, host
                except OSError:  # gone: a candidate is forked instead
                    pass
                finally:
                    sock.close()
                if pid in spares:  # prepared for other limits, or dying: killed, reaped unreported
                    try:  # (once reaped, its pid is no longer its own: never signalled then)
                        posix.kill(pid, 9)
                    except OSError:
                        pass
            started = start(fds, control, wake_r, wake_w)
            return False if started is None else started

        def refill(control, wake_r, wake_w):
            # The next candidate, forked and confined now, for the limits of the last run (the
            # caller sends them with each candidate it asks for, ``C<key>``): after this one's
            # pid went to the caller, so the fork, the interpreter's own work after it and the
            # whole confinement are done while the current run goes on, not on the next one's way.
            if "spare" in state or "key" not in state:
                return
            # Every page this loop writes after a fork is copied (the spare still shares it), so the
            # loop keeps to little: the job of a key parsed once, C-level sockets.
            key = state["key"]
            if key not in jobs:
                jobs.clear()  # one key at a time in practice: never a growing cache
                jobs[key] = _spare_job(key, stdlib)
            if jobs[key] is None:
                return
            made[0] += 1
            prepared = dict(jobs[key], uid=_SPARE_UIDS + made[0] % (1 << 24) if real_root else None)
            ours, theirs = pair(*unix_stream)
            try:
                started = start(None, control, wake_r, wake_w, (theirs.fileno(), prepared))
            finally:
                theirs.close()
            if started is None:
                ours.close()
                return
            live.add(started[0])
            spares.add(started[0])
            state["spare"] = (started[0], started[1], ours, key)

        _serve(control_fd, live, fork, refill, spares)
    except BaseException:
        pass
    posix._exit(code)


def _candidate_works():
    """Whether a child of the candidate launcher can make a candidate's mount namespace and tmpfs
    and install the candidates' seccomp filter."""
    import posix

    pid = posix.fork()
    if pid == 0:
        try:
            _, libc, _ = confine._c()
            ok = libc.unshare(confine._CLONE_NEWNS) == 0 and libc.mount(
                b"tmpfs", confine._LAUNCHER_TMP.encode(), b"tmpfs", confine._MS_NOSUID | confine._MS_NODEV,
                b"size=64k,mode=1777") == 0
            posix._exit(0 if ok and confine._seccomp(private_root=True) else 1)
        finally:
            posix._exit(1)
    while True:
        try:
            return posix.waitpid(pid, 0)[1] == 0
        except InterruptedError:
            continue
        except OSError:
            return False


def _caller_pid(pid, proc):
    """The pid of this process's child ``pid`` as the caller knows it (through a pidfd's fdinfo in
    the caller's /proc, ``proc`` an fd of it), or None."""
    import posix

    try:
        fd = posix.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
    try:
        info = posix.open("self/fdinfo/%d" % fd, posix.O_RDONLY, dir_fd=proc)
        try:
            text = posix.read(info, 4096)
        finally:
            posix.close(info)
    except OSError:
        return None
    finally:
        posix.close(fd)
    for line in text.split(b"\n"):
        if line.startswith(b"Pid:"):
            got = int(line.split()[1])
            return got if got > 1 else None
    return None


# Uids of the spare candidates of a candidate launcher run as real root (one each, reused only
# after 2**24 spares, long gone by then): a range of their own, apart from the caller's per-run
# uids (2,000,000 to 2,000,000 + 2**24).
_SPARE_UIDS = 3_000_000_000


def _spare_job(key, stdlib):
    """The job a spare candidate is confined for, from the caller's key
    ``tmpfs_kb,tmpfs_inodes,cpu_s,fsize,nofile,address_space,disk_files;refused layers`` (None if it is
    not one), but its uid (each spare's own: the caller of this sets it)."""
    try:
        numbers, refuse = key.decode("ascii").split(";")
        values = [int(v) for v in numbers.split(",")]
    except ValueError:
        return None
    if len(values) != len(confine.PREPARED) - 2 or min(values) < 0:
        return None
    job = dict(zip(confine.PREPARED[2:], values))
    job.update(refuse=tuple(r for r in refuse.split(",") if r), stdlib=stdlib, workdir="")
    return job


def _prepare(job):
    """A spare candidate's confinement, before it has a run: ``(job, working directory, layers)``
    for :func:`~.candidate._candidate_main`. (No warm-up compile here: the program's own compile
    takes the same copy-on-write faults again, so a warm-up only adds CPU.)"""
    import gc

    gc.disable()  # the sandbox's own setup: see _candidate_main
    workdir, layers = confine.confine(job)
    return job, workdir, layers


def _await_run(spare):
    """A spare candidate: the five pipe ends of its run, from the candidate launcher (exits when
    the launcher closes the socket instead)."""
    import posix
    import socket

    sock = socket.socket(fileno=spare)
    try:
        message, fds, _, _ = socket.recv_fds(sock, 16, 8)
    except OSError:
        posix._exit(0)
    finally:
        sock.close()
    if message != b"J" or len(fds) != 5:
        posix._exit(0)
    return fds


def _zygote_child(role, fds, control, wake_r, wake_w, spare=None):
    """A forked judge server or candidate. ``spare``: ``(socket fd, job)`` of a candidate forked
    before its run (``fds`` None): it confines itself for that job's limits, then waits on its
    end of the socket for the run's five pipe ends, then runs (the job it reads must match)."""
    import posix
    import signal
    import sys

    code = 1
    try:
        signal.set_wakeup_fd(-1)
        # the C module's signal(): the wrapper's enum conversion of the old handler costs ~0.1 ms here
        c_signal = sys.modules["_signal"]
        c_signal.signal(c_signal.SIGCHLD, c_signal.SIG_DFL)
        for fd in (control.detach(), wake_r, wake_w):
            posix.close(fd)
        posix.setsid()
        _harden(pdeathsig=True)  # a spare too: it ends with the launcher that would hand it a run
        # (random reseeds itself in a forked child: its own at-fork hook)

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
            prepared = None
            if spare is not None:
                prepared = _prepare(spare[1])
                fds = _await_run(spare[0])
            image = None
            if confine.IMAGE_PATH is not None:
                # a description of the image of its own: the launcher's, which every candidate
                # would share, has one file offset that one could move and another read
                image = posix.open(confine.IMAGE_PATH, posix.O_RDONLY | posix.O_CLOEXEC)
            _arrange(fds, 0, None if image is None else (image, confine.IMAGE_FD))
            _candidate_main(read, prepared)
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
