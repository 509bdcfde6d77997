"""Math data: reasoning-gym splits and question/answer (GSM8K-style) loaders."""

import json

import pytest
from datasets import Dataset

from mrgrpo.data.math_prompt import math_prompt
from mrgrpo.data.qa import final_answer, load_qa
from mrgrpo.data.reasoning_tasks import load_reasoning_gym, worked_reply

CHAIN_SUM = {"chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}}
COLUMNS = ["prompt", "answer", "task", "task_config", "task_entry", "id"]


def questions(rows):
    return [row["prompt"][-1]["content"] for row in rows]


# ----------------------------------------------------------------------------- prompts


def test_a_math_prompt_is_system_then_worked_examples_then_the_question():
    prompt = math_prompt("1 + 1 =", examples=[("2 + 2 =", "<answer>4</answer>")])
    assert prompt == [
        {"role": "system", "content": "Give the final answer inside <answer></answer>."},
        {"role": "user", "content": "2 + 2 ="},
        {"role": "assistant", "content": "<answer>4</answer>"},
        {"role": "user", "content": "1 + 1 ="},
    ]
    assert math_prompt("q", system_prompt="")[0] == {"role": "user", "content": "q"}
    assert "\\boxed{}" in math_prompt("q", answer_format="boxed")[0]["content"]
    assert "<think>" in math_prompt("q", think=True)[0]["content"]


def test_worked_replies_show_the_expression_when_the_task_has_one():
    entry = {"answer": "3", "metadata": {"expression": "4 - 1"}}
    assert worked_reply(entry) == "4 - 1 = 3\n<answer>3</answer>"
    assert worked_reply({"answer": "3", "metadata": {}}) == "<answer>3</answer>"
    assert worked_reply(entry, think=True) == "<think>4 - 1 = 3</think>\n<answer>3</answer>"


# ----------------------------------------------------------------------------- reasoning-gym


def test_the_demo_task_gives_disjoint_reproducible_splits_with_one_worked_example():
    data = load_reasoning_gym(CHAIN_SUM, n_train=60, n_test=20, seed=0)
    train, test = data["train"], data["test"]
    assert (len(train), len(test)) == (60, 20)
    assert train.column_names == COLUMNS
    assert not set(questions(train)) & set(questions(test))
    assert len(set(questions(train))) == 60
    example = train[0]["prompt"][1]["content"]  # the held-out worked example
    assert example not in set(questions(train)) | set(questions(test))
    assert [m["role"] for m in train[0]["prompt"]] == ["system", "user", "assistant", "user"]
    again = load_reasoning_gym(CHAIN_SUM, n_train=60, n_test=20, seed=0)
    assert again["train"]["id"] == train["id"] and again["test"]["id"] == test["id"]
    other = load_reasoning_gym(CHAIN_SUM, n_train=60, n_test=20, seed=1)
    assert other["test"]["id"] != test["id"]


def test_the_test_split_does_not_move_when_the_train_split_grows():
    small = load_reasoning_gym(CHAIN_SUM, n_train=10, n_test=15, seed=3)
    large = load_reasoning_gym(CHAIN_SUM, n_train=80, n_test=15, seed=3)
    assert small["test"]["id"] == large["test"]["id"]


def test_rows_carry_what_the_task_scorer_needs():
    row = load_reasoning_gym(CHAIN_SUM, n_train=1, n_test=0, seed=0)["train"][0]
    entry = json.loads(row["task_entry"])
    assert row["task"] == "chain_sum"
    assert entry["answer"] == row["answer"] and entry["question"] == row["prompt"][-1]["content"]
    assert json.loads(row["task_config"])["max_digits"] == 1
    assert row["id"].startswith("chain_sum/0/")


def test_several_tasks_mix_in_train_and_explicit_examples_are_used_for_all():
    shots = [("What is 2 + 2?", "2 + 2 = 4\n<answer>4</answer>")]
    data = load_reasoning_gym(["chain_sum", "gcd"], n_train=5, n_test=2, seed=0, few_shot=shots)
    assert sorted(set(data["train"]["task"])) == ["chain_sum", "gcd"]
    assert len(data["train"]) == 10 and len(data["test"]) == 4
    assert all(row["prompt"][1:3] == [{"role": "user", "content": shots[0][0]}, {"role": "assistant", "content": shots[0][1]}] for row in data["test"])
    no_shots = load_reasoning_gym("gcd", n_train=2, n_test=0, few_shot=0, system_prompt="")
    assert [m["role"] for m in no_shots["train"][0]["prompt"]] == ["user"]


def test_asking_for_more_distinct_items_than_a_task_can_make_raises():
    tiny = {"chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "allow_negation": False}}
    with pytest.raises(ValueError, match="distinct"):
        load_reasoning_gym(tiny, n_train=5000, n_test=10)


# ----------------------------------------------------------------------------- question/answer data


@pytest.mark.parametrize(
    "raw, final",
    [
        ("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72", "72"),
        ("#### 1,200", "1200"),
        ("  \\frac{1}{2} ", "\\frac{1}{2}"),
        ("a #### b #### 5", "5"),
        ("1,2", "1,2"),  # not a thousands separator
    ],
)
def test_final_answer_strips_gsm8k_working(raw, final):
    assert final_answer(raw) == final


@pytest.fixture
def gsm_file(tmp_path):
    rows = [
        {"question": "Natalia sold 48 clips in April and half as many in May. How many in total?",
         "answer": "In May 48/2 = <<48/2=24>>24.\nIn total 48+24 = <<48+24=72>>72.\n#### 72"},
        {"question": "12 months at 1,200 dollars?", "answer": "12*1200 = <<12*1200=14400>>14400\n#### 14,400"},
        {"question": "Half of one?", "answer": "0.5"},
    ]
    path = tmp_path / "gsm.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def test_a_jsonl_file_becomes_math_verify_graded_rows_with_a_worked_example(gsm_file):
    data = load_qa(str(gsm_file), few_shot=1)
    assert data.column_names == COLUMNS
    assert data["answer"] == ["14400", "0.5"]
    assert data["task"] == ["", ""]  # no task scorer: math-verify grades these rows
    assert data[0]["prompt"][2] == {
        "role": "assistant",
        "content": "In May 48/2 = 24.\nIn total 48+24 = 72.\n<answer>72</answer>",
    }
    assert len(load_qa(str(gsm_file), limit=1)) == 1


def test_an_in_memory_dataset_with_other_column_names():
    rows = Dataset.from_dict({"problem": ["1+1?"], "solution": ["2"]})
    data = load_qa(rows, question_field="problem", answer_field="solution", answer_format="boxed")
    assert data[0]["answer"] == "2" and "\\boxed{}" in data[0]["prompt"][0]["content"]
    with pytest.raises(ValueError, match="no column"):
        load_qa(rows)


def test_qa_rows_are_scored_end_to_end_by_the_math_suite(gsm_file):
    from mrgrpo.rewards import get_suite

    data = load_qa(str(gsm_file))
    correctness = get_suite("math").components[0]
    columns = {k: data[k] for k in ("answer", "task", "task_config", "task_entry")}
    completions = ["<answer>72</answer>", "<answer>14,400</answer>", "<answer>1/2</answer>"]
    assert correctness(data["prompt"], completions, **columns) == [1.0, 1.0, 1.0]
