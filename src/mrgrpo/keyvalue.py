"""The one reader of ``key=value`` settings typed by a user.

Every place that takes settings on a command line reads them here, by the same rules:

* ``mrgrpo advantages|diagnose --option eps=1e-5`` (:func:`parse_options`: flat keys, each once);
* ``mrgrpo train|compare --set trainer.learning_rate=1e-5`` (:func:`parse_assignment` with
  ``dotted=True``, applied to a config mapping by :func:`mrgrpo.train.config.apply_overrides`);
* a labelled call such as ``corr_grpo(shrinkage=auto;pooling=batch)`` (:func:`parse_call`;
  :func:`split_top_level` splits a comma-separated list of them).

Rules: the key is everything before the first ``=`` (stripped; with ``dotted``, a path of
non-empty parts separated by ``.``); the value is YAML 1.2 (:func:`mrgrpo.yaml_numbers.load_yaml`:
``1e-5`` is a float, ``010`` is ten, ``yes`` stays a string, ``[24, 64]`` is a list, ``null`` is
``None``); an empty value is the empty string. Every mistake is a
:class:`~mrgrpo.errors.ConfigError` whose one line names the flag (``what``), the item and the fix.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from mrgrpo.errors import ConfigError
from mrgrpo.yaml_numbers import load_yaml

__all__ = ["parse_assignment", "parse_call", "parse_options", "parse_value", "split_top_level", "yaml_problem"]


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error's problem and position, in one line (``... at line 1, column 5``)."""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    mark = getattr(error, "problem_mark", None)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else problem


def parse_value(text: str, what: str = "--set") -> Any:
    """A typed value: YAML 1.2 (numbers in any notation, ``true``/``false``, ``null``, lists,
    mappings); an empty (or blank) value is the empty string. ``what`` names the flag in errors."""
    if not text.strip():
        return ""
    try:
        return load_yaml(text)
    except yaml.YAMLError as error:
        raise ConfigError(
            f"{what} value {text!r} is not valid YAML ({yaml_problem(error)}); quote strings with ':' or '#'"
        ) from None


def parse_assignment(item: str, what: str = "--set", dotted: bool = False, example: str = "") -> tuple[str, Any]:
    """``"key=value"`` -> ``(key, value)``. With ``dotted``, every ``.``-separated part of the key
    must be non-empty (``trainer.learning_rate``). ``example`` is shown when ``=`` is missing."""
    key, sep, text = item.partition("=")
    if not sep:
        hint = f" (e.g. {what} {example})" if example else ""
        raise ConfigError(f"{what} {item!r}: expected key=value{hint}")
    key = key.strip()
    if not key or (dotted and not all(part.strip() for part in key.split("."))):
        raise ConfigError(f"{what} {item!r}: empty key" + (" part" if dotted and key else ""))
    return key, parse_value(text, what)


def parse_options(items: Iterable[str], what: str = "--option", example: str = "eps=1e-5") -> dict[str, Any]:
    """Flat ``key=value`` items as a mapping; a key given twice is an error."""
    options: dict[str, Any] = {}
    for item in items:
        key, value = parse_assignment(item, what, example=example)
        if key in options:
            raise ConfigError(f"{what} {key} is given twice; give each key once")
        options[key] = value
    return options


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split ``text`` at ``sep`` outside parentheses: ``"grpo,corr_grpo(a=1;b=2)"`` -> two items.
    Blank items are dropped; items are stripped."""
    items, depth, current = [], 0, ""
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == sep and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += char
    items.append(current.strip())
    return [item for item in items if item]


def parse_call(label: str, sep: str = ";") -> tuple[str, dict[str, Any]]:
    """``"corr_grpo(shrinkage=auto;pooling=batch)"`` -> ``("corr_grpo", {"shrinkage": "auto", "pooling": "batch"})``.

    Options go in parentheses, separated by ``sep``; values follow :func:`parse_value`. The name
    is returned as written (checking it is the caller's: it knows the registry)."""
    name, paren, rest = label.partition("(")
    name = name.strip()
    if not name:
        raise ConfigError(f"{label!r}: no name before the options; write e.g. corr_grpo(shrinkage=auto)")
    if not paren:
        return name, {}
    if not rest.endswith(")"):
        raise ConfigError(f"{label!r}: options go in parentheses, e.g. corr_grpo(shrinkage=auto{sep}pooling=batch)")
    items = [x.strip() for x in rest[:-1].split(sep) if x.strip()]
    return name, parse_options(items, what=f"{label!r}: option", example="shrinkage=auto")
