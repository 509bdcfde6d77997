"""Procedural code problems: seeded and distinct, split by index, and every reference passes its own
tests in the real sandbox (so `pass` is reachable) while a wrong body fails them."""

from __future__ import annotations

import re

import pytest

from mrgrpo.data.basic_functions import TEMPLATES, basic_function_items, problem
from mrgrpo.tasks.base import TaskSpec
from mrgrpo.tasks.registry import resolve


def test_problems_are_seeded_and_distinct():
    assert problem(3, seed=0) == problem(3, seed=0) and problem(3, seed=0) != problem(3, seed=1)
    items = basic_function_items(60)
    assert len({i["reference"] + "".join(i["test"]) for i in items}) == 60
    assert {i["entry_point"].split("_")[0] for i in items} >= {"add", "is", "times"}


def test_the_task_splits_by_index_and_puts_the_worked_example_first():
    task, spec = resolve(TaskSpec("basic_functions", size=6, eval_size=4, few_shot=1))
    train, test = task.rows(spec, "train", True), task.rows(spec, "eval", True)
    assert len(train) == 6 and len(test) == 4
    assert not {r["task_id"] for r in train} & {r["task_id"] for r in test}
    first = train[0]["prompt"]
    assert [m["role"] for m in first] == ["user", "assistant", "user"] and first[1]["content"].startswith("```python")
    assert all(r["test_format"] == "assert" and r["test"].startswith("assert ") for r in train)


@pytest.mark.slow
def test_every_template_reference_passes_in_the_sandbox_and_a_wrong_body_does_not():
    from mrgrpo.rewards import get_suite

    suite = get_suite("code").select(["pass"])
    items, seen = [], set()
    for item in basic_function_items(200):
        family = re.sub(r"\d+", "K", item["entry_point"])
        if family not in seen:
            seen.add(family)
            items.append(item)
    assert len(items) == len(TEMPLATES)
    completions = [f"```python\n{i['reference']}```" for i in items]
    wrong = [f"```python\ndef {i['entry_point']}(v):\n    return None\n```" for i in items]
    columns = {"test": ["\n".join(i["test"]) for i in items], "test_format": ["assert"] * len(items),
               "entry_point": [i["entry_point"] for i in items], "code_prefix": [""] * len(items)}
    assert suite.components[0].fn([""] * len(items), completions, **columns) == [1.0] * len(items)
    assert suite.components[0].fn([""] * len(items), wrong, **columns) == [0.0] * len(items)


def test_families_restrict_the_templates_and_the_default_draws_from_all_ten():
    from mrgrpo.data.basic_functions import FAMILIES

    assert len(FAMILIES) == len(TEMPLATES) == 10 and "repeat_times" in FAMILIES and "add" in FAMILIES
    assert problem(5) == problem(5, families=None)  # no option: the same set as before it existed
    items = basic_function_items(40, families=["add", "times"])
    assert {re.sub(r"_\d+", "", i["entry_point"]) for i in items} == {"add", "times"}
    everything = basic_function_items(80)
    assert {re.sub(r"_\d+", "_K", i["entry_point"]) for i in everything} >= {"add_K", "repeat_K_times", "count_above_K"}


def test_an_unknown_family_is_one_config_error_naming_the_known_ones():
    from mrgrpo.errors import ConfigError

    task, spec = resolve(TaskSpec("basic_functions", {"families": ["add", "divide"]}, size=2))
    with pytest.raises(ConfigError, match=r"unknown families \['divide'\]; known: \['add'"):
        task.rows(spec, "train", True)
    task, spec = resolve(TaskSpec("basic_functions", {"families": "add"}, size=2))
    with pytest.raises(ConfigError, match="non-empty list"):
        task.rows(spec, "train", True)
