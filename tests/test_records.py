"""JSONL records: one reader, and a bad line is never dropped in silence."""

from __future__ import annotations

import pytest

from mrgrpo.errors import InputError
from mrgrpo.records import mean, moving_average, read_jsonl
from mrgrpo.train.report import read_jsonl as read_run_log


def test_lines_in_order_blank_lines_skipped(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n', encoding="utf-8")
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]


def test_a_bad_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"a": 1}\n{"a": \n{"a": 3}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"a\.jsonl:2: not a JSON line"):
        read_jsonl(path)
    with pytest.raises(InputError, match=r":2: "):  # only a cut-off last line is forgiven, not this one
        read_run_log(path)


def test_a_run_log_cut_off_mid_line_reads_up_to_it(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo', encoding="utf-8")
    assert read_run_log(path) == [{"step": 1}, {"step": 2}]
    assert read_jsonl(path, truncated_tail_ok=True) == [{"step": 1}, {"step": 2}]
    with pytest.raises(InputError, match=":3: "):
        read_jsonl(path)
    assert read_run_log(tmp_path / "absent.jsonl") == []
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "absent.jsonl")


def test_mean_and_moving_average():
    assert mean([1, 2, True]) == pytest.approx(4 / 3)
    assert mean([], empty=None) is None
    assert moving_average([1.0, None, 3.0, float("nan")], 2) == [1.0, 1.0, 3.0, 3.0]
