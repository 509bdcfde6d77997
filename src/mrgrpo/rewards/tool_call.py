"""Tool-calling reward suite (ToolRL/RLLA, GDPO, CorrGRPO) with BFCL answer semantics.

Completion format (what :func:`instruction` asks for)::

    <think>reasoning</think>
    <tool_call>[{"name": "f", "arguments": {"x": 1}}, ...]</tool_call>

Column contract (produced by :func:`mrgrpo.data.bfcl.load_bfcl`):

* ``functions`` (str): JSON list of BFCL function schemas
  ``{"name", "description", "parameters": {"type": "dict", "properties", "required"}}``.
* ``ground_truth`` (str): JSON list of expected calls, BFCL style: ``[{name: {param: [acceptable
  values]}}]``; ``""`` among a parameter's values means it may be omitted.

BFCL semantics of one call (``call_valid``; mirrors ``bfcl_eval``'s ``simple_function_checker``
for Python): every schema-required parameter present; no parameter outside the schema and
the answer; every given value acceptable (type-checked; ints accepted for floats; strings
compared case-insensitively ignoring spaces and ``,./-_*^``; dicts and lists of dicts
key by key, one level deep: a value listed under a key, a dict included, compares as written);
every answer parameter without ``""`` present. One deliberate leniency: ints are
also accepted inside float arrays (JSON writers may drop ``.0``).

Components, for predicted calls P and expected calls G (all in ``[0, 1]``):

* ``format``: 1 when ``<think>`` (if asked) and ``<tool_call>`` each appear once, in order,
  with only whitespace around them, and the call block is a JSON list of
  ``{"name": str, "arguments": object}``; else 0.
* ``function_name``: multiset Jaccard of the names, ``|P ∩ G| / |P ∪ G|`` (ToolRL).
* ``parameter_names`` / ``parameter_values``: calls are paired one-to-one by name (the pairing
  maximizing the sum of both scores); for a pair, with ``R`` the required keys (schema-required,
  or answer keys without ``""``) and ``A`` the allowed keys (answer keys in the schema):
  names ``= |P_keys ∩ A| / |P_keys ∪ R|`` (1 iff ``R ⊆ P_keys ⊆ A``: optional keys may be
  omitted), values ``=`` the fraction of ``R ∪ (P_keys ∩ A)`` whose given value is acceptable
  (a missing required key counts as wrong). Each is summed over pairs and divided by
  ``max(|P|, |G|)``, so missing and extra calls cost.
* ``all_exact`` (a metric: weight 0): 1 iff ``|P| = |G|`` and the calls pair one-to-one into
  BFCL-valid pairs (order-free, as BFCL's parallel checker).

The call block is parsed leniently for the scoring components (a JSON list, one object, or one
object per line); ``format`` alone demands the requested list. No block parses as no calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from mrgrpo.errors import InputError
from mrgrpo.rewards.base import RewardComponent, RewardSuite, completion_text, register_suite

Call = tuple[str, dict[str, Any]]  # (function name, arguments)

DEFAULT_WEIGHTS = {
    "format": 1.0,
    "function_name": 1.0,
    "parameter_names": 1.0,
    "parameter_values": 1.0,
    "all_exact": 0.0,
}

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
# BFCL's Python type names (plus JSON-schema aliases) -> Python types.
_TYPES: dict[str, type] = {
    "string": str, "integer": int, "float": float, "number": float, "boolean": bool,
    "array": list, "tuple": list, "dict": dict, "object": dict, "any": str,
}
_STRING_NOISE = re.compile(r"[ ,./\-_*^]")


def instruction(functions: Sequence[Mapping[str, Any]], think: bool = True, listing: str | None = None) -> str:
    """The system message: the function schemas (or ``listing``, another rendering of them) and the
    completion format to answer in."""
    schemas = listing if listing is not None else "\n".join(json.dumps(f, ensure_ascii=False) for f in functions)
    steps = "First think briefly inside <think></think>. Then write" if think else "Write"
    return (
        "You can call the following functions:\n<tools>\n" + schemas + "\n</tools>\n"
        f"{steps} the function calls that answer the user as a JSON list inside <tool_call></tool_call>, "
        'for example <tool_call>[{"name": "function_name", "arguments": {"parameter": "value"}}]</tool_call>. '
        "Give every call the request needs."
    )


def compact_signatures(schemas: Sequence[Mapping[str, Any]]) -> str:
    """One line per tool, ``name(param: type, ...) - first line of its description`` (short prompts)."""
    lines = []
    for schema in schemas:
        f = schema.get("function", schema)
        props = (f.get("parameters") or {}).get("properties") or {}
        params = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in props.items())
        description = (f.get("description") or "").strip().splitlines()
        lines.append(f"{f['name']}({params})" + (f" - {description[0]}" if description else ""))
    return "\n".join(lines)


def format_calls(calls: Sequence[Call], think: str | None = "I will call the functions.") -> str:
    """A completion in the requested format (``think=None``: no think block)."""
    block = json.dumps([{"name": name, "arguments": args} for name, args in calls], ensure_ascii=False)
    call = f"<tool_call>{block}</tool_call>"
    return call if think is None else f"<think>{think}</think>\n{call}"


# ----------------------------------------------------------------------------- parsing


def as_call(item: Any) -> Call | None:
    """One parsed call object (``{"name": str, "arguments"|"parameters": dict or JSON text}``) as a
    :class:`Call`; ``None`` when it is not one."""
    if isinstance(item, dict) and isinstance(item.get("name"), str):
        args = item.get("arguments", item.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return None
        if isinstance(args, dict):
            return item["name"], args
    return None


def parse_calls(text: str) -> list[Call]:
    """Calls in the last ``<tool_call>`` block (lenient: list, object, or JSON lines); [] if none."""
    blocks = _TOOL_CALL.findall(text)
    if not blocks:
        return []
    body = blocks[-1].strip()
    try:
        items = json.loads(body)
        items = items if isinstance(items, list) else [items]
    except ValueError:
        items = []
        for line in body.splitlines():
            try:
                items.append(json.loads(line))
            except ValueError:
                if line.strip():
                    return []
    calls = [as_call(item) for item in items]
    return [c for c in calls if c is not None] if all(c is not None for c in calls) else []


def format_ok(text: str, think: bool = True) -> bool:
    """Whether ``text`` is exactly ``[<think>…</think>] <tool_call>[calls]</tool_call>``."""
    pattern = r"\s*<think>(.+?)</think>\s*<tool_call>(.*?)</tool_call>\s*" if think else (
        r"\s*<tool_call>(.*?)</tool_call>\s*"
    )
    match = re.fullmatch(pattern, text, re.DOTALL)
    if not match or text.count("<tool_call>") != 1 or (think and text.count("<think>") != 1):
        return False
    if think and not match.group(1).strip():
        return False
    try:
        items = json.loads(match.group(match.lastindex))
    except ValueError:
        return False
    return isinstance(items, list) and all(
        isinstance(i, dict) and set(i) == {"name", "arguments"} and as_call(i) for i in items
    )


# ----------------------------------------------------------------------------- BFCL values


def standardize(text: str) -> str:
    """BFCL's string normal form: no spaces or ``,./-_*^``, lowercase, ``'`` -> ``"``."""
    return _STRING_NOISE.sub("", text).lower().replace("'", '"')


def _std(value: Any) -> Any:
    return standardize(value) if isinstance(value, str) else value


def _answer_type(options: Sequence[Any]) -> type | None:
    return next((type(o) for o in options if o != ""), None)


def _dict_ok(value: dict, options: Sequence[Any]) -> bool:
    for option in options:
        if option == "" or not isinstance(option, dict):
            continue
        if all(k in option and _std(v) in [_std(o) for o in option[k]] for k, v in value.items()) and all(
            k in value or "" in opts for k, opts in option.items()
        ):
            return True
    return False


def _list_of_dicts_ok(value: list, options: Sequence[Any]) -> bool:
    return any(
        isinstance(option, list)
        and len(option) == len(value)
        and all(isinstance(v, dict) and _dict_ok(v, [o]) for v, o in zip(value, option))
        for option in options
    )


def value_ok(value: Any, options: Sequence[Any], prop: Mapping[str, Any]) -> bool:
    """Whether ``value`` is acceptable for a parameter with schema ``prop`` (BFCL semantics)."""
    type_name = prop.get("type", "any")
    expected = _TYPES.get(type_name, str)
    inner_name = (prop.get("items") or {}).get("type") if type_name in ("array", "tuple") else None
    inner = _TYPES.get(inner_name, str) if inner_name else None
    if expected is float and type(value) is int:
        value = float(value)
    answer_type = _answer_type(options)
    is_variable = answer_type is not None and answer_type is not expected
    if type(value) is expected:
        if inner is not None:
            if inner is float:
                value = [float(v) if type(v) is int else v for v in value]
            fits = [
                all(type(v) is inner or type(v) is _answer_type(option) for v in value)
                for option in options
                if isinstance(option, list)
            ]
            if fits and not any(fits):
                return False
    elif answer_type is not None and type(value) is answer_type:
        is_variable = True
    else:
        return False
    if not is_variable:
        if expected is dict:
            return _dict_ok(value, options)
        if expected is list and inner is dict:
            return _list_of_dicts_ok(value, options)
        if expected is str:
            return standardize(value) in [standardize(o) for o in options if isinstance(o, str)]
        if expected is list:
            given = [_std(v) for v in value]
            return any(isinstance(o, list) and given == [_std(x) for x in o] for o in options)
    return value in options


# ----------------------------------------------------------------------------- call scores


def _keys(schema: Mapping[str, Any] | None, answer: Mapping[str, Sequence[Any]]) -> tuple[set, set]:
    """(required, allowed) parameter names for one expected call."""
    params = (schema or {}).get("parameters") or {}
    props = params.get("properties") or {}
    required = set(params.get("required") or []) | {k for k, opts in answer.items() if "" not in opts}
    return required, {k for k in answer if k in props}


def pair_scores(pred: dict[str, Any], answer: Mapping[str, Sequence[Any]], schema: Mapping[str, Any] | None):
    """``(names, values, valid)`` for a predicted call against one expected call of the same name."""
    required, allowed = _keys(schema, answer)
    props = ((schema or {}).get("parameters") or {}).get("properties") or {}
    given = set(pred)
    union = given | required
    names = len(given & allowed) / len(union) if union else 1.0
    checked = required | (given & allowed)
    good = sum(1 for k in checked if k in pred and k in allowed and value_ok(pred[k], answer[k], props[k]))
    values = good / len(checked) if checked else 1.0
    return names, values, names == 1.0 and values == 1.0


def best_pairing(n_pred: int, n_gold: int, score) -> list[tuple[int, int]]:
    """The one-to-one partial pairing ``[(i, j), ...]`` maximizing ``sum score(i, j)``.

    ``score(i, j)`` is ``None`` where prediction ``i`` cannot pair with expected call ``j``.
    Exact (a DP over subsets of expected calls) up to 16 expected calls, greedy beyond.
    """
    if n_gold > 16:
        used: set[int] = set()
        pairs = []
        for i in range(n_pred):
            options = [(score(i, j), j) for j in range(n_gold) if j not in used and score(i, j) is not None]
            if options:
                _, j = max(options)
                used.add(j)
                pairs.append((i, j))
        return pairs
    best: dict[int, tuple[float, tuple]] = {0: (0.0, ())}
    for i in range(n_pred):
        nxt = dict(best)
        for mask, (total, pairs) in best.items():
            for j in range(n_gold):
                s = score(i, j)
                if s is None or mask & (1 << j):
                    continue
                key = mask | (1 << j)
                if key not in nxt or total + s > nxt[key][0]:
                    nxt[key] = (total + s, pairs + ((i, j),))
        best = nxt
    return list(max(best.values(), key=lambda entry: entry[0])[1])


def call_scores(pred: Sequence[Call], gold: Sequence[Mapping[str, Mapping]], functions: Sequence[Mapping]) -> dict:
    """All component values for one completion's calls (see the module docstring)."""
    schemas = {f["name"]: f for f in functions}
    gold_calls = [next(iter(g.items())) for g in gold]
    pred_names = [name for name, _ in pred]
    gold_names = [name for name, _ in gold_calls]
    common = sum(min(pred_names.count(n), gold_names.count(n)) for n in set(gold_names))
    union = len(pred_names) + len(gold_names) - common
    table = {
        (i, j): pair_scores(args, gold_calls[j][1], schemas.get(name))
        for i, (name, args) in enumerate(pred)
        for j, (gold_name, _) in enumerate(gold_calls)
        if name == gold_name
    }
    pairs = best_pairing(len(pred), len(gold_calls), lambda i, j: sum(table[i, j][:2]) if (i, j) in table else None)
    exact = best_pairing(len(pred), len(gold_calls), lambda i, j: 1.0 if (i, j) in table and table[i, j][2] else None)
    size = max(len(pred), len(gold_calls)) or 1
    return {
        "function_name": common / union if union else 1.0,
        "parameter_names": sum(table[p][0] for p in pairs) / size,
        "parameter_values": sum(table[p][1] for p in pairs) / size,
        "all_exact": float(len(pred) == len(gold_calls) and len(exact) == len(gold_calls)),
    }


def reference_calls(
    ground_truth: Sequence[Mapping[str, Mapping]], functions: Sequence[Mapping], literal: bool = False
) -> list[Call]:
    """The first acceptable answer of each expected call, as concrete calls.

    Per parameter the first listed value, ``""`` meaning "omit". A ``dict`` parameter's value
    (and each dict of an array of ``dict`` items) is built from the first value of each of its
    keys the same way, one level deep as BFCL checks it: a value listed under a key is used as
    written, a dict there included (BFCL_v4 live_multiple_121-46-0). Unless
    ``literal``, data quirks are stepped around to the first answer BFCL's own checker accepts:
    a schema-required parameter takes its first non-empty value (BFCL_v4 simple_python_200,
    live_multiple_144-56-0, live_multiple_834-178-9), or the empty string where ``""`` is all it
    lists (live_multiple_507-149-4); a parameter missing from the schema but allowed to be
    omitted is omitted (parallel_multiple_26). Items no answer satisfies under BFCL's checker
    (a required parameter with no acceptable value, or an answer parameter the schema lacks
    and that may not be omitted) get the literal first values; no call scores ``all_exact`` there.
    """
    schemas = {f["name"]: f for f in functions}
    calls = []
    for expected in ground_truth:
        name, answer = next(iter(expected.items()))
        schema = schemas.get(name) or {}
        props = (schema.get("parameters") or {}).get("properties") or {}
        required, _ = _keys(schema, {})
        args = {}
        for key, options in answer.items():
            choices = list(options)
            if not literal and key in required:
                choices = [o for o in options if o != ""]
                if not choices and options:  # only "" listed: the empty string, never omitted
                    args[key] = ""
                    continue
            if not literal and key not in props and "" in options:
                choices = [""]
            if choices and choices[0] != "":
                args[key] = _concrete(choices[0], props.get(key) or {})
        calls.append((name, args))
    return calls


def _first_values(option: Mapping[str, Sequence[Any]]) -> dict:
    # A dict option maps each key to its acceptable values; the first one is taken as written.
    return {k: v[0] for k, v in option.items() if v and v[0] != ""}


def _concrete(option: Any, prop: Mapping[str, Any]) -> Any:
    """One acceptable value of a parameter with schema ``prop`` (dicts per BFCL's dict checkers)."""
    expected = _TYPES.get(prop.get("type", "any"))
    inner = _TYPES.get((prop.get("items") or {}).get("type")) if expected is list else None
    if expected is dict and isinstance(option, dict):
        return _first_values(option)
    if inner is dict and isinstance(option, list) and all(isinstance(o, dict) for o in option):
        return [_first_values(o) for o in option]
    return option


# ----------------------------------------------------------------------------- components


@lru_cache(maxsize=4096)
def _loads(text: str) -> Any:
    return json.loads(text)


@lru_cache(maxsize=4096)
def _text_scores(text: str, ground_truth: str, functions: str) -> dict:
    # Cached: the four scoring components of a suite score the same completions in turn.
    return call_scores(parse_calls(text), _loads(ground_truth), _loads(functions))


def _scores_for(completions: list, columns: Mapping[str, Any]) -> list[dict]:
    for needed in ("functions", "ground_truth"):
        if columns.get(needed) is None:
            raise InputError(f"tool-call rewards need a {needed!r} column (see mrgrpo.rewards.tool_call)")
        if len(columns[needed]) != len(completions):
            raise InputError(f"column {needed!r} has {len(columns[needed])} entries for {len(completions)} completions")
    return [
        _text_scores(completion_text(c), g, f)
        for c, g, f in zip(completions, columns["ground_truth"], columns["functions"])
    ]


def _score_component(name: str) -> RewardComponent:
    def fn(prompts: list, completions: list, **columns: Any) -> list[float | None]:
        return [scores[name] for scores in _scores_for(completions, columns)]

    return RewardComponent(name, (0.0, 1.0), fn)


def format_reward(think: bool = True) -> RewardComponent:
    """``format`` in {0, 1} (see the module docstring)."""

    def fn(prompts: list, completions: list, **columns: Any) -> list[float | None]:
        return [float(format_ok(completion_text(c), think)) for c in completions]

    return RewardComponent("format", (0.0, 1.0), fn)


@register_suite("tool_call", columns=("functions", "ground_truth"))
def tool_call_suite(think: bool = True, weights: dict[str, float] | Sequence[float] | None = None) -> RewardSuite:
    """The ``tool_call`` suite: format, function_name, parameter_names, parameter_values, all_exact.

    Default weights 1 / 1 / 1 / 1 / 0 (``all_exact`` is logged as a metric, not trained on).

    Args:
        think: the format requires a non-empty ``<think>…</think>`` before the call block.
        weights: override the default weights (a full list or a name -> weight mapping).
    """
    components = (format_reward(think),) + tuple(
        _score_component(n) for n in ("function_name", "parameter_names", "parameter_values", "all_exact")
    )
    suite = RewardSuite("tool_call", components, tuple(DEFAULT_WEIGHTS.values()))
    return suite if weights is None else suite.with_weights(weights)
