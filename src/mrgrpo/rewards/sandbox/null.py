"""The null program of a problem: the harness's own cost, for efficiency timing (runs in the caller).

A timed run counts the program's CPU time from loading to its last reply, and part of that is
the sandbox's, the same for every program: serving each request (decoding the arguments, the
call, encoding the reply) and loading (the trusted context's imports and definitions, which
every completion is assembled after). The *null program* pays exactly that and nothing else:
it is built by the caller from what a passing reference answered in a recording run
(``Result.record``: decoded by the judge, sent in the plain-data wire format, read here with
its restricted decoder), defines the same names, and answers every call
with the reference's recorded answer, in order, so the judge makes the same calls with the
same arguments (timing runs seed the judge's ``random``) and every reply encodes as the
reference's did. Its time, ``t_null``, is what ``mrgrpo.rewards.timing.efficiency`` subtracts
from both sides. It is trusted code of the caller's making: no candidate sees it or its time.

The *bare program* (:func:`bare_program`), built from the same record, serves the pipe from its
own top level with the least work any program must do (one read per request, one write of the
recorded answer encoded beforehand): a program serving its own end of the pipe pays no less
harness time than it, so the null program's time beyond it bounds what such a program can gain
(``mrgrpo.rewards.code``: deducted from efficiency).
"""

from __future__ import annotations

import keyword
import marshal

from mrgrpo.rewards.sandbox.child.wire import Budget, NotPlainData, WireError, decode, encode
from mrgrpo.rewards.sandbox.results import Job

_HEADER = """
import marshal as _mrgrpo_marshal
_mrgrpo_replies = iter(_mrgrpo_marshal.loads({replies!r}))


def _mrgrpo_raise(name, message):
    import builtins
    kind = getattr(builtins, name, None)
    if not (type(kind) is type and issubclass(kind, Exception)):
        kind = type(name, (Exception,), {{}})
    raise kind(message)
"""

_FUNCTION = """

def {name}(*args, **kwargs):
    ok, value = next(_mrgrpo_replies)
    if ok:
        return value
    _mrgrpo_raise(*value)
"""

_STDIO = """
import sys as _mrgrpo_sys
_mrgrpo_case = _mrgrpo_sys.__dict__.get("_mrgrpo_null_case", 0)
_mrgrpo_sys._mrgrpo_null_case = _mrgrpo_case + 1
_mrgrpo_sys.stdout.write({outputs!r}[_mrgrpo_case])
"""


def _name_ok(name: object) -> bool:
    return type(name) is str and name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_mrgrpo")


def null_program(job: Job, record: bytes) -> str | None:
    """The null program's source for ``job`` (the reference's) from its run's ``record``;
    ``None`` where the record cannot be replayed."""
    try:  # the judge's record, read with the restricted decoder: plain data only, bounded work
        answers, replies = decode(record, Budget(1 << 22, 2 * 10**9))
    except (WireError, TypeError, ValueError):
        return None
    if type(answers) is not tuple:
        return None
    if type(replies) is not tuple or not all(type(r) is tuple and len(r) == 2 for r in replies):
        return None
    if job.test_format == "stdio":
        outputs = tuple(value for ok, value in replies)
        if not all(ok is True for ok, _ in replies) or not all(type(o) is str for o in outputs):
            return None
        return _STDIO.format(outputs=outputs)
    context = job.context if job.context and job.program.startswith(job.context.rstrip()) else ""
    parts = [context.rstrip() + "\n" if context else "", _HEADER.format(replies=marshal.dumps(replies))]
    for entry in answers:
        if type(entry) is not tuple or len(entry) != 2 or not _name_ok(entry[0]) or type(entry[1]) is not tuple:
            return None
        name, (kind, value) = entry[0], entry[1]
        if kind == "f":
            parts.append(_FUNCTION.format(name=name))
        elif kind == "v":
            parts.append(f"\n{name} = _mrgrpo_marshal.loads({marshal.dumps(value)!r})\n")
    return "".join(parts)


def null_job(job: Job, record: bytes | None) -> Job | None:
    """The null program of the reference ``job`` as a job with the same tests, or ``None``."""
    program = null_program(job, record) if record else None
    if program is None:
        return None
    return Job(program, job.tests, job.test_format, job.entry_point, job.limits, job.context)


# The bare program's loop: the least a program must do to serve the judge (the request it runs in
# answered from its top level; then per request one read, one write of an answer encoded
# beforehand). Its names start with _mrgrpo (the judge resolves the entry point only).
_BARE = """
from marshal import loads as _mrgrpo_loads
from posix import read as _mrgrpo_read, write as _mrgrpo_write, _exit as _mrgrpo_exit
_mrgrpo_frames = iter(_mrgrpo_loads({frames!r}))
_mrgrpo_named = {named!r}
_mrgrpo_write(4, next(_mrgrpo_frames))
while True:
    _mrgrpo_data = _mrgrpo_read(3, 65536)
    if len(_mrgrpo_data) < 5:
        _mrgrpo_exit(0)
    _mrgrpo_size = 5 + int.from_bytes(_mrgrpo_data[:4], "big")
    while len(_mrgrpo_data) < _mrgrpo_size:
        _mrgrpo_more = _mrgrpo_read(3, _mrgrpo_size - len(_mrgrpo_data))
        if not _mrgrpo_more:
            _mrgrpo_exit(0)
        _mrgrpo_data += _mrgrpo_more
    if _mrgrpo_data[4] == 82:  # R: the names
        _mrgrpo_write(4, _mrgrpo_named)
    else:
        _mrgrpo_write(4, next(_mrgrpo_frames, b""))
"""


def _frame(kind: bytes, payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + kind + payload


def bare_program(job: Job, record: bytes) -> str | None:
    """The *bare program* of ``job`` (the reference's) from its run's ``record``: the trusted
    context, then a top level that serves the judge's pipe itself with the least work any
    program can (one read per request, one write of the reference's answer encoded beforehand:
    no decoding, no call, no encoding). Its time is the least harness cost a program on this
    problem can pay, however it talks to the judge; the null program's time beyond it is what
    a program serving its own pipe could save (``mrgrpo.rewards.code``: efficiency deducts it).
    ``None`` where the record cannot be replayed."""
    try:
        answers, replies = decode(record, Budget(1 << 22, 2 * 10**9))
    except (WireError, TypeError, ValueError):
        return None
    if type(answers) is not tuple or type(replies) is not tuple:
        return None
    frames = []
    for reply in replies:
        if type(reply) is not tuple or len(reply) != 2:
            return None
        ok, value = reply
        try:
            frames.append(_frame(b"O" if ok is True else b"E", encode(value)))
        except NotPlainData:
            return None
    if job.test_format == "stdio":
        named = b""
    else:
        if not all(type(a) is tuple and len(a) == 2 for a in answers):
            return None
        frames.insert(0, _frame(b"O", encode(None)))  # the load request the top level runs in
        named = _frame(b"O", encode(tuple(answer for _, answer in answers)))
    context = job.context if job.context and job.program.startswith(job.context.rstrip()) else ""
    if job.test_format == "stdio":
        context = ""  # a stdio program's context is not loaded apart from it
    return (context.rstrip() + "\n" if context else "") + _BARE.format(frames=marshal.dumps(tuple(frames)), named=named)


def bare_job(job: Job, record: bytes | None) -> Job | None:
    """The bare program of the reference ``job`` as a job with the same tests, or ``None``."""
    program = bare_program(job, record) if record else None
    if program is None:
        return None
    return Job(program, job.tests, job.test_format, job.entry_point, job.limits, job.context)
