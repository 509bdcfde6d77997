"""The error types every layer raises for a user's mistake.

One module, imported by every layer (it imports nothing of mrgrpo's), so the command line can
turn any of these into a one-line message with exit status 2 and no traceback.

* :class:`UserError`: base class; its message names the problem and the fix.
* :class:`ConfigError`: a configuration key, option or value is wrong.
* :class:`UnknownNameError`: a name looked up in a registry (estimator, reward suite, task,
  worked example) is not registered; the message lists the registered names and the closest ones.
* :class:`InputError`: a file or batch the user handed in (JSONL rows, rewards, datasets) is
  malformed; the message names the file, the 1-based row and the field.
* :class:`MissingExtraError`: a feature needs an optional dependency group that is not installed;
  the message is the ``pip install 'mrgrpo[...]'`` line (or ``install``, for data-only packages
  installed with ``--no-deps``).
* :class:`UnsupportedVersionError`: an installed upstream release (e.g. TRL) is outside the range
  mrgrpo supports; the message names the range and the install line.
* :class:`IsolationError`: ``require_isolation=True`` was asked of the code sandbox where it cannot
  isolate (not root, or namespaces refused); the message says what it needs.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "ConfigError",
    "InputError",
    "IsolationError",
    "MissingExtraError",
    "UnknownNameError",
    "UnsupportedVersionError",
    "UserError",
]


class UserError(Exception):
    """A mistake in what the user asked for: printed as one line, never as a traceback."""


class ConfigError(UserError, ValueError):
    """A configuration problem, with a message that names the key and the fix."""


class UnknownNameError(ConfigError):
    """A name that no registry entry has: ``unknown <kind> 'x' (did you mean ...?); available: a, b``.

    Every registry (estimators, reward suites, tasks) raises this one type, so callers catch one
    thing; it is a :class:`ConfigError`, hence a ``ValueError`` for callers that expect one.

    Args:
        kind: what was looked up (``estimator``, ``reward suite``, ``task``).
        name: the name asked for.
        available: the registered names, in the order to list them.
        hint: a last clause, e.g. how to register one or what else is accepted.
        where: the configuration key that held the name (``rewards.suite``), put first.
    """

    def __init__(self, kind: str, name: object, available: Iterable[str], hint: str = "", where: str = "") -> None:
        self.kind, self.name, self.available = kind, name, list(available)
        close = difflib.get_close_matches(str(name), self.available, n=3) if isinstance(name, str) else []
        message = f"unknown {kind} {name!r}"
        if close:
            message += f" (did you mean {', '.join(close)}?)"
        message += f"; available: {', '.join(self.available) or 'none'}"
        if hint:
            message += f"; {hint}"
        super().__init__(f"{where}: {message}" if where else message)


class InputError(UserError, ValueError):
    """Malformed input data (file, row, field, tensor), with a message that says where and why."""


class MissingExtraError(UserError, ImportError):
    """An optional dependency group is missing; the message names the ``pip install`` line."""

    def __init__(self, feature: str, extra: str, missing: str, install: str | None = None) -> None:
        self.feature, self.extra, self.missing = feature, extra, missing
        self.install = install or f"pip install 'mrgrpo[{extra}]'"
        super().__init__(f"{feature} needs the '{extra}' extra ({missing} is not installed): {self.install}")


class UnsupportedVersionError(UserError, ImportError):
    """An installed upstream release is outside mrgrpo's supported range (the message names it)."""


class IsolationError(UserError, RuntimeError):
    """The code sandbox was required to isolate generated code and cannot here (says what it needs)."""
