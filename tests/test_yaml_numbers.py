"""YAML numbers read as YAML 1.2 writes them, on every path that reads YAML."""

from __future__ import annotations

import math

import pytest

from mrgrpo.yaml_numbers import load_yaml


@pytest.mark.parametrize(
    "text, value",
    [
        ("1e-5", 1e-5), ("1E5", 1e5), ("+1e+5", 1e5), ("-1.5e-3", -1.5e-3), ("2.e4", 2e4), (".5", 0.5),
        ("-.5e-3", -5e-4), ("5.", 5.0), ("1.25", 1.25), ("1_000.5", 1000.5), ("42", 42), ("-7", -7),
        ("010", 10), ("0x1f", 31), ("0o17", 15), ("1_000", 1000), (".inf", math.inf), ("-.inf", -math.inf),
    ],
)
def test_every_number_notation_is_a_number(text, value):
    parsed = load_yaml(text)
    assert parsed == value and type(parsed) is type(value)


def test_nan_and_non_numbers():
    assert math.isnan(load_yaml(".nan"))
    # YAML 1.1 would read these as base-60 80, booleans, or octal: 1.2 keeps them as written.
    for text in ("1:20", "yes", "no", "on", "off", "1e", "e5", "1.2.3", "0b101"):
        assert load_yaml(text) == text
    assert load_yaml("true") is True and load_yaml("False") is False and load_yaml("~") is None
    assert load_yaml('"1e-5"') == "1e-5"  # quoted: a string, as written
    assert load_yaml("{lr: 5e-4, steps: [1e3, 2]}") == {"lr": 5e-4, "steps": [1000.0, 2]}
