"""Plain data on the wire between the judge and the candidate (private to the sandbox).

Read as *source* by :mod:`mrgrpo.rewards.sandbox` and compiled into the bootstrap of both
sandbox processes (it imports only ``struct``); also importable, so its tests run in-process.

The only values that cross are **plain data**: ``None``, ``bool``, ``int``, ``float``,
``complex``, ``str``, ``bytes`` and ``list``/``tuple``/``dict``/``set``/``frozenset`` of
these, nested at most :data:`MAX_DEPTH` deep. Format: one tag byte per value, then a
fixed-size payload or a 4-byte big-endian length/count and the items.

:func:`decode` is the judge's **restricted decoder**: it reads bytes, never calls anything
the sender defined, and every value it returns is built by the exact built-in type's own
constructor, so it has that exact type and that type's genuine ``__eq__``/``__sub__``/
``__abs__``/... whatever the sender's process did to itself. Malformed input, unknown tags,
trailing bytes, unhashable keys or too deep nesting raise :class:`WireError`.

:func:`encode` runs in the sender. Exact plain types are sent as they are; instances of
*subclasses* of the plain types (``Counter``, ``namedtuple``, ``IntEnum``, a lying ``float``
subclass...) are sent as the value their base type holds, read with the base type's own
methods, so the receiver gets a genuine base-type value (a lying ``__eq__`` or ``__sub__``
does not travel). Anything else (objects, functions, generators, ``range``, ``Decimal``)
raises :class:`NotPlainData` naming the type. The candidate's copy of :func:`encode` is
untrusted and need not be honest: whatever bytes it sends, the judge decodes plain values.
"""

from __future__ import annotations

import struct

MAX_DEPTH = 200

_Q = struct.Struct(">q")
_D = struct.Struct(">d")
_DD = struct.Struct(">dd")
_I = struct.Struct(">I")


class WireError(ValueError):
    """Bytes that are not a well-formed plain value."""


class NotPlainData(TypeError):
    """A value that is not plain data (its message names the type)."""


def _kind_name(value) -> str:
    kind = type(value)
    module = getattr(kind, "__module__", "") or ""
    name = getattr(kind, "__qualname__", None) or getattr(kind, "__name__", "object")
    if not isinstance(name, str) or not isinstance(module, str):
        return "object"
    return (name if module in ("builtins", "") else module + "." + name)[:80]


def encode(value) -> bytes:
    """``value`` as bytes (raises :class:`NotPlainData`)."""
    kind = type(value)  # a lone float, small int or str (most replies) without the general walk
    if kind is float:
        return b"f" + _D.pack(value)
    if kind is int and -(1 << 63) <= value < (1 << 63):
        return b"i" + _Q.pack(value)
    if kind is str:
        raw = value.encode("utf-8", "surrogatepass")
        return b"s" + _I.pack(len(raw)) + raw
    out = bytearray()
    _encode(value, out, 0)
    return bytes(out)


def _encode(value, out: bytearray, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH} levels (or a container that contains itself)")
    kind = type(value)
    if value is None:
        out += b"N"
    elif kind is bool:
        out += b"T" if value else b"F"
    elif kind is int:
        if -(1 << 63) <= value < (1 << 63):
            out += b"i"
            out += _Q.pack(value)
        else:
            raw = value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)
            out += b"I"
            out += _I.pack(len(raw))
            out += raw
    elif kind is float:
        out += b"f"
        out += _D.pack(value)
    elif kind is str:
        raw = value.encode("utf-8", "surrogatepass")
        out += b"s"
        out += _I.pack(len(raw))
        out += raw
    elif kind is bytes:
        out += b"b"
        out += _I.pack(len(value))
        out += value
    elif kind is list or kind is tuple or kind is set or kind is frozenset:
        out += _CONTAINER_TAG[kind]
        out += _I.pack(len(value))
        for item in value:
            _encode(item, out, depth + 1)
    elif kind is dict:
        out += b"d"
        out += _I.pack(len(value))
        for key, item in value.items():
            _encode(key, out, depth + 1)
            _encode(item, out, depth + 1)
    elif kind is complex:
        out += b"c"
        out += _DD.pack(value.real, value.imag)
    else:
        _encode(_base_value(value), out, depth)


_CONTAINER_TAG = {list: b"l", tuple: b"t", set: b"S", frozenset: b"z"}


def _base_value(value):
    """The base plain type's own reading of a subclass instance, else NotPlainData."""
    if isinstance(value, bool):  # bool cannot be subclassed; kept for clarity
        return bool(value)
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, complex):
        return complex(float.__float__(complex.real.__get__(value)), float.__float__(complex.imag.__get__(value)))
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return bytes.__bytes__(value) if hasattr(bytes, "__bytes__") else bytes(memoryview(value))
    if isinstance(value, dict):
        return {key: item for key, item in dict.items(value)}
    if isinstance(value, list):
        return list(list.__iter__(value))
    if isinstance(value, tuple):
        return tuple(tuple.__iter__(value))
    if isinstance(value, frozenset):
        return frozenset(frozenset.__iter__(value))
    if isinstance(value, set):
        return set(set.__iter__(value))
    raise NotPlainData(f"a {_kind_name(value)} is not plain data (expected None, bool, int, float, complex, str, bytes, or list/tuple/dict/set of these)")


class Budget:
    """What one decoding may spend: ``items`` values (a container counts 16, every set or dict
    insertion 1 more) and CPU time up to ``deadline_ns`` of ``time.process_time_ns``. Past either,
    :class:`WireError`: a reply built to be slow to decode (a set of colliding hashes, millions of
    tiny containers) fails in bounded time and memory."""

    __slots__ = ("items", "deadline_ns", "clock", "tick")

    def __init__(self, items: int, cpu_ns: int):
        import time

        self.clock = time.process_time_ns
        self.items = items
        self.deadline_ns = self.clock() + cpu_ns
        self.tick = 64

    def spend(self, n: int) -> None:
        self.items -= n
        if self.items < 0:
            raise WireError("more values than the judge decodes in one reply")
        self.tick -= n
        if self.tick <= 0:
            self.tick = 64
            if self.clock() > self.deadline_ns:
                raise WireError("the reply takes longer to decode than the judge allows")


def decode(data: bytes, budget: Budget | None = None):
    """The plain value in ``data`` (raises :class:`WireError`); ``budget``: see :class:`Budget`."""
    if type(data) is not bytes:
        raise WireError("expected bytes")
    try:
        value, end = _decode(data, 0, 0, budget)
    except WireError:
        raise
    except (struct.error, IndexError, UnicodeDecodeError, OverflowError, MemoryError, RecursionError) as error:
        raise WireError(f"malformed value ({type(error).__name__})") from None
    if end != len(data):
        raise WireError("trailing bytes after the value")
    return value


MAX_EQUAL_HASHES = 64


def _check_hashes(items: list) -> None:
    """Refuse elements whose hashes repeat more than :data:`MAX_EQUAL_HASHES` times in all: a
    set or dict of them takes quadratic time to build (a hash-collision bomb). Plain data a
    program honestly returns has distinct elements and almost no equal hashes."""
    if len(items) > MAX_EQUAL_HASHES and len(items) - len({hash(item) for item in items}) > MAX_EQUAL_HASHES:
        raise WireError("too many elements with equal hashes")


def _length(data: bytes, at: int) -> tuple[int, int]:
    if at + 4 > len(data):
        raise WireError("truncated length")
    return _I.unpack_from(data, at)[0], at + 4


def _decode(data: bytes, at: int, depth: int, budget: Budget | None):
    if depth > MAX_DEPTH:
        raise WireError(f"nested deeper than {MAX_DEPTH} levels")
    if at >= len(data):
        raise WireError("truncated value")
    tag = data[at]
    at += 1
    if tag == 78:  # N
        return None, at
    if tag == 84:  # T
        return True, at
    if tag == 70:  # F
        return False, at
    if tag == 105:  # i
        if at + 8 > len(data):
            raise WireError("truncated int")
        return _Q.unpack_from(data, at)[0], at + 8
    if tag == 102:  # f
        if at + 8 > len(data):
            raise WireError("truncated float")
        return _D.unpack_from(data, at)[0], at + 8
    if tag == 99:  # c
        if at + 16 > len(data):
            raise WireError("truncated complex")
        real, imag = _DD.unpack_from(data, at)
        return complex(real, imag), at + 16
    if tag in (73, 115, 98):  # I, s, b
        n, at = _length(data, at)
        if at + n > len(data):
            raise WireError("truncated payload")
        raw = data[at : at + n]
        if tag == 73:
            return int.from_bytes(raw, "big", signed=True), at + n
        if tag == 115:
            return raw.decode("utf-8", "surrogatepass"), at + n
        return raw, at + n
    if tag in (108, 116, 83, 122):  # l, t, S, z
        n, at = _length(data, at)
        if n > len(data) - at:  # every item takes at least one byte
            raise WireError("truncated container")
        if budget is not None:
            budget.spend(16 + n)
        items = []
        for _ in range(n):
            item, at = _decode(data, at, depth + 1, budget)
            items.append(item)
        if tag == 108:
            return items, at
        if tag == 116:
            return tuple(items), at
        try:
            _check_hashes(items)
            return (set(items) if tag == 83 else frozenset(items)), at
        except TypeError:
            raise WireError("unhashable set element") from None
    if tag == 100:  # d
        n, at = _length(data, at)
        if 2 * n > len(data) - at:
            raise WireError("truncated dict")
        if budget is not None:
            budget.spend(16 + 2 * n)
        keys, values = [], []
        for _ in range(n):
            key, at = _decode(data, at, depth + 1, budget)
            item, at = _decode(data, at, depth + 1, budget)
            keys.append(key)
            values.append(item)
        try:
            _check_hashes(keys)
            return dict(zip(keys, values)), at
        except TypeError:
            raise WireError("unhashable dict key") from None
    raise WireError(f"unknown tag {tag}")
