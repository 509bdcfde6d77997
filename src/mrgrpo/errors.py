"""The error types every layer raises for a user's mistake.

One module, imported by every layer (it imports nothing of mrgrpo's), so the command line can
turn any of these into a one-line message with exit status 2 and no traceback.

* :class:`UserError`: base class; its message names the problem and the fix.
* :class:`ConfigError`: a configuration key, option or value is wrong.
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

__all__ = ["ConfigError", "InputError", "IsolationError", "MissingExtraError", "UnsupportedVersionError", "UserError"]


class UserError(Exception):
    """A mistake in what the user asked for: printed as one line, never as a traceback."""


class ConfigError(UserError, ValueError):
    """A configuration problem, with a message that names the key and the fix."""


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
