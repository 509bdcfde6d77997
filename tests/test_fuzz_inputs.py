"""Fuzz: malformed rollout JSONL and config YAML through the command line.

Every input either fails with exit status 2 and one ``error:`` line (no traceback), or gives
exactly the result an independent reading of the same input gives: never a traceback, never a
silently different result. Inputs: valid batches and configs, then random deletions, type swaps,
extra and missing fields, cut characters, and numbers in every notation.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import mrgrpo
from mrgrpo.cli import app
from mrgrpo.rollouts import METADATA_FIELDS
from mrgrpo.train.defaults import TINY_CONFIG

runner = CliRunner()
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
NAMES = ["correct", "format", "length"]
ESTIMATORS = ["grpo", "gdpo", "corr_grpo"]


def assert_clean_failure_or_success(result, expect_error: bool) -> None:
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if expect_error:
        assert result.exit_code == 2, (result.exit_code, result.output)
        lines = result.stderr.strip().splitlines()
        assert lines and lines[-1].startswith("error: "), result.stderr
        assert sum(line.startswith("error") for line in lines) == 1, result.stderr
    else:
        assert result.exit_code == 0, result.output


# ---------------------------------------------------------------------------------------------
# Rollout JSONL


def number_text(value: float | int, notation: str) -> str:
    """A JSON-or-not spelling of a number: the reader must parse it or reject it, never misread it."""
    if notation == "exp" and isinstance(value, float):
        return f"{value:.17e}"
    if notation == "EXP" and isinstance(value, float):
        return f"{value:.17E}"
    if notation == "bare_dot" and isinstance(value, float) and repr(value).startswith("0."):
        return repr(value)[1:]  # ".5": not JSON
    if notation == "plus":
        return "+" + json.dumps(value)  # not JSON
    if notation == "int" and isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value)


def dump(value, notations) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(json.dumps(k) + ": " + dump(v, notations) for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(dump(v, notations) for v in value) + "]"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return number_text(value, notations.pop() if notations else "json")
    return json.dumps(value)


rewards = st.one_of(
    st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False), st.integers(-5, 5), st.booleans(), st.none()
)
odd_values = st.one_of(
    st.text(max_size=4), st.lists(st.integers(0, 2), max_size=2), st.just({"v": 1}), st.booleans(), st.none(),
    st.just(10**400), st.floats(-1e3, 1e3, allow_nan=False), st.integers(-3, 3),
)


@st.composite
def jsonl_inputs(draw):
    k = draw(st.integers(1, 3))
    rows = []
    for g in range(draw(st.integers(1, 3))):
        gid = draw(st.sampled_from([g, f"g{g}", [g, "x"], {"prompt": g}]))
        for _ in range(draw(st.integers(1, 4))):
            rows.append({"group_id": copy.deepcopy(gid), **{n: draw(rewards) for n in NAMES[:k]}})
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))):
        row = rows[draw(st.integers(0, len(rows) - 1))]
        kind = draw(st.sampled_from(["delete", "swap", "extra", "group"]))
        if kind == "delete" and row:
            del row[draw(st.sampled_from(sorted(row)))]
        elif kind == "swap" and row:
            row[draw(st.sampled_from(sorted(row)))] = copy.deepcopy(draw(odd_values))
        elif kind == "extra":
            row[draw(st.sampled_from(["step", "note", "bonus", "seed"]))] = copy.deepcopy(draw(odd_values))
        elif kind == "group":
            row["group_id"] = draw(st.sampled_from(["g0", 0, [0, "x"], None, True, 1.5]))
    # Mostly JSON spellings (exponent forms, integers for whole floats); now and then one that is not JSON.
    spellings = ["json", "exp", "EXP", "int"] * 8 + ["bare_dot", "plus"]
    notations = draw(st.lists(st.sampled_from(spellings), max_size=40))
    lines = [dump(row, list(notations)) for row in rows]
    if draw(st.integers(0, 7)) == 0:  # cut one character somewhere
        i = draw(st.integers(0, len(lines) - 1))
        j = draw(st.integers(0, max(len(lines[i]) - 1, 0)))
        lines[i] = lines[i][:j] + lines[i][j + 1 :]
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), "")
    components = draw(st.one_of(
        st.none(), st.lists(st.sampled_from(NAMES[:k]), min_size=1, max_size=k, unique=True),
        st.lists(st.sampled_from(NAMES + ["nope", "step"]), min_size=1, max_size=3, unique=True),
    ))
    allow_missing = draw(st.booleans())
    command = draw(st.sampled_from(["advantages", "diagnose"]))
    return "\n".join(lines) + "\n", components, allow_missing, command


class Invalid(Exception):
    pass


def _strict_object(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise Invalid("duplicate key")
    return dict(pairs)


def oracle_batch(text: str, components, allow_missing):
    """An independent reading of the format's rules -> (matrix, group ids, names); Invalid if the
    input breaks one of them."""
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_pairs_hook=_strict_object)
        except ValueError as error:
            raise Invalid(str(error)) from None
        if not isinstance(record, dict) or "group_id" not in record:
            raise Invalid("not an object with a group id")
        if record["group_id"] is None or type(record["group_id"]) in (bool, float):
            raise Invalid("group id type")
        records.append(record)
    if not records:
        raise Invalid("empty")
    is_reward = lambda v: v is None or type(v) in (bool, int, float)  # noqa: E731
    if components is None:
        keys = list(dict.fromkeys(key for record in records for key in record))  # order of first appearance
        numeric = {key for record in records for key, value in record.items() if type(value) in (bool, int, float)}
        names = [key for key in keys if key in numeric and key != "group_id" and key not in METADATA_FIELDS]
        if not names:
            raise Invalid("no components")
    else:
        names = list(components)
        if any(all(name not in record for record in records) for name in names):
            raise Invalid("unknown component")
    matrix = []
    for record in records:
        row = []
        for name in names:
            if name not in record:
                if not allow_missing:
                    raise Invalid("missing")
                row.append(math.nan)
                continue
            value = record[name]
            if not is_reward(value):
                raise Invalid("type")
            if value is not None and type(value) is not bool and abs(value) > 1.7976931348623157e308:
                raise Invalid("range")
            row.append(math.nan if value is None else float(value))
        matrix.append(row)
    keys = [(type(r["group_id"]).__name__, json.dumps(r["group_id"], sort_keys=True)) for r in records]
    groups = [sorted(set(keys), key=keys.index).index(key) for key in keys]
    return matrix, groups, names, records


def _safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_safe(v) for v in value]
    return value


@FUZZ
@given(case=jsonl_inputs())
def test_fuzzed_rollout_jsonl(case, tmp_path_factory):
    text, components, allow_missing, command = case
    folder = tmp_path_factory.mktemp("jsonl")
    src, out = folder / "batch.jsonl", folder / "out.jsonl"
    src.write_text(text)
    args = [command, str(src)]
    if components is not None:
        args += ["--components", ",".join(components)]
    if allow_missing:
        args.append("--allow-missing")
    args += ["-e", ",".join(ESTIMATORS), "--out", str(out)] if command == "advantages" else ["--json"]
    try:
        matrix, groups, names, records = oracle_batch(text, components, allow_missing)
        if command == "advantages":
            expected = {n: mrgrpo.compute_advantages(_f64(matrix), groups, n).tolist() for n in ESTIMATORS}
        else:
            expected = _safe(mrgrpo.diagnose(_f64(matrix), groups, None, None, names))
    except (Invalid, ValueError):
        expected = None
    event("error expected" if expected is None else "a result expected")
    result = runner.invoke(app, args)
    assert_clean_failure_or_success(result, expect_error=expected is None)
    if expected is None:
        assert not out.exists()
        return
    if command == "advantages":
        written = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(written) == len(records)
        for i, (row, record) in enumerate(zip(written, records)):
            assert {k: row[k] for k in record} == record  # the rollout passes through unchanged
            for name in ESTIMATORS:
                assert row[f"advantage_{name}"] == expected[name][i]
    else:
        assert json.loads(result.stdout) == expected


def _f64(matrix):
    import torch

    return torch.tensor(matrix, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------
# Config YAML (``mrgrpo train --check`` validates and prints the resolved config; no model loads)


def float_notations(value: float) -> st.SearchStrategy[str]:
    mantissa, exponent = f"{value:e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    exp = int(exponent)
    forms = [f"{mantissa}e{exp}", f"{mantissa}E{exp:+d}", f"{mantissa}e{exp:+03d}", repr(value), f"{value:.17g}"]
    if repr(value).startswith("0."):
        forms.append(repr(value)[1:])  # .5
    return st.sampled_from(forms)


NUMERIC_LEAVES = {  # path -> (kind, valid values)
    ("trainer", "learning_rate"): "float",
    ("trainer", "temperature"): "float",
    ("trainer", "beta"): "float",
    ("estimator_options", "eps"): "float",
    ("max_steps",): "int",
    ("save_steps",): "int",
    ("task", "size"): "int",
    ("trainer", "per_device_train_batch_size"): "int",
    ("rewards", "weights", "format"): "float",
}
swaps = st.one_of(
    st.text(alphabet="abc1e-.", max_size=5), st.integers(-3, 10), st.floats(-2, 2, allow_nan=False), st.booleans(),
    st.none(), st.lists(st.integers(0, 3), max_size=2), st.just({"x": 1}), st.just(float("inf")), st.just(float("nan")),
)


def leaves(data, prefix=()):
    if isinstance(data, dict) and data:
        for key, value in data.items():
            yield from leaves(value, (*prefix, key))
    else:
        yield prefix, data


def set_at(data, path, value):
    for key in path[:-1]:
        data = data.setdefault(key, {}) if isinstance(data.get(key), dict) or key not in data else data[key]
        if not isinstance(data, dict):
            return False
    data[path[-1]] = value
    return True


@st.composite
def yaml_inputs(draw):
    data = copy.deepcopy(TINY_CONFIG)
    data["estimator"] = draw(st.sampled_from(["grpo", "corr_grpo", "gdpo"]))
    data["estimator_options"] = {}
    spelled: dict[str, str] = {}  # placeholder -> the notation written in the file
    expected_numbers: dict[tuple, float | int] = {}
    for path in draw(st.lists(st.sampled_from(sorted(NUMERIC_LEAVES)), max_size=4, unique=True)):
        if NUMERIC_LEAVES[path] == "float":
            value = draw(st.floats(1e-9, 10, allow_subnormal=False))
            text = draw(float_notations(value))
            number = float(text)
        else:
            number = draw(st.integers(1, 64))
            text = draw(st.sampled_from([str(number), f"0x{number:x}", f"0o{number:o}", f"{number:_d}", f"{number}.0", f"{number}e0"]))
        marker = f"NUMBER{len(spelled)}X"
        if set_at(data, path, marker):
            spelled[marker] = text
            expected_numbers[path] = number
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["delete", "swap", "extra"]))
        paths = [p for p, _ in leaves(data) if p]
        path = draw(st.sampled_from(paths))
        if kind == "delete":
            node = data
            for key in path[:-1]:
                node = node[key]
            del node[path[-1]]
        elif kind == "swap":
            set_at(data, path, copy.deepcopy(draw(swaps)))
        else:
            set_at(data, (*path[:-1], draw(st.sampled_from(["extra_key", "lerning_rate", "seed"]))), copy.deepcopy(draw(swaps)))
        for p in list(expected_numbers):
            if p[: len(path)] == path or path[: len(p)] == p:
                expected_numbers.pop(p)
    text = yaml.safe_dump(data, sort_keys=False)
    for marker, notation in spelled.items():
        text = text.replace(marker, notation)
    return text, data, spelled, expected_numbers


def resolved_value(data, path):
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return KeyError
        data = data[key]
    return data


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=yaml_inputs())
def test_fuzzed_config_yaml(case, tmp_path_factory):
    text, data, spelled, expected_numbers = case
    path = tmp_path_factory.mktemp("yaml") / "run.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["train", "-c", str(path), "--check"])
    event(f"exit {result.exit_code}")
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        return
    resolved = yaml.safe_load(result.stdout)
    # Correct result: every number reads as the number written, in any notation...
    for leaf, number in expected_numbers.items():
        got = resolved_value(resolved, leaf)
        assert got == number and type(got) in (int, float), (leaf, got, number)  # "1" for 1.0 reads as int 1
    # ... and every other value given is the value resolved (same type: no guessing).
    for leaf, value in leaves(data):
        if not leaf or any(isinstance(value, str) and marker in value for marker in spelled):
            continue
        got = resolved_value(resolved, leaf)
        if isinstance(value, float) and isinstance(got, float) and math.isnan(value):
            pytest.fail(f"{leaf}: NaN accepted")
        assert got == value and (type(got) is type(value) or {type(got), type(value)} == {int, float}), (leaf, got, value)


@FUZZ
@given(value=st.floats(1e-12, 1.0, allow_subnormal=False), data=st.data())
def test_fuzzed_option_numbers(value, data, tmp_path_factory):
    """``--option eps=<any notation>`` gives exactly the advantages of ``eps=float(notation)``."""
    text = data.draw(float_notations(value))
    sign = data.draw(st.sampled_from(["", "", "-"]))
    src = tmp_path_factory.mktemp("opt") / "batch.jsonl"
    rows = [{"group_id": g, "a": a, "b": b} for g, a, b in [(0, 1, 0.5), (0, 0, 1), (1, 0.25, 0), (1, 1, 1), (1, 0, 0.75)]]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = src.with_name("out.jsonl")
    result = runner.invoke(app, ["advantages", str(src), "-e", "grpo,corr_grpo", "--option", f"eps={sign}{text}", "--out", str(out)])
    eps = float(sign + text)
    assert_clean_failure_or_success(result, expect_error=eps < 0)
    if eps >= 0:
        matrix = _f64([[r["a"], r["b"]] for r in rows])
        groups = [r["group_id"] for r in rows]
        written = [json.loads(line) for line in out.read_text().splitlines()]
        for name in ("grpo", "corr_grpo"):
            assert [w[f"advantage_{name}"] for w in written] == mrgrpo.compute_advantages(matrix, groups, name, eps=eps).tolist()
