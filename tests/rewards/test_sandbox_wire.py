"""The plain-data wire format: round trips with exact types, subclasses reduced to their real
value, everything else refused by name, and a decoder that only ever builds plain values."""

from __future__ import annotations

import collections
import enum
import math
import struct

import pytest

from mrgrpo.rewards.sandbox.child.wire import MAX_DEPTH, NotPlainData, WireError, decode, encode

PLAIN = [
    None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**200, -(3**150), 0.0, -0.0, 1.5, float("inf"), -float("inf"),
    1e-310, 3 + 4j, "", "héllo ✓", "\ud800 lone surrogate", b"", b"\x00\xff", [], (), {}, set(), frozenset(),
    [1, [2, (3, {"k": {4.5, "x"}})]], {(1, 2): [None, b"z"], frozenset({1}): {"a": ()}}, (True, 1, 1.0),
]


def exact_types(value):
    """Every (nested) value's exact type."""
    out = [type(value)]
    if type(value) in (list, tuple, set, frozenset):
        for item in value:
            out += exact_types(item)
    elif type(value) is dict:
        for key, item in value.items():
            out += exact_types(key) + exact_types(item)
    return out


@pytest.mark.parametrize("value", PLAIN, ids=range(len(PLAIN)))
def test_plain_values_round_trip_with_their_exact_types(value):
    back = decode(encode(value))
    assert back == value and exact_types(back) == exact_types(value)


def test_nan_and_negative_zero_survive_bit_for_bit():
    assert math.isnan(decode(encode(float("nan"))))
    assert math.copysign(1.0, decode(encode(-0.0))) == -1.0


class Point(collections.namedtuple("Point", "x y")):
    pass


class Color(enum.IntEnum):
    RED = 1


class LyingFloat(float):
    def __eq__(self, other):
        return True

    def __sub__(self, other):
        return 0.0

    def __float__(self):
        return 99.0


def test_subclasses_travel_as_their_base_types_real_value():
    assert decode(encode(collections.Counter("aab"))) == {"a": 2, "b": 1}
    assert type(decode(encode(collections.OrderedDict(a=1)))) is dict
    point = decode(encode(Point(1, 2)))
    assert (point, type(point)) == ((1, 2), tuple)
    red = decode(encode(Color.RED))
    assert (red, type(red)) == (1, int)
    lie = decode(encode([LyingFloat(2.5)]))  # the base value, not what __float__ claims
    assert lie == [2.5] and type(lie[0]) is float and lie[0] - 1 == 1.5


@pytest.mark.parametrize(
    "value, named",
    [(object(), "object"), (lambda: 1, "function"), ((i for i in ()), "generator"), (range(3), "range"),
     (float, "type"), (NotImplemented, "NotImplementedType"), ([1, {"a": object()}], "object")],
    ids=["object", "function", "generator", "range", "type", "NotImplemented", "nested"],
)
def test_everything_else_is_refused_by_name(value, named):
    with pytest.raises(NotPlainData, match=named):
        encode(value)


def test_containers_that_contain_themselves_or_nest_too_deep_are_refused():
    loop: list = []
    loop.append(loop)
    with pytest.raises(NotPlainData, match="nested deeper"):
        encode(loop)
    deep: list = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(NotPlainData):
        encode(deep)


@pytest.mark.parametrize(
    "data, problem",
    [
        (b"", "truncated"), (b"X", "unknown tag"), (b"i\x00\x01", "truncated int"), (b"NN", "trailing"),
        (b"s" + struct.pack(">I", 10) + b"abc", "truncated"), (b"l" + struct.pack(">I", 2**31), "truncated"),
        (b"d" + struct.pack(">I", 1) + b"l" + struct.pack(">I", 0) + b"N", "unhashable"),
        (b"S" + struct.pack(">I", 1) + b"d" + struct.pack(">I", 0), "unhashable"),
        ((b"l" + struct.pack(">I", 1)) * (MAX_DEPTH + 2) + b"N", "nested deeper"),
        (b"s" + struct.pack(">I", 1) + b"\xff", "malformed"),
    ],
    ids=["empty", "tag", "short-int", "trailing", "short-str", "huge-count", "list-key", "dict-in-set", "deep", "bad-utf8"],
)
def test_the_decoder_rejects_malformed_bytes(data, problem):
    with pytest.raises(WireError, match=problem):
        decode(data)


def test_the_decoder_accepts_only_bytes():
    with pytest.raises(WireError):
        decode(bytearray(b"N"))  # type: ignore[arg-type]


def test_call_arguments_reach_the_candidate_as_fresh_plain_values_of_their_exact_types():
    # through a real run: the judge checks each call's arguments with the wire encoding, then sends
    # a pickle of the decoded value; the candidate gets every plain type exactly, subclasses as
    # their base type, and no two arguments sharing one object
    from mrgrpo.rewards.sandbox import Job, run

    program = (
        "def f(*args, **kwargs):\n"
        "    def types(v):\n"
        "        out = [type(v).__name__]\n"
        "        if type(v) in (list, tuple, set, frozenset):\n"
        "            for x in v: out += types(x)\n"
        "        elif type(v) is dict:\n"
        "            for k, x in v.items(): out += types(k) + types(x)\n"
        "        return out\n"
        "    return [args, kwargs, types(args) + types(kwargs), args[0] is args[1]]\n"
    )
    values = [v for v in PLAIN if v == v]  # NaN aside (compared below bit for bit)
    tests = (
        "import collections, struct\ninf = float('inf')\n"
        "def check(candidate):\n"
        f"    values = {values!r}\n"
        "    for v in values:\n"
        "        got = candidate([1], [1], v, key=v)\n"
        "        assert got[0] == ([1], [1], v) and got[1] == {'key': v}, (v, got)\n"
        "        assert got[3] is False\n"
        "    shared = [1, 2]\n"
        "    assert candidate(shared, shared)[3] is False  # one object twice: two copies there\n"
        "    point = collections.namedtuple('P', 'x y')(1, 2.5)\n"
        "    assert candidate(point, collections.Counter(a=1))[2][:5] == ['tuple', 'tuple', 'int', 'float', 'dict']\n"
        "    bits = candidate(float('nan'), -0.0)[0]\n"
        "    assert struct.pack('>d', bits[0]) == struct.pack('>d', float('nan')) and struct.pack('>d', bits[1]) == struct.pack('>d', -0.0)\n"
    )
    result = run(Job(program, tests, "humaneval", "f"))
    assert result.passed, (result, result.stderr[-2000:])
