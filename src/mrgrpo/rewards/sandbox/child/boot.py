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
