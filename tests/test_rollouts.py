"""Reading rollout JSONL: the component set is explicit, nothing in a later line is dropped or guessed."""

from __future__ import annotations

import json
import math

import pytest

from mrgrpo.errors import InputError
from mrgrpo.rollouts import read_reward_jsonl


def write(path, *rows, raw: str = ""):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + raw)
    return path


def test_components_are_the_union_over_all_lines_and_metadata_is_left_out(tmp_path):
    src = write(
        tmp_path / "b.jsonl",
        {"group_id": "a", "correct": 1, "step": 7, "prompt": "2+2"},
        {"group_id": "a", "correct": 0, "format": 0.5, "step": 7},  # `format` first appears here
    )
    with pytest.raises(InputError, match=r"b\.jsonl:1: component 'format' is missing .*--allow-missing"):
        read_reward_jsonl(src)
    batch = read_reward_jsonl(src, allow_missing=True)
    assert batch.names == ["correct", "format"]  # `step` is metadata, not a reward
    assert batch.rewards[0, 1].isnan() and batch.rewards[1].tolist() == [0.0, 0.5]
    assert "step (metadata" in batch.schema and "prompt (text)" in batch.schema and "union" in batch.schema


def test_booleans_are_zero_one_and_null_is_not_scored(tmp_path):
    src = write(tmp_path / "b.jsonl", {"group_id": 1, "ok": True, "r": None}, {"group_id": 1, "ok": False, "r": 2.5e-1})
    batch = read_reward_jsonl(src)
    assert batch.names == ["ok", "r"]
    assert batch.rewards[:, 0].tolist() == [1.0, 0.0] and math.isnan(batch.rewards[0, 1]) and batch.rewards[1, 1] == 0.25


def test_a_mistyped_field_in_a_later_line_is_an_error_with_its_line_and_field(tmp_path):
    src = write(tmp_path / "b.jsonl", {"group_id": "a", "r": 1}, {"group_id": "a", "r": "0.5"})
    with pytest.raises(InputError, match=r"b\.jsonl:2: field 'r' must be a number, a boolean or null, got text '0.5'"):
        read_reward_jsonl(src)


def test_line_numbers_are_the_file_lines_1_based(tmp_path):
    src = write(tmp_path / "b.jsonl", {"group_id": "a", "r": 1}, raw='\n\n{"group_id": "a", "r": [1]}\n')
    with pytest.raises(InputError, match=r"b\.jsonl:4: field 'r'"):
        read_reward_jsonl(src)
    (tmp_path / "c.jsonl").write_text('{"group_id": "a", "r": 1}\n{"group_id": "a", "r": 1,}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:2: not valid JSON"):
        read_reward_jsonl(tmp_path / "c.jsonl")


def test_explicit_components_unknown_or_missing(tmp_path):
    src = write(tmp_path / "b.jsonl", {"group_id": "a", "c": 1, "step": 3}, {"group_id": "a", "c": 0, "step": 4})
    with pytest.raises(InputError, match=r"component\(s\) \['x'\] appear in no line; fields in the file: c, step"):
        read_reward_jsonl(src, components=["c", "x"])
    with pytest.raises(InputError, match="appear in no line"):  # even with NaN allowed: an all-NaN column is a typo
        read_reward_jsonl(src, components=["c", "x"], allow_missing=True)
    batch = read_reward_jsonl(src, components=["step", "c"])  # metadata only when named
    assert batch.names == ["step", "c"] and batch.rewards.tolist() == [[3.0, 1.0], [4.0, 0.0]]
    assert "as given by --components" in batch.schema


def test_values_beyond_the_float_range_and_duplicate_keys_are_errors(tmp_path):
    (tmp_path / "b.jsonl").write_text('{"group_id": "a", "r": 1e999}\n')
    with pytest.raises(InputError, match=r"b\.jsonl:1: field 'r' is inf, beyond the float range"):
        read_reward_jsonl(tmp_path / "b.jsonl")
    (tmp_path / "c.jsonl").write_text('{"group_id": "a", "r": 1, "r": 2}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:1: field 'r' appears twice"):
        read_reward_jsonl(tmp_path / "c.jsonl")


def test_group_ids_compare_by_type_and_value(tmp_path):
    src = write(tmp_path / "b.jsonl", {"group_id": 1, "r": 1}, {"group_id": "1", "r": 0}, {"group_id": [1], "r": 0},
                {"group_id": 1, "r": 0})
    batch = read_reward_jsonl(src)
    assert batch.group_ids == [0, 1, 2, 0] and batch.group_labels == [1, "1", [1], 1]
    write(tmp_path / "c.jsonl", {"group_id": 1.5, "r": 1})
    with pytest.raises(InputError, match=r"c\.jsonl:1: field 'group_id' \(the group id\) must be"):
        read_reward_jsonl(tmp_path / "c.jsonl")


def test_no_components_at_all(tmp_path):
    src = write(tmp_path / "b.jsonl", {"group_id": "a", "step": 1, "text": "x"})
    with pytest.raises(InputError, match=r"no numeric or boolean reward fields .*step \(metadata"):
        read_reward_jsonl(src)
