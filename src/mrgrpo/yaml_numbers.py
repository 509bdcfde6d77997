"""YAML reading in which numbers and booleans read as YAML 1.2 writes them.

PyYAML implements YAML 1.1, which misreads several everyday spellings: ``1e-5`` and ``5E+3``
(no dot) are *strings*, so a learning rate written the usual way reaches torch as text;
``010`` is octal 8 and ``1:20`` is the base-60 number 80; ``yes``/``no``/``on``/``off`` are
booleans. :class:`YamlLoader` resolves plain scalars by YAML 1.2's core schema instead:

* floats: ``1e-5``, ``1.5E+3``, ``2.e4``, ``.5``, ``5.``, ``-1.25``, ``.inf``, ``-.inf``, ``.nan``;
* ints: ``42``, ``-7``, ``0x1f``, ``0o17`` (``010`` is ten); ``1_000`` is accepted as 1000;
* booleans: only ``true``/``false`` (any case style); ``yes``/``no`` stay strings, so a
  boolean setting written ``yes`` is reported instead of guessed;
* ``null``, ``~`` and an empty value are null; everything else (timestamps included) as in
  :func:`yaml.safe_load`.

Every YAML path of mrgrpo (config files, ``--set``, ``-o`` estimator options, run
directories) reads through :func:`load_yaml`.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["YamlLoader", "load_yaml"]

_FLOAT = re.compile(
    r"""^(?:
        [-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+   # 1e-5, 1.5E+3, 2.e4
      | [-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?         # .5, -.5e-3
      | [-+]?[0-9][0-9_]*\.[0-9_]*                       # 5., 1.25
      | [-+]?\.(?:inf|Inf|INF)
      | \.(?:nan|NaN|NAN)
    )$""",
    re.X,
)
_INT = re.compile(r"^(?:[-+]?[0-9][0-9_]*|[-+]?0x[0-9a-fA-F_]+|[-+]?0o[0-7_]+)$")
_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_TAGS = {"bool", "int", "float"}


class YamlLoader(yaml.SafeLoader):
    """:class:`yaml.SafeLoader` with YAML 1.2 core-schema numbers and booleans."""


YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag.rsplit(":", 1)[-1] not in _TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
YamlLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))
YamlLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
YamlLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def _construct_int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    text = str(loader.construct_scalar(node)).replace("_", "")
    sign = -1 if text.startswith("-") else 1
    text = text.lstrip("+-")
    if text[:2].lower() == "0x":
        return sign * int(text[2:], 16)
    if text[:2].lower() == "0o":
        return sign * int(text[2:], 8)
    return sign * int(text, 10)


YamlLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` with YAML 1.2 numbers and booleans (``1e-5`` is the float ``1e-05``)."""
    return yaml.load(text, Loader=YamlLoader)  # noqa: S506 - a SafeLoader subclass
