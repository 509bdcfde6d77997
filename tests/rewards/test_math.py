"""The math suite: correctness (task scorer / math-verify), format, graded length."""

import pytest

from mrgrpo.data.reasoning_tasks import load_reasoning_gym
from mrgrpo.rewards import get_suite
from mrgrpo.rewards.math import (
    extract_answer,
    format_answer,
    format_ok,
    graded_length,
    length_reward,
)

REWARD_COLUMNS = ("answer", "task", "task_config", "task_entry")
# Several reasoning-gym tasks with numeric, fractional, factor-list and count answers.
DEMO_TASK = {"chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}}
TASKS = {
    "chain_sum": {},
    "basic_arithmetic": {},
    "simple_equations": {},
    "fraction_simplification": {},
    "leg_counting": {},
    "products": {},
    "gcd": {},
    "prime_factorization": {},
}


def columns(rows):
    return {name: rows[name] for name in REWARD_COLUMNS}


def score(component, completions, rows):
    return component([None] * len(completions), completions, **columns(rows))


def wrong_answers(rows):
    """For each item, the answer of another item of its task whose answer differs."""
    wrong = []
    for task, answer in zip(rows["task"], rows["answer"]):
        others = [a for t, a in zip(rows["task"], rows["answer"]) if t == task and a != answer]
        wrong.append(others[0])
    return wrong


@pytest.fixture(scope="module")
def items():
    data = load_reasoning_gym(TASKS, n_train=200, n_test=50, seed=7)
    return data["train"].to_dict(), data["test"].to_dict()


# ----------------------------------------------------------------------------- reading answers


def test_the_answer_is_read_from_the_last_answer_tag_or_boxed():
    assert extract_answer("x <answer> 3 </answer> y <answer>4</answer>") == "4"
    assert extract_answer("no tags, 4") is None
    assert extract_answer("<answer>  </answer>") is None
    assert extract_answer("so \\boxed{\\frac{1}{2}} and \\boxed{7}", "boxed") == "7"
    assert extract_answer("\\boxed{\\frac{1}{2}}", "boxed") == "\\frac{1}{2}"
    assert extract_answer("\\boxed{unclosed", "boxed") is None
    with pytest.raises(ValueError, match="answer_format"):
        extract_answer("x", "xml")


@pytest.mark.parametrize(
    "text, ok",
    [
        ("<answer>4</answer>", True),
        ("2 + 2 = 4\n<answer>4</answer>\n", True),  # working before the tag is fine
        ("<answer>4</answer> because", False),  # nothing may follow the answer
        ("<answer>4</answer><answer>4</answer>", False),  # once
        ("</answer>4<answer>", False),  # in order
        ("<answer> </answer>", False),  # not empty
        ("4", False),
    ],
)
def test_format_answer_tag(text, ok):
    assert format_ok(text) is ok


@pytest.mark.parametrize(
    "text, ok",
    [
        ("<think>2+2</think><answer>4</answer>", True),
        ("<think>2+2</think>\n<answer>4</answer>", True),
        ("<answer>4</answer>", False),  # think required
        ("<think> </think><answer>4</answer>", False),
        ("<think>a</think> so <answer>4</answer>", False),  # only whitespace between
        ("<think>a</think><think>b</think><answer>4</answer>", False),
        ("pre <think>a</think><answer>4</answer>", False),
    ],
)
def test_format_with_think(text, ok):
    assert format_ok(text, think=True) is ok


def test_format_boxed():
    assert format_ok("so the answer is \\boxed{4}.", "boxed")
    assert not format_ok("\\boxed{4} or \\boxed{5}", "boxed")
    assert not format_ok("\\boxed{}", "boxed")
    assert format_ok("<think>x</think>\\boxed{4}", "boxed", think=True)


# ----------------------------------------------------------------------------- correctness


def test_reference_answers_score_1_and_wrong_answers_0_on_every_generated_item(items):
    # Acceptance: every item of the tasks used (8 tasks x 250 items), answers read from the format.
    correctness = get_suite("math").components[0]
    for rows in items:
        n = len(rows["answer"])
        assert score(correctness, [format_answer(a) for a in rows["answer"]], rows) == [1.0] * n
        # a wrong answer: another item's answer of the same task
        assert score(correctness, [format_answer(a) for a in wrong_answers(rows)], rows) == [0.0] * n
        assert score(correctness, [format_answer("banana") for _ in rows["answer"]], rows) == [0.0] * n
        # the right answer outside the requested format is not read
        assert score(correctness, list(rows["answer"]), rows) == [0.0] * n
    assert len(set(items[0]["task"])) == len(TASKS)


def test_every_question_of_the_demo_task_is_graded_right():
    # The demo config (2 terms, 1 digit) has exactly 200 distinct questions: 1 held-out
    # worked example, 199 in the splits, all of them checked.
    data = load_reasoning_gym(DEMO_TASK, n_train=150, n_test=49, seed=0)
    correctness = get_suite("math").components[0]
    for rows in (data["train"].to_dict(), data["test"].to_dict()):
        n = len(rows["answer"])
        assert score(correctness, [format_answer(a) for a in rows["answer"]], rows) == [1.0] * n
        assert score(correctness, [format_answer(a) for a in wrong_answers(rows)], rows) == [0.0] * n


def test_boxed_and_conversational_completions(items):
    rows = items[1]
    correctness = get_suite("math", answer_format="boxed").components[0]
    completions = [[{"role": "assistant", "content": f"Done: \\boxed{{{a}}}"}] for a in rows["answer"]]
    assert score(correctness, completions, rows) == [1.0] * len(completions)


def test_partial_credit_keeps_the_task_score(items):
    index = items[0]["task"].index("chain_sum")
    rows = {k: v[index : index + 1] for k, v in items[0].items()}
    answer = rows["answer"][0]
    # reasoning-gym's default scorer credits a reference found inside a longer answer
    partial = get_suite("math", partial_credit=True).components[0]
    assert score(partial, [format_answer(answer + "1")], rows)[0] == pytest.approx(len(answer) / (len(answer) + 1))
    binary = get_suite("math").components[0]
    assert score(binary, [format_answer(answer + "1")], rows) == [0.0]


def test_rows_without_a_task_are_graded_by_math_verify():
    correctness = get_suite("math").components[0]
    rows = {"answer": ["72", "\\frac{1}{2}", "14400", "3"]}
    good = ["<answer>72</answer>", "<answer>0.5</answer>", "<answer>14,400</answer>", "<answer>$3$</answer>"]
    bad = ["<answer>71</answer>", "<answer>1/3</answer>", "<answer>1440</answer>", "<answer>three?</answer>"]
    assert correctness([None] * 4, good, **rows) == [1.0] * 4
    assert correctness([None] * 4, bad, **rows) == [0.0] * 4
    assert correctness([None] * 4, bad, answer=rows["answer"], task=[""] * 4, task_config=[""] * 4, task_entry=[""] * 4) == [0.0] * 4


def test_correctness_needs_the_answer_column():
    with pytest.raises(ValueError, match="'answer' column"):
        get_suite("math").components[0]([None], ["<answer>1</answer>"])


# ----------------------------------------------------------------------------- length


@pytest.mark.parametrize(
    "n, expected",
    [
        (0, 1.0), (1023, 1.0), (1024, 1.0),  # at or under lo: 1
        (1025, 1023 / 1024), (1536, 0.5), (2047, 1 / 1024),  # linear between: (hi - n) / (hi - lo)
        (2048, 0.0), (2049, 0.0), (10_000, 0.0),  # at or over hi: 0
    ],
)
def test_graded_length_at_and_around_the_sa_mrpo_thresholds(n, expected):
    assert graded_length(n, (1024, 2048)) == expected


@pytest.mark.parametrize("n, expected", [(23, 1.0), (24, 1.0), (25, 39 / 40), (44, 0.5), (63, 1 / 40), (64, 0.0), (65, 0.0)])
def test_length_component_counts_whitespace_tokens_by_default(n, expected):
    component = get_suite("math", length_thresholds=(24, 64)).components[2]
    assert component([None], [" ".join(["w"] * n)]) == [expected]


class CharTokenizer:
    """One token per character; a BOS token that must not be counted."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": ([0] if add_special_tokens else []) + [ord(c) for c in text]}


def test_length_component_counts_with_the_policy_tokenizer_when_given():
    component = length_reward((4, 8), tokenizer=CharTokenizer())
    texts = ["abcd", "abcde", "abcdef", "abcdefg", "abcdefgh", [{"role": "assistant", "content": "abcdef"}]]
    assert component([None] * 6, texts) == [1.0, 0.75, 0.5, 0.25, 0.0, 0.5]


def test_length_thresholds_must_increase():
    with pytest.raises(ValueError, match="lo < hi"):
        length_reward((64, 24))


# ----------------------------------------------------------------------------- the suite


def test_math_suite_defaults():
    suite = get_suite("math")
    assert suite.names == ["correctness", "format", "length"]
    assert suite.weights == (1.0, 0.5, 0.5)
    assert suite.reward_ranges == [(0.0, 1.0)] * 3
    assert get_suite("math", weights={"length": 0.0}).weights == (1.0, 0.5, 0.0)


def test_length_if_correct_grants_length_only_to_correct_rollouts():
    suite = get_suite("math", length_thresholds=(2, 4), length_if_correct=True)
    assert suite.names == ["correctness", "format", "length"]
    rows = {"answer": ["7", "7", "7"]}
    completions = ["<answer>7</answer>", "<answer>8</answer>", "a b c <answer>7</answer>"]
    # 1 whitespace token, correct -> 1 | incorrect -> 0 | 4 tokens -> 0 anyway
    assert suite.components[2]([None] * 3, completions, **rows) == [1.0, 0.0, 0.0]
    plain = get_suite("math", length_thresholds=(2, 4)).components[2]
    assert plain([None] * 3, completions, **rows) == [1.0, 1.0, 0.0]


def test_the_demo_configuration_scores_a_demo_like_rollout(items):
    # The CPU demo: chain_sum, <answer></answer>, thresholds 24/64.
    suite = get_suite("math", length_thresholds=(24, 64))
    rows = load_reasoning_gym(DEMO_TASK, n_train=1, n_test=0)["train"].to_dict()
    completion = [{"role": "assistant", "content": f"<answer>{rows['answer'][0]}</answer>"}]
    assert [c([None], [completion], **columns(rows))[0] for c in suite.components] == [1.0, 1.0, 1.0]


def test_math_verify_has_a_deadline_on_every_thread():
    """``9^{9^{9}}`` would make sympy expand a 370-million-digit number: scoring stops at the
    deadline with 0 on the main thread (SIGALRM) and on other threads (a helper process that is
    killed and reaped at the deadline, then restarted for the next call)."""
    import threading
    import time

    from mrgrpo.rewards.math import _VERIFY_WORKER, math_verify_score

    started = time.monotonic()
    assert math_verify_score("$9^{9^{9}}$", "3", timeout_s=1) == 0.0
    assert time.monotonic() - started < 30

    results: dict = {}

    def score_off_main_thread():
        assert math_verify_score("4", "4") == 1.0  # starts the helper
        helper = _VERIFY_WORKER._process
        began = time.monotonic()
        results["slow"] = math_verify_score("$9^{9^{9}}$", "3", timeout_s=1)
        results["slow_s"] = time.monotonic() - began
        results["reaped"] = helper.poll() is not None
        results["after"] = (math_verify_score("$\\frac{1}{2}$", "0.5"), math_verify_score("5", "4"))

    thread = threading.Thread(target=score_off_main_thread)
    thread.start()
    thread.join(180)
    assert not thread.is_alive()
    assert results["slow"] == 0.0 and results["slow_s"] < 10 and results["reaped"]
    assert results["after"] == (1.0, 0.0)
    _VERIFY_WORKER.close()
