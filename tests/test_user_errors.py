"""A mistake that reaches a user raises one of :mod:`mrgrpo.errors`' types, never a bare
``ValueError``/``RuntimeError``/``TypeError``: the command line prints those as one line (exit 2),
and callers can tell a user's mistake from a bug. What still raises a bare one is listed below with
the reason (an internal invariant, a misuse of the Python API, a pydantic validator); the types
keep their old bases (``ConfigError`` and ``InputError`` are ``ValueError``s), so ``except
ValueError`` still catches them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mrgrpo.errors import ConfigError, InputError, UserError

SRC = Path(__file__).resolve().parents[1] / "src" / "mrgrpo"
BARE = ("ValueError", "RuntimeError", "TypeError")

# (module, function): the bare raises that stay, and why.
ALLOWED = {
    ("data/basic_functions.py", "basic_function_items"): "invariant: the templates allow far more problems",
    ("experiments/testbed.py", "_check_roundtrip"): "invariant: a saved tokenizer reloads with its own ids",
    ("tasks/asb.py", "evaluate_asb"): "Python API misuse: neither a model nor a policy passed",
    ("tasks/episodes.py", "run_episodes"): "invariant: a policy returns one turn per conversation",
    ("tasks/episodes.py", "take_turn"): "invariant: no turn after the episode ended",
    ("train/agent_rollout.py", "__call__"): "Python API misuse: AgentRollout outside AgentGRPOTrainer",
    ("train/config.py", "_estimator_options"): "pydantic validator: load_config reports it as one ConfigError line",
    ("train/config.py", "_grpo_fields"): "pydantic validator (as above)",
    ("train/config.py", "_known_estimator"): "pydantic validator (as above)",
    ("train/config.py", "_share_prompt_without_checkpointing"): "pydantic validator (as above)",
    ("train/shared_prefix.py", "__init__"): "Python API misuse: share_prompt not a bool (TypeError, as Python's own)",
    ("train/trl_compat.py", "check_trainer_class"): "Python API misuse: not a GRPOTrainer subclass (TypeError)",
    ("train/trainer.py", "__init__"): "Python API misuse: positional arguments with suite= (TypeError, as Python's own)",
    ("train/trainer.py", "_generate_and_score_completions"): "invariant: TRL scores every batch before returning it",
    ("train/trainer.py", "_hold_for_feedback"): "invariant: the advantage step runs before the feedback step",
    ("train/trainer.py", "policy_signal"): "invariant: the loss saw every row before the optimizer stepped",
    ("estimators/registry.py", "register_estimator"): "Python API misuse: a registered function's signature (TypeError)",
    ("estimators/registry.py", "decorator"): "Python API misuse: a registered function's signature (TypeError)",
    ("estimators/registry.py", "compute_checked"): "invariant: a bug in the estimator, not in the user's input",
    ("estimators/registry.py", "_check_state"): "invariant: a bug in the estimator, not in the user's input",
    ("estimators/registry.py", "check_output"): "invariant: a bug in the estimator, not in the user's input",
    ("rewards/base.py", "completion_text"): "Python API misuse: a completion neither text nor messages (TypeError)",
    ("rewards/sandbox/child/confine.py", "_build_program"): "invariant: the seccomp program's jumps (inside the sandbox)",
    ("rewards/sandbox/child/io.py", "_recv"): "inside the sandbox (standard library only): an oversized frame, caught",
    ("rewards/sandbox/child/candidate.py", "receive"): "inside the sandbox (standard library only): a malformed request, caught",
    ("rewards/sandbox/child/candidate.py", "_candidate_main"): "inside the sandbox (standard library only): its receive(), caught",
}


def bare_raises() -> set[tuple[str, str]]:
    found = set()
    for path in sorted(SRC.rglob("*.py")):
        module = path.relative_to(SRC).as_posix()
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
                        and isinstance(node.exc.func, ast.Name) and node.exc.func.id in BARE):
                    found.add((module, function.name))
    return found


def test_user_facing_raises_use_the_projects_types():
    found = bare_raises()
    assert found - set(ALLOWED) == set(), "raise ConfigError/InputError/... (mrgrpo.errors) instead"
    assert set(ALLOWED) - found == set(), "an allowed bare raise is gone: drop it from ALLOWED"


@pytest.mark.parametrize("call, kind, message", [
    (lambda: __import__("mrgrpo").compute_advantages([[1.0], [0.0]], [0, 0], "grpo", eps=-1), ConfigError,
     "eps must be a finite number >= 0"),
    (lambda: __import__("mrgrpo").compute_advantages([[1.0], [0.0]], [0, 0], "corr_grpo", shrinkage=2), ConfigError,
     "shrinkage must be a number in [0, 1] or 'auto'"),
    (lambda: __import__("mrgrpo").diagnose([[1.0], [0.0]], [0, 0], names=["a", "b"]), InputError,
     "names has 2 entries for 1 reward components"),
    (lambda: __import__("mrgrpo.train.precision", fromlist=["x"]).resolve_bf16("maybe", cuda=False), ConfigError,
     "trainer.bf16 must be auto, true or false"),
    (lambda: __import__("mrgrpo.data.code_jsonl", fromlist=["x"]).code_records([{"prompt": "p"}]), InputError,
     "missing ['test']"),
])
def test_a_mistake_raises_a_user_error_that_is_still_a_value_error(call, kind, message):
    with pytest.raises(kind) as error:
        call()
    assert isinstance(error.value, UserError) and isinstance(error.value, ValueError)
    assert message in str(error.value)
