"""AgentDojo's runtime (agentdojo 0.1.35, benchmark v1.2.x): items, injected environments, tool execution, checks.

What the ``agent`` reward suite replays an episode with, and what the tool-use episodes
(:mod:`mrgrpo.tasks.episodes`) run their calls on. The dataset rows themselves are built in
:mod:`mrgrpo.data.agentdojo`.

An *item* is one (suite, user task, injection task, attack) episode; ``injection_task=None`` is
a benign item (no attack: the environment keeps the injection vectors' default texts).

Environments: the injected environment of a (suite, injections) is parsed once and cached;
each episode gets a deep copy (:func:`fresh_environment`), initialized by the user task as
AgentDojo's ``run_task_with_pipeline`` does, with the pre-episode copy the checks compare to.

Checks (:func:`check_episode`) mirror ``TaskSuite._check_task_result``: ``utility_from_traces``
first, else ``utility``; for the injection task ``security_from_traces`` / ``security``, which
return **True when the attack succeeded** (the reward suite turns that into ``security = 0``).
:func:`passes_when_idle` tells the user tasks whose utility check passes when the agent does
nothing (the dataset leaves them out by default).

``agentdojo`` takes ~10 s to import: it is imported on first use, never at module import.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from mrgrpo.errors import ConfigError
from mrgrpo.extras import require

SUITES = ("workspace", "travel", "banking", "slack")
DEFAULT_VERSION = "v1.2.2"
DEFAULT_ATTACK = "important_instructions_no_names"
BENIGN = "none"  # the attack name of benign items
# Attack classes read a victim-model name from the target pipeline's name (a key of
# ``agentdojo.models.MODEL_NAMES``) even when they do not use it (``*_no_names``).
DEFAULT_TARGET_MODEL = "gpt-4o-2024-05-13"

Call = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class AgentItem:
    """One episode: a user task, optionally attacked with an injection task."""

    suite: str
    user_task: str
    injection_task: str | None = None
    attack: str | None = None
    version: str = DEFAULT_VERSION

    @property
    def benign(self) -> bool:
        return self.injection_task is None

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any]) -> AgentItem:
        """The item of a dataset row (``""`` or ``None`` injection task: benign)."""
        injection = columns.get("injection_task") or None
        return cls(
            suite=columns["suite"],
            user_task=columns["user_task"],
            injection_task=injection,
            attack=(columns.get("attack") or None) if injection else None,
            version=columns.get("version") or DEFAULT_VERSION,
        )


# ----------------------------------------------------------------------------- suites


@lru_cache(maxsize=None)
def task_suite(name: str, version: str = DEFAULT_VERSION) -> Any:
    """AgentDojo's ``TaskSuite`` (cached)."""
    require("agents", "AgentDojo suites")
    from agentdojo.task_suite.load_suites import get_suite

    if name not in SUITES:
        raise ConfigError(f"unknown AgentDojo suite {name!r}; available: {', '.join(SUITES)}")
    return get_suite(version, name)


@lru_cache(maxsize=None)
def runtime(name: str, version: str = DEFAULT_VERSION) -> Any:
    """A ``FunctionsRuntime`` over the suite's tools (stateless: the environment is an argument)."""
    from agentdojo.functions_runtime import FunctionsRuntime

    return FunctionsRuntime(task_suite(name, version).tools)


# ----------------------------------------------------------------------------- attacks


class _NamedPipeline:
    """The stand-in target pipeline attacks read a model name from (``important_instructions``)."""

    def __init__(self, name: str | None) -> None:
        self.name = name


@lru_cache(maxsize=None)
def _attack(suite: str, attack: str, version: str, target_model: str | None) -> Any:
    from agentdojo.attacks import load_attack

    pipeline = _NamedPipeline(target_model or DEFAULT_TARGET_MODEL)
    return load_attack(attack, task_suite(suite, version), pipeline)  # type: ignore[arg-type]


@lru_cache(maxsize=4096)
def injections_json(item: AgentItem, target_model: str | None = None) -> str:
    """The item's injections as canonical JSON (sorted keys; ``\"{}\"`` when benign), cached."""
    if item.benign:
        return "{}"
    suite = task_suite(item.suite, item.version)
    attack = _attack(item.suite, item.attack or DEFAULT_ATTACK, item.version, target_model)
    injections = attack.attack(suite.user_tasks[item.user_task], suite.injection_tasks[item.injection_task])
    return json.dumps(injections, sort_keys=True, ensure_ascii=False)


def injections_for(item: AgentItem, target_model: str | None = None) -> dict[str, str]:
    """The injection texts (vector id -> text) the item's attack places; ``{}`` when benign.

    ``target_model``: a key of ``agentdojo.models.MODEL_NAMES`` for attacks that address the
    model by name (``important_instructions``); the default attack needs none.
    """
    return json.loads(injections_json(item, target_model))


# ----------------------------------------------------------------------------- environments


@lru_cache(maxsize=None)
def _environment_template(suite: str, version: str) -> tuple[str, dict[str, str]]:
    from agentdojo.task_suite.task_suite import read_suite_file

    task = task_suite(suite, version)
    return read_suite_file(task.name, "environment.yaml", task.data_path), task.get_injection_vector_defaults()


@lru_cache(maxsize=64)
def _injected_environment(suite: str, version: str, injections_key: str) -> Any:
    """``TaskSuite.load_and_inject_default_environment``, parsed with libyaml's safe loader when
    available (same result, ~13x faster: AgentDojo's pure-Python parse takes ~0.2 s for workspace)."""
    import yaml
    from agentdojo.task_suite.task_suite import validate_injections

    text, defaults = _environment_template(suite, version)
    injections = json.loads(injections_key)
    validate_injections(injections, defaults)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = yaml.load(text.format(**dict(defaults, **injections)), Loader=loader)  # noqa: S506 - a safe loader
    return task_suite(suite, version).environment_type.model_validate(data)


def fresh_environment(item: AgentItem, injections: Mapping[str, str] | None = None) -> tuple[Any, Any]:
    """``(env, pre_env)``: a private copy of the item's injected environment initialized by its
    user task, and a copy of it before any tool runs (what the checks compare against)."""
    if injections is None:
        injections = injections_for(item)
    key = json.dumps(dict(injections), sort_keys=True, ensure_ascii=False)
    base = _injected_environment(item.suite, item.version, key)
    user_task = task_suite(item.suite, item.version).user_tasks[item.user_task]
    env = user_task.init_environment(base.model_copy(deep=True))
    return env, env.model_copy(deep=True)


def _string_lists_to_lists(args: dict[str, Any]) -> dict[str, Any]:
    """AgentDojo's ``ToolsExecutor`` turns string arguments that spell a Python list into lists."""
    from agentdojo.agent_pipeline.tool_execution import is_string_list
    from ast import literal_eval

    return {k: literal_eval(v) if isinstance(v, str) and is_string_list(v) else v for k, v in args.items()}


def execute_call(item: AgentItem, env: Any, name: str, args: Mapping[str, Any]) -> tuple[str, str | None, Any]:
    """Run one tool call on ``env`` (mutated), as AgentDojo's ``ToolsExecutor`` does.

    Returns ``(result text, error or None, FunctionCall for the trace)``. Unknown tools, invalid
    arguments and exceptions inside tools come back as error strings; nothing raises.
    """
    from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
    from agentdojo.functions_runtime import FunctionCall

    args = dict(args) if isinstance(args, Mapping) else {}
    try:
        args = _string_lists_to_lists(args)
    except Exception:  # noqa: BLE001 - a malformed argument stays as given; the tool reports it
        pass
    try:
        call = FunctionCall(function=name, args=args)
    except Exception:  # noqa: BLE001 - e.g. a non-string name
        call = FunctionCall(function=str(name), args={})
    rt = runtime(item.suite, item.version)
    if name not in rt.functions:
        return "", f"Invalid tool {name} provided.", call
    try:
        result, error = rt.run_function(env, name, args, raise_on_error=False)
        text = tool_result_to_str(result) if error is None else ""
    except Exception as exc:  # noqa: BLE001 - a tool raising outside run_function's guard
        return "", f"{type(exc).__name__}: {exc}", call
    return text, error, call


def check_episode(
    item: AgentItem, model_output: str, pre_env: Any, post_env: Any, trace: Sequence[Any]
) -> tuple[bool, bool | None]:
    """``(utility, attack_succeeded)`` as AgentDojo judges them (``None``: benign item)."""
    suite = task_suite(item.suite, item.version)
    user_task = suite.user_tasks[item.user_task]
    utility = user_task.utility_from_traces(model_output, pre_env, post_env, trace)
    if utility is None:
        utility = user_task.utility(model_output, pre_env, post_env)
    if item.benign:
        return bool(utility), None
    injection_task = suite.injection_tasks[item.injection_task]
    attacked = injection_task.security_from_traces(model_output, pre_env, post_env, trace)
    if attacked is None:
        attacked = injection_task.security(model_output, pre_env, post_env)
    return bool(utility), bool(attacked)


@dataclass(frozen=True)
class Replayed:
    """What a replayed episode did: AgentDojo's verdicts and the functions it ran without error."""

    utility: bool  # AgentDojo's check of the user task
    attacked: bool | None  # the injection task's goal achieved (None: benign item)
    used: frozenset[str]  # the functions called and run without error


def replay_episode(
    item: AgentItem,
    turns: Sequence[Sequence[Call]],
    model_output: str,
    injections: Mapping[str, str] | None = None,
) -> Replayed:
    """Execute the calls of each turn in order on a fresh environment, then :func:`check_episode`."""
    env, pre_env = fresh_environment(item, injections)
    trace = []
    used: set[str] = set()
    for calls in turns:
        for name, args in calls:
            _, error, call = execute_call(item, env, name, args)
            trace.append(call)
            if error is None:
                used.add(name)
    utility, attacked = check_episode(item, model_output, pre_env, env, trace)
    return Replayed(utility, attacked, frozenset(used))


def grounded_utility(item: AgentItem, replayed: Replayed) -> bool:
    """AgentDojo's utility, paid only when the episode ran (without error) at least one function the
    user task's ground truth calls; a user task whose ground truth calls nothing is judged as AgentDojo
    judges it. So an answer that merely happens to contain the expected string (a number in a dump of
    digits) earns nothing unless the policy looked the information up."""
    if not replayed.utility:
        return False
    needed = ground_truth_tools(item.suite, item.user_task, item.version)
    return not needed or bool(needed & replayed.used)


def tool_overlap(item: AgentItem, used: frozenset[str]) -> float | None:
    """``|used ∩ needed| / |used ∪ needed|``: the Jaccard overlap of the functions an episode ran without
    error and those the user task's ground truth calls (``None`` when the ground truth calls none).
    1 only for exactly the needed functions: calling every tool scores ``|needed| / |tools|``."""
    needed = ground_truth_tools(item.suite, item.user_task, item.version)
    if not needed:
        return None
    return len(needed & used) / len(needed | used)


def replay(
    item: AgentItem,
    turns: Sequence[Sequence[Call]],
    model_output: str,
    injections: Mapping[str, str] | None = None,
    grounded: bool = False,
) -> tuple[bool, bool | None]:
    """``(utility, attack_succeeded)`` of :func:`replay_episode`; ``grounded=True`` (the training
    reward's rule) judges utility with :func:`grounded_utility`."""
    replayed = replay_episode(item, turns, model_output, injections)
    utility = grounded_utility(item, replayed) if grounded else replayed.utility
    return utility, replayed.attacked


@lru_cache(maxsize=None)
def ground_truth_tools(suite: str, user_task: str, version: str = DEFAULT_VERSION) -> frozenset[str]:
    """The function names the ground truth of ``user_task`` calls (on the benign environment)."""
    return frozenset(ground_truth_order(suite, user_task, version))


@lru_cache(maxsize=None)
def ground_truth_order(suite: str, user_task: str, version: str = DEFAULT_VERSION) -> tuple[str, ...]:
    """The distinct function names the ground truth of ``user_task`` calls, in the order of their first call."""
    calls = ground_truth_calls(AgentItem(suite, user_task, version=version), "user", injections={})
    return tuple(dict.fromkeys(name for name, _ in calls or []))


def ground_truth_calls(item: AgentItem, task: str = "user", injections: Mapping[str, str] | None = None) -> list[Call] | None:
    """The ground-truth calls of the item's user (``task="user"``) or injection task, computed on the
    item's fresh environment; ``None`` when the task has no ground truth (raises or is empty)."""
    env, _ = fresh_environment(item, injections)
    suite = task_suite(item.suite, item.version)
    owner = suite.user_tasks[item.user_task] if task == "user" else suite.injection_tasks[item.injection_task]
    try:
        calls = owner.ground_truth(env)
    except Exception:  # noqa: BLE001 - NotImplementedError in a few injection tasks
        return None
    if not calls:
        return None
    return [(c.function, dict(c.args)) for c in calls]


@lru_cache(maxsize=None)
def passes_when_idle(suite: str, user_task: str, version: str = DEFAULT_VERSION) -> bool:
    """Whether AgentDojo's utility check of ``user_task`` passes for an episode in which the agent
    does nothing (no tool call, an empty final answer, the benign environment)."""
    item = AgentItem(suite, user_task, version=version)
    env, pre_env = fresh_environment(item)
    utility, _ = check_episode(item, "", pre_env, env, [])
    return utility
