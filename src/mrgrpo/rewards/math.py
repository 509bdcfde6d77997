"""Math reward suite (SA-MRPO / GDPO): correctness, format, length.

Completion format. The prompt asks for the final answer in one of two formats:

* ``answer_format="answer_tag"``: ``... <answer>42</answer>`` (optionally preceded by
  ``<think>...</think>`` when ``think=True``);
* ``answer_format="boxed"``: ``... \\boxed{42}`` (optionally inside ``<think>``-free prose).

Column contract (what the loaders in :mod:`mrgrpo.data` produce; TRL passes every extra
dataset column to reward functions as a keyword list with one entry per completion):

* ``answer`` (str): the reference final answer.
* ``task`` (str): the reasoning-gym dataset name whose own ``score_answer`` grades the
  answer, or ``""`` to grade with ``math-verify`` against ``answer``.
* ``task_config`` (str): JSON of the reasoning-gym config the item was generated with.
* ``task_entry`` (str): JSON of the reasoning-gym entry ``{question, answer, metadata}``.

Components (all in ``[0, 1]``):

* ``correctness``: the answer is read from the requested format (the *last* ``<answer>`` or
  ``\\boxed{}``); no answer there scores 0. Graded by the task's scorer where the row names a
  task, else by ``math-verify``. Binary by default (a task score below 1 counts 0; reasoning-gym's
  default scorer gives partial credit when the reference is a substring of the answer, e.g.
  ``"13"`` for ``"3"``); ``partial_credit=True`` keeps the task's own score.
* ``format``: 1 when the requested tags appear exactly once each, in order, with non-empty
  content, and nothing but whitespace follows the closing answer tag (``answer_tag``) / exactly
  one ``\\boxed{...}`` with balanced braces (``boxed``); else 0.
* ``length``: with ``n`` tokens and thresholds ``(lo, hi)``: 1 for ``n <= lo``, 0 for
  ``n >= hi``, ``(hi - n) / (hi - lo)`` between (SA-MRPO: lo=1024, hi=2048). Tokens are counted
  with ``tokenizer`` (no special tokens) when given, else as whitespace-separated words.
  With ``length_if_correct=True`` (GDPO's conditioned reward) the component keeps its name
  ``length`` (so weights and configs stay valid) but is granted only to correct rollouts.
"""

from __future__ import annotations

import atexit
import json
import re
import select
import subprocess
import sys
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from mrgrpo.errors import ConfigError, InputError
from mrgrpo.extras import import_extra, require
from mrgrpo.rewards.base import (
    RewardComponent,
    RewardSuite,
    completion_text,
    conditioned,
    register_suite,
)

ANSWER_FORMATS = ("answer_tag", "boxed")
DEFAULT_WEIGHTS = {"correctness": 1.0, "format": 0.5, "length": 0.5}
DEFAULT_LENGTH_THRESHOLDS = (1024, 2048)

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BOXED = "\\boxed{"


def _check_format_name(answer_format: str) -> None:
    if answer_format not in ANSWER_FORMATS:
        raise ConfigError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")


def instruction(answer_format: str = "answer_tag", think: bool = False) -> str:
    """The system line asking for the format this module reads."""
    _check_format_name(answer_format)
    where = "inside <answer></answer>" if answer_format == "answer_tag" else "inside \\boxed{}"
    if think:
        return f"Think step by step inside <think></think>, then give the final answer {where}."
    return f"Give the final answer {where}."


def format_answer(answer: str, answer_format: str = "answer_tag", think: str | None = None) -> str:
    """Write ``answer`` in the requested format (used for few-shot replies and tests).

    ``think``: reasoning text to put in ``<think></think>`` first (``None``: no think block).
    """
    _check_format_name(answer_format)
    body = f"<answer>{answer}</answer>" if answer_format == "answer_tag" else f"\\boxed{{{answer}}}"
    return body if think is None else f"<think>{think}</think>\n{body}"


def _boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` with balanced braces, in order."""
    found: list[str] = []
    start = text.find(_BOXED)
    while start != -1:
        depth, i = 1, start + len(_BOXED)
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found.append(text[start + len(_BOXED) : i - 1])
        start = text.find(_BOXED, start + len(_BOXED))
    return found


def extract_answer(text: str, answer_format: str = "answer_tag") -> str | None:
    """The final answer written in ``answer_format`` (the last one), stripped; ``None`` if absent."""
    _check_format_name(answer_format)
    found = _ANSWER_TAG.findall(text) if answer_format == "answer_tag" else _boxed_contents(text)
    if not found or not found[-1].strip():
        return None
    return found[-1].strip()


def format_ok(text: str, answer_format: str = "answer_tag", think: bool = False) -> bool:
    """Whether ``text`` follows the requested format exactly (see the module docstring).

    With ``think``, the text must open with one non-empty ``<think>…</think>``; in the
    ``answer_tag`` format only whitespace may then separate it from ``<answer>``.
    """
    _check_format_name(answer_format)
    if think:
        match = re.fullmatch(r"\s*<think>(.*?)</think>(.*)", text, re.DOTALL)
        if not match or not match.group(1).strip() or "<think>" in match.group(2) or "</think>" in match.group(2):
            return False
        text = match.group(2)
        if answer_format == "answer_tag" and not text.lstrip().startswith("<answer>"):
            return False
    if answer_format == "boxed":
        boxed = _boxed_contents(text)
        return text.count(_BOXED) == 1 and len(boxed) == 1 and bool(boxed[0].strip())
    if text.count("<answer>") != 1 or text.count("</answer>") != 1:
        return False
    match = _ANSWER_TAG.search(text)
    return bool(match and match.group(1).strip() and not text[match.end() :].strip())


# ----------------------------------------------------------------------------- correctness


@lru_cache(maxsize=256)
def _task_scorer(task: str, task_config: str) -> Any:
    reasoning_gym = import_extra("reasoning_gym", "math", "reasoning-gym task scoring")

    config = json.loads(task_config) if task_config else {}
    return reasoning_gym.create_dataset(task, **config)


def task_score(answer: str | None, task: str, task_config: str, task_entry: str) -> float:
    """The reasoning-gym task's own ``score_answer`` for ``answer`` on the stored entry.

    Some scorers raise on answers they cannot parse (``prime_factorization`` on ``"banana"``);
    an unparseable answer is a wrong answer, so any exception there scores 0.
    """
    entry = json.loads(task_entry)
    scorer = _task_scorer(task, task_config)
    try:
        return float(scorer.score_answer(answer, entry))
    except Exception:  # noqa: BLE001 - the task's parser failed on the policy's answer
        return 0.0


MATH_VERIFY_TIMEOUT_S = 5


def math_verify_score(answer: str | None, reference: str, timeout_s: int = MATH_VERIFY_TIMEOUT_S) -> float:
    """1.0 when ``math-verify`` finds ``answer`` equivalent to ``reference``, else 0.0.

    Parsing and comparing each stop after ``timeout_s`` seconds (a policy can write ``9^{9^{9}}``,
    which sympy would expand for hours); a timeout scores 0. On the main thread this is
    math-verify's own SIGALRM timeout; SIGALRM cannot be set from other threads (verl reward
    workers, thread pools), so there the check runs in a helper process that is killed at the
    deadline (:class:`_VerifyWorker`).
    """
    if answer is None:
        return 0.0
    require("math", "math-verify answer checking")
    if threading.current_thread() is threading.main_thread():
        return _math_verify(answer, reference, timeout_s)
    return _VERIFY_WORKER.score(answer, reference, timeout_s)


def _math_verify(answer: str, reference: str, timeout_s: int | None) -> float:
    from math_verify import parse, verify

    gold = parse(reference, parsing_timeout=timeout_s)
    pred = parse(answer, parsing_timeout=timeout_s)
    if not gold or not pred:
        return 0.0
    return 1.0 if verify(gold, pred, timeout_seconds=timeout_s) else 0.0


def _serve_math_verify() -> None:
    """The helper process's loop: a JSON ``[answer, reference]`` per stdin line, a score per stdout line."""
    import math_verify  # noqa: F401 - imported before "ready", so start-up is not charged to a deadline

    print("ready", flush=True)
    for line in sys.stdin:
        try:
            answer, reference = json.loads(line)
            score = _math_verify(str(answer), str(reference), None)
        except Exception:  # noqa: BLE001 - math-verify failed on the policy's answer: not equivalent
            score = 0.0
        print(json.dumps(score), flush=True)


class _VerifyWorker:
    """One helper process (``python -c``, so no ``__main__`` re-import; started on first use,
    restarted after a timeout) that scores answers for threads other than the main one. Calls
    are serialized; the process is killed and reaped when a call passes its deadline and when
    the interpreter exits."""

    START_TIMEOUT_S = 120.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None

    def score(self, answer: str, reference: str, timeout_s: float) -> float:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self.close()
                if not self._start():
                    return 0.0
            assert self._process is not None and self._process.stdin is not None
            try:
                self._process.stdin.write(json.dumps([answer, reference]) + "\n")
                self._process.stdin.flush()
            except OSError:
                self.close()
                return 0.0
            line = self._readline(timeout_s)
            try:
                return float(json.loads(line)) if line else self.close()
            except ValueError:
                return self.close()

    def _readline(self, timeout_s: float) -> str | None:
        assert self._process is not None and self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], timeout_s)
        return self._process.stdout.readline() if ready else None

    def _start(self) -> bool:
        self._process = subprocess.Popen(
            [sys.executable, "-c", "from mrgrpo.rewards.math import _serve_math_verify; _serve_math_verify()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
        )
        if (self._readline(self.START_TIMEOUT_S) or "").strip() != "ready":
            self.close()
            return False
        return True

    def close(self) -> float:
        """Kill and reap the helper (the next call starts a fresh one); returns the score 0.0."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait(timeout=10)
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()
        return 0.0


_VERIFY_WORKER = _VerifyWorker()
atexit.register(_VERIFY_WORKER.close)


def _column(columns: dict[str, Any], name: str, n: int) -> list:
    values = columns.get(name)
    if values is None:
        return [""] * n
    if len(values) != n:
        raise InputError(f"column {name!r} has {len(values)} entries for {n} completions")
    return list(values)


def correctness_reward(answer_format: str = "answer_tag", partial_credit: bool = False) -> RewardComponent:
    """``correctness`` in [0, 1]: the task's scorer, else math-verify (see module docstring)."""
    _check_format_name(answer_format)

    def fn(prompts: list, completions: list, **columns: Any) -> list[float | None]:
        n = len(completions)
        if columns.get("answer") is None:
            raise InputError("math correctness needs an 'answer' column (see mrgrpo.rewards.math)")
        answers = _column(columns, "answer", n)
        tasks, configs, entries = (_column(columns, c, n) for c in ("task", "task_config", "task_entry"))
        scores: list[float | None] = []
        for completion, reference, task, config, entry in zip(completions, answers, tasks, configs, entries):
            given = extract_answer(completion_text(completion), answer_format)
            if given is None:
                scores.append(0.0)
                continue
            if task:
                score = task_score(given, task, config, entry)
                scores.append(score if partial_credit else float(score >= 1.0))
            else:
                scores.append(math_verify_score(given, str(reference)))
        return scores

    return RewardComponent("correctness", (0.0, 1.0), fn)


def format_reward(answer_format: str = "answer_tag", think: bool = False) -> RewardComponent:
    """``format`` in {0, 1}: the requested tags, in order, once (see module docstring)."""
    _check_format_name(answer_format)

    def fn(prompts: list, completions: list, **columns: Any) -> list[float | None]:
        return [float(format_ok(completion_text(c), answer_format, think)) for c in completions]

    return RewardComponent("format", (0.0, 1.0), fn)


def graded_length(n_tokens: int, thresholds: tuple[int, int]) -> float:
    """1 at or under ``lo``, 0 at or over ``hi``, ``(hi - n) / (hi - lo)`` between."""
    lo, hi = thresholds
    if n_tokens <= lo:
        return 1.0
    if n_tokens >= hi:
        return 0.0
    return (hi - n_tokens) / (hi - lo)


def count_tokens(text: str, tokenizer: Any = None) -> int:
    """Tokens of ``text``: with ``tokenizer`` (no special tokens) if given, else whitespace words."""
    if tokenizer is None:
        return len(text.split())
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def length_reward(thresholds: Sequence[int] = DEFAULT_LENGTH_THRESHOLDS, tokenizer: Any = None) -> RewardComponent:
    """``length`` in [0, 1], graded linearly between the two token thresholds."""
    lo, hi = (int(t) for t in thresholds)
    if not 0 <= lo < hi:
        raise ConfigError(f"length thresholds must satisfy 0 <= lo < hi, got {tuple(thresholds)}")

    def fn(prompts: list, completions: list, **columns: Any) -> list[float | None]:
        return [graded_length(count_tokens(completion_text(c), tokenizer), (lo, hi)) for c in completions]

    return RewardComponent("length", (0.0, 1.0), fn)


@register_suite("math", columns=("answer",))
def math_suite(
    answer_format: str = "answer_tag",
    think: bool = False,
    length_thresholds: Sequence[int] = DEFAULT_LENGTH_THRESHOLDS,
    tokenizer: Any = None,
    length_if_correct: bool = False,
    partial_credit: bool = False,
    weights: dict[str, float] | Sequence[float] | None = None,
) -> RewardSuite:
    """The ``math`` suite: ``correctness``, ``format``, ``length``; weights 1 / 0.5 / 0.5.

    Args:
        answer_format: ``"answer_tag"`` (``<answer>…</answer>``) or ``"boxed"`` (``\\boxed{…}``).
        think: also require one non-empty ``<think>…</think>`` before the answer (format only).
        length_thresholds: ``(lo, hi)`` tokens; SA-MRPO's ``(1024, 2048)`` by default.
        tokenizer: the policy's tokenizer to count tokens with (whitespace words when ``None``).
        length_if_correct: GDPO's conditioned length: granted only when correctness is 1.
        partial_credit: keep a task scorer's partial scores instead of thresholding at 1.
        weights: override the default weights (a full list or a name -> weight mapping).
    """
    correctness = correctness_reward(answer_format, partial_credit)
    length = length_reward(length_thresholds, tokenizer)
    if length_if_correct:
        length = conditioned(length, on=correctness, threshold=1.0, name="length")
    suite = RewardSuite(
        "math",
        (correctness, format_reward(answer_format, think), length),
        tuple(DEFAULT_WEIGHTS.values()),
    )
    return suite if weights is None else suite.with_weights(weights)
