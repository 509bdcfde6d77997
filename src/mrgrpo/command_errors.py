"""How every mrgrpo entry point ends on a user's mistake: one line, exit status 2.

A :class:`~mrgrpo.errors.UserError` raised by any layer reaches the user as one line on
stderr, ``error: <problem and fix>``, and the process exits with status 2 (as click's
``UsageError`` does); no traceback. ``mrgrpo --debug ...`` or ``MRGRPO_DEBUG=1`` re-raises it
instead, so the traceback shows. Ctrl-C exits with status 130 and the word ``interrupted``.

:func:`reporting_user_errors` is the one implementation: the ``mrgrpo`` command group runs
every command inside it, :func:`command` wraps a command function registered on another
Typer app (so it behaves the same there), and the verl launcher runs its ``main`` inside it.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from mrgrpo.errors import UserError

__all__ = ["USER_ERROR_EXIT", "command", "debug_enabled", "one_line", "reporting_user_errors"]

USER_ERROR_EXIT = 2
INTERRUPTED_EXIT = 130
F = TypeVar("F", bound=Callable[..., Any])


def one_line(message: object) -> str:
    """``message`` (an error or text) as one line: its non-blank lines joined with ``; ``."""
    return "; ".join(part.strip() for part in str(message).splitlines() if part.strip()) or "(no message)"


_debug: ContextVar[bool] = ContextVar("mrgrpo_debug", default=False)  # set by an enclosing --debug


def debug_enabled() -> bool:
    """``--debug`` was given to an enclosing :func:`reporting_user_errors` (the ``mrgrpo`` group's),
    or ``MRGRPO_DEBUG`` is set (not ``0``)."""
    return _debug.get() or os.environ.get("MRGRPO_DEBUG", "") not in ("", "0")


@contextmanager
def reporting_user_errors(debug: bool = False) -> Iterator[None]:
    """Run the body; a :class:`UserError` becomes ``error: ...`` on stderr and ``SystemExit(2)``,
    a ``KeyboardInterrupt`` ``SystemExit(130)``. With ``debug`` (``--debug``; also seen by every
    nested call) or ``MRGRPO_DEBUG`` both propagate unchanged."""
    token = _debug.set(True) if debug else None
    try:
        yield
    except UserError as error:
        if debug_enabled():
            raise
        print(f"error: {one_line(error)}", file=sys.stderr, flush=True)
        raise SystemExit(USER_ERROR_EXIT) from None
    except KeyboardInterrupt:
        if debug_enabled():
            raise
        print("interrupted", file=sys.stderr, flush=True)
        raise SystemExit(INTERRUPTED_EXIT) from None
    finally:
        if token is not None:
            _debug.reset(token)


def command(fn: F) -> F:
    """``fn`` run inside :func:`reporting_user_errors` (its signature, hence its options, unchanged)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with reporting_user_errors():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
