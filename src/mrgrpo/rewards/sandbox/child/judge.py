"""The judge side of a sandbox run (runs in the judge process only).

Read as source by :mod:`mrgrpo.rewards.sandbox.child` and executed as the module
``_mrgrpo_sandbox.judge``. No untrusted code ever runs here: :func:`_judge_main` runs a run's
tests in a fresh namespace and calls the candidate through :class:`_Link`, which accepts plain
data only (decoded under a CPU-time and size budget); :func:`_judge_server` judges one run after
another.
"""

from _pickle import dumps as _pickle

from .io import _read_exact, _recv, _send
from .wire import Budget, NotPlainData, WireError, decode, encode


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

    def __init__(self, to_fd, from_fd, cap, builtins_dict, decode_items=1 << 21, decode_cpu_ns=10**9):
        import select
        import time

        self.to_fd, self.from_fd, self.cap = to_fd, from_fd, cap
        self.elapsed = 0
        self.gone = None
        self.clock = time.perf_counter_ns
        self.poll = select.poll()
        self.poll.register(from_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        self.exceptions = _exceptions(builtins_dict)
        self.decode_items, self.decode_cpu_ns = decode_items, decode_cpu_ns
        # A recording run keeps what the candidate answered (the names it defines, then each call's
        # value or exception, in order) for the null program of efficiency timing; None: not
        # recording, or an answer the null program could not reproduce.
        self.record = None
        self.recorded_bytes = 0
        self.waiting = None  # called with ``poll`` before each wait for a reply (_Report.waiting)

    def warm(self, cpu):
        """Untimed round trips before the timed part (the program is not loaded yet: only the
        sandbox's own server code answers them): the candidate's first wake-ups after its setup
        wait out its scheduling debt here, not inside a timed request. Then ``cpu`` (a
        :class:`_CpuClock`) starts. Only in timing runs (``cpu.settle``): elsewhere the times are
        reported, not scored, and the two round trips are saved."""
        for _ in range(2 if cpu.settle else 0):
            if self.request(b"P") != (b"O", b"N"):
                self.gone = "protocol error"
                raise CandidateGone("the candidate broke the protocol")
        cpu.start = cpu.read()

    def decode(self, payload):
        """A reply's plain value, under this judge's decoding budget (WireError past it)."""
        return decode(payload, Budget(self.decode_items, self.decode_cpu_ns))

    def request(self, kind, payload=b"", timed=False):
        """``(kind, payload)`` of the reply, or raises (CandidateGone, ValueTooLarge).

        ``timed``: add the wall time from sending the request to receiving the whole reply
        to ``elapsed`` (loading the program and the candidate's calls; name resolution, which
        the judge drives, is not counted).
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
            if self.waiting is not None:
                self.waiting(self.poll)
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
            name, message = self.decode(payload)
        except Exception:  # malformed, over budget, or not a pair
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
                return self.decode(payload)
            except WireError as error:
                raise NotPlainData("the candidate sent malformed data: %s" % error) from None
        if kind == b"N":
            try:
                reason = self.decode(payload)
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
        # Sent as a pickle of the plain value the encoding above checked and normalized (fresh
        # objects: no two arguments share one): the candidate reads it with pickle's C loader,
        # which raises no audit event for plain data, as cheaply as any reader of it could (see
        # the candidate's server and docs/sandbox.md, efficiency).
        reply = self.request(b"C", _pickle(decode(payload), 4), timed=True)
        if self.record is None:
            return self.value(*reply)
        return self.recorded(reply)

    def recorded(self, reply):
        """:meth:`value` of a reply, kept in :attr:`record`: ``(True, value)`` or, for an exception
        the candidate raised, ``(False, (name, message))``; anything else stops the recording."""
        self.recorded_bytes += len(reply[1])
        if self.recorded_bytes > RECORD_BYTES:  # too much to keep (the judge holds it until the end)
            self.record = None
            return self.value(*reply)
        try:
            value = self.value(*reply)
        except BaseException as error:
            if reply[0] == b"E" and self.record is not None:
                message = error.args[0] if error.args and type(error.args[0]) is str else ""
                self.record[1].append((False, (_name_of(error).decode("ascii"), message)))
            else:
                self.record = None
            raise
        if self.record is not None:
            self.record[1].append((True, value))
        return value


_OPEN = []  # fds of this run's _CpuClock


def _close_clock():
    import posix

    while _OPEN:
        try:
            posix.close(_OPEN.pop())
        except OSError:
            pass


class _CpuClock:
    """CPU time (ns) the candidate's program has used since this clock started, as the kernel
    counts it (``/proc/<pid>/schedstat``): unaffected by what else the machine runs, and by
    nothing the program does. ``pid``: the candidate's process as the caller started it; the
    program runs in its child when it is the relay of a PID namespace. With ``settle`` (timing
    runs) each reading waits (up to 50 ms) until the program is not on a CPU, so that the count
    is current; otherwise it reads at once (the count may then miss the program's current
    slice, under a scheduler tick). ``used()`` is -1 where ``/proc`` cannot be read."""

    def __init__(self, pid, settle=True):
        import posix
        import time

        self.settle = settle
        self.clock = time.monotonic_ns
        target = pid
        try:
            fd = posix.open("/proc/%d/task/%d/children" % (pid, pid), posix.O_RDONLY | posix.O_CLOEXEC)
            try:
                children = posix.read(fd, 4096).split()
            finally:
                posix.close(fd)
            if children:
                target = int(children[0])
        except (OSError, ValueError):
            pass
        # held open for the run and read again with pread (a fraction of an open per reading);
        # closed by the judge server after the run (_OPEN)
        self.stat = self.schedstat = None
        try:
            if settle:  # its state is read only to settle
                self.stat = posix.open("/proc/%d/stat" % target, posix.O_RDONLY | posix.O_CLOEXEC)
                _OPEN.append(self.stat)
            self.schedstat = posix.open("/proc/%d/schedstat" % target, posix.O_RDONLY | posix.O_CLOEXEC)
            _OPEN.append(self.schedstat)
        except OSError:
            pass
        self.start = None

    def read(self):
        import posix

        if self.schedstat is None:
            return None
        deadline = self.clock() + 50_000_000
        try:
            while self.settle:
                state = posix.pread(self.stat, 4096, 0).rsplit(b")", 1)[1].split()[0]
                if state != b"R" or self.clock() > deadline:
                    break
                posix.sched_yield()
            return int(posix.pread(self.schedstat, 4096, 0).split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def used(self):
        """CPU ns since :attr:`start`; -1 when unknown."""
        if self.start is None:
            return -1
        now = self.read()
        return -1 if now is None else max(0, now - self.start)


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
        name = decode(payload, Budget(1 << 12, 10**8))[0]
    except Exception:
        name = "SyntaxError"
    return _name_of(RemoteError(name, ""))


_FINAL = (b"done", b"error", b"invalid")


class _Report:
    """The verdict lines to the caller (fd 3, in the protocol's order), sent in batches: each
    write wakes the caller, so the lines of a run that goes quickly go out together with its
    last line. A line waits at most 20 ms: longer, and it goes out with the next line, or as soon
    as the judge has waited that long for a reply (:meth:`waiting`), so that a run killed for its
    time still has every case it finished reported. Timing runs (``batch`` False) write each
    line at once, as the judge always did."""

    WAIT_NS = 20_000_000

    def __init__(self):
        import time

        self.clock = time.monotonic_ns
        self.pending = []
        self.since = 0
        self.batch = True

    def __call__(self, line):
        if not self.pending:
            self.since = self.clock()
        self.pending.append(line + b"\n")
        if not self.batch or line.startswith(_FINAL) or self.clock() - self.since > self.WAIT_NS:
            self.flush()

    def waiting(self, poll):
        """Before the judge waits for a reply: what is pending goes out unless the reply comes
        within the 20 ms."""
        if self.pending and not poll.poll(self.WAIT_NS // 1_000_000):
            self.flush()

    def flush(self):
        import posix

        data, self.pending = b"".join(self.pending), []
        try:
            while data:
                data = data[posix.write(3, data):]
        except OSError:
            pass


def _judge_main(read):
    """The trusted side: fds 0 (job), 3 (verdict lines to the caller), 4 (to the candidate), 5 (from it)."""
    report = _Report()
    try:
        _judge_run(read, report)
    finally:
        report.flush()


def _judge_run(read, report):
    import builtins
    import marshal
    import posix

    job = marshal.loads(read(int(read(10))))
    candidate_pid = int(read(10))  # written by the caller once the candidate exists
    posix.close(0)
    report.batch = not job.get("settle")
    link = _Link(4, 5, job["value_cap"], builtins.__dict__, job["decode_items"], job["decode_cpu_ns"])
    link.waiting = report.waiting
    try:
        kind, payload = _recv(5, 4096)
    except (EOFError, OSError, ValueError):
        report(b"error CandidateGone")
        return
    if kind != b"H":
        report(b"error CandidateGone")
        return
    unavailable = payload.startswith(b"unavailable ")
    if unavailable:
        payload = payload[len(b"unavailable ") :]
    report(b"iso " + payload.replace(b" ", b"_").replace(b"\n", b"_")[:200])
    if unavailable:
        report(b"error IsolationUnavailable")
        return
    mode = job["mode"]
    if job.get("record"):
        link.record = ([], [])
    if job.get("seed") is not None:
        _seed(job["seed"])
    link.cpu = _CpuClock(candidate_pid, settle=bool(job.get("settle")))
    try:
        link.warm(link.cpu)
    except BaseException as error:
        report(b"error " + _name_of(error))
        return
    if mode == "stdio":
        cases = job["stdio_cases"]
        loaded = False
        for index, (stdin_text, expected) in enumerate(cases):
            try:
                kind, payload = link.request(b"S", encode(stdin_text), timed=True)
                if kind == b"I":
                    report(b"invalid " + _invalid_name(payload))
                    return
                got = link.recorded((kind, payload)) if link.record is not None else link.value(kind, payload)
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
        used = link.cpu.used()
        _report_record(report, link)
        report(b"done %d %d %d" % (len(cases), link.elapsed, used))
        return
    try:
        kind, payload = link.request(b"L", timed=True)  # loading counts: precomputing at import saves nothing
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
    report(b"loaded %d" % link.elapsed)
    if mode == "none":
        report(b"done 0 0 %d" % link.cpu.used())
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
    # exactly ("f", ""), ("v", value) or ("x", reason): anything else is a broken protocol
    if not all(type(a) is tuple and len(a) == 2 and (a[0] == "v" or (a[0] in ("f", "x") and type(a[1]) is str)) for a in answers):
        report(b"error MalformedReply")
        return
    if link.record is not None:
        link.record[0].extend(zip(wanted, answers))
    for name, answer in zip(wanted, answers):
        kind_ = answer[0]
        if kind_ == "f" and answer[1] == "":
            value = _Remote(link, name)
        elif kind_ == "v":
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
    used = link.cpu.used()
    _report_record(report, link)
    report(b"done %d %d %d" % (index, link.elapsed, used))


#: The largest record a recording run reports (bytes, before hex): larger ones are dropped.
RECORD_BYTES = 256 * 1024


def _report_record(report, link):
    """``record <hex>``: the record of a recording run (see :class:`_Link`) in the wire format,
    if kept (values nested too deep to carry in it are dropped with the record)."""
    if link.record is None:
        return
    try:
        data = encode((tuple(link.record[0]), tuple(link.record[1])))
    except NotPlainData:
        return
    if len(data) <= RECORD_BYTES:
        report(b"record " + data.hex().encode("ascii"))


_SEEDED = [False]  # this run seeded random (a timing run): the next one starts from a fresh seed


def _seed(seed):
    """Seed the judge's ``random`` for a timing run (the same inputs in every timed run of a
    problem: the reference's, its null program's, the candidate's); ``None``: a fresh seed."""
    import random

    random.seed(seed)
    _SEEDED[0] = seed is not None


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
    runs = 0
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
            _close_clock()
            if _SEEDED[0]:  # a timing run's seed does not carry over to the next run
                _seed(None)
            for target in (0, 3, 4, 5):  # the run is over for the caller and the candidate now
                posix.dup2(null, target)
            # The run's cycles collected, what lives on (the judge's imports and caches) is frozen:
            # the next run's collections then traverse only that run's objects, not the whole heap
            # again. A cycle among frozen objects that died later is collected every 256 runs.
            runs += 1
            if runs % 256 == 0:
                gc.unfreeze()
            gc.collect()
            gc.freeze()
        else:
            for fd in fds:
                posix.close(fd)


