"""Question/answer math datasets (GSM8K-style) from JSONL, JSON, CSV, parquet or the HF hub.

Bring your own data: any source with a question column and an answer column. GSM8K writes the
worked solution followed by ``#### 42``; only what follows the last ``####`` is kept as the
reference answer (thousands separators removed), so the ``math`` suite grades it with
``math-verify`` (the rows name no reasoning-gym ``task``).

Rows: ``prompt`` (conversational, see :mod:`mrgrpo.data.math_prompt`), ``answer``, ``task``
(``""``), ``task_config`` (``""``), ``task_entry`` (``""``), ``id`` (``"{source}/{row}"``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from datasets import Dataset, load_dataset

from mrgrpo.data.math_prompt import Example, math_prompt
from mrgrpo.errors import InputError
from mrgrpo.rewards.math import format_answer

_LOCAL_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
_CALCULATOR = re.compile(r"<<[^>]*>>")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def final_answer(answer: str) -> str:
    """The final answer of a GSM8K-style solution: the text after the last ``####``, stripped.

    ``"... so she has 1,200 left.\\n#### 1,200"`` -> ``"1200"``; an answer without ``####``
    is only stripped (thousands separators are removed in both cases).
    """
    text = str(answer)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return _THOUSANDS.sub("", text.strip())


def worked_reply(solution: str, answer_format: str = "answer_tag", think: bool = False) -> str:
    """A few-shot reply: the solution's working (GSM8K ``<<...>>`` notes removed), then the answer."""
    text = str(solution)
    working = _CALCULATOR.sub("", text.rsplit("####", 1)[0]).strip() if "####" in text else ""
    answer = final_answer(text)
    if think:
        return format_answer(answer, answer_format, think=working or f"The answer is {answer}.")
    return f"{working}\n{format_answer(answer, answer_format)}" if working else format_answer(answer, answer_format)


def read_source(source: str, split: str = "train", name: str | None = None) -> Dataset:
    """A ``datasets.Dataset`` from a local file (by extension) or a hub id (``load_dataset``)."""
    extension = os.path.splitext(source)[1].lower()
    if os.path.exists(source) and extension in _LOCAL_BUILDERS:
        return load_dataset(_LOCAL_BUILDERS[extension], data_files=source, split="train")
    return load_dataset(source, name, split=split)


def load_qa(
    source: str | Dataset,
    split: str = "train",
    name: str | None = None,
    question_field: str = "question",
    answer_field: str = "answer",
    limit: int | None = None,
    few_shot: int | Sequence[Example] = 0,
    answer_format: str = "answer_tag",
    think: bool = False,
    system_prompt: str | None = None,
) -> Dataset:
    """A GRPO dataset from question/answer rows.

    Args:
        source: a path (``.jsonl``/``.json``/``.csv``/``.parquet``), a hub id such as
            ``"openai/gsm8k"`` (with ``name="main"``), or a ``datasets.Dataset``.
        split, name: the hub split and configuration (ignored for local files).
        question_field, answer_field: the columns to read.
        limit: keep at most this many rows (after the few-shot rows).
        few_shot: the number of leading rows used as worked examples (and dropped from the
            data), or explicit ``(question, reply)`` pairs.
        answer_format, think, system_prompt: as in :func:`mrgrpo.data.math_prompt.math_prompt`.
    """
    rows = source if isinstance(source, Dataset) else read_source(source, split, name)
    missing = [f for f in (question_field, answer_field) if f not in rows.column_names]
    if missing:
        raise InputError(f"dataset has no column(s) {missing}; it has {rows.column_names}")
    label = source if isinstance(source, str) else "dataset"
    n_shots = few_shot if isinstance(few_shot, int) else 0
    if isinstance(few_shot, int):
        examples = [
            (str(rows[i][question_field]), worked_reply(rows[i][answer_field], answer_format, think))
            for i in range(min(n_shots, len(rows)))
        ]
    else:
        examples = list(few_shot)
    end = len(rows) if limit is None else min(len(rows), n_shots + limit)
    records = [
        {
            "prompt": math_prompt(str(rows[i][question_field]), system_prompt, examples, answer_format, think),
            "answer": final_answer(rows[i][answer_field]),
            "task": "",
            "task_config": "",
            "task_entry": "",
            "id": f"{label}/{i}",
        }
        for i in range(n_shots, end)
    ]
    return Dataset.from_list(records)
