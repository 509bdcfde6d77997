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
reference's did. Its time, ``t_null``, is what ``mrgrpo.rewards.code.efficiency`` subtracts
from both sides. It is trusted code of the caller's making: no candidate sees it or its time.
"""

from __future__ import annotations

import keyword
import marshal

from mrgrpo.rewards.sandbox.child.wire import Budget, WireError, decode
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
