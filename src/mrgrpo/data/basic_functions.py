"""Procedural code problems a small model can solve: one-line Python functions with assert tests.

Each problem asks for one function of one argument (``add_7(x)``, ``is_multiple_of_3(n)``,
``repeat_word(s)``, ...), states its name and what it returns with an example, and is checked by
four ``assert`` tests run in the sandbox; the reference is the one-line solution (the code
suite's ``ast_similarity`` and ``efficiency`` need one). Problems come from :data:`TEMPLATES`
with seeded constants: ``random.Random(f"basic_functions:{seed}:{index}")`` for problem
``index``, so a set is the same on every machine, and two indices rarely give the same problem
(duplicates are skipped). The split is by index range (train first, test after), so no problem
is in both.

Why it exists: HumanEval is far beyond SmolLM2-135M-Instruct (pass stays 0, so the code suite's
two heaviest components, pass and efficiency, never give a signal); these problems are within
its reach, so every code component can be nonzero in a short CPU run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mrgrpo.errors import ConfigError

INSTRUCTION = "{prompt}\n\nReply with the complete Python function in a single ```python code block."


@dataclass(frozen=True)
class Template:
    """A family of problems: a name, a description and a body, each with the constant ``k``."""

    name: str  # function name, may use {k}
    arg: str
    text: str  # what it returns, may use {k}
    body: str  # the returned expression, may use {k} and the argument
    inputs: Callable[[random.Random], list[Any]]
    constant: Callable[[random.Random], int]
    function: Callable[[Any, int], Any]

    @property
    def family(self) -> str:
        """The name without its constant: ``add_{k}`` -> ``add``, ``repeat_{k}_times`` -> ``repeat_times``."""
        return self.name.replace("_{k}", "")


def _ints(rng: random.Random) -> list[int]:
    return [rng.randint(-9, 20) for _ in range(4)]


def _words(rng: random.Random) -> list[str]:
    pool = ["cat", "sun", "tree", "blue", "code", "red", "moon", "fish", "book", "star"]
    return rng.sample(pool, 4)


def _lists(rng: random.Random) -> list[list[int]]:
    return [[rng.randint(0, 9) for _ in range(rng.randint(1, 5))] for _ in range(4)]


TEMPLATES: tuple[Template, ...] = (
    Template("add_{k}", "x", "x plus {k}", "x + {k}", _ints, lambda r: r.randint(2, 12), lambda x, k: x + k),
    Template("subtract_{k}", "x", "x minus {k}", "x - {k}", _ints, lambda r: r.randint(2, 12), lambda x, k: x - k),
    Template("times_{k}", "x", "x multiplied by {k}", "x * {k}", _ints, lambda r: r.randint(2, 9), lambda x, k: x * k),
    Template("is_multiple_of_{k}", "n", "True if n is divisible by {k}, else False", "n % {k} == 0", _ints,
             lambda r: r.randint(2, 7), lambda x, k: x % k == 0),
    Template("is_greater_than_{k}", "x", "True if x is greater than {k}, else False", "x > {k}", _ints,
             lambda r: r.randint(0, 10), lambda x, k: x > k),
    Template("square_plus_{k}", "x", "the square of x plus {k}", "x * x + {k}", _ints, lambda r: r.randint(1, 9),
             lambda x, k: x * x + k),
    Template("repeat_{k}_times", "s", "the string s repeated {k} times", "s * {k}", _words, lambda r: r.randint(2, 4),
             lambda x, k: x * k),
    Template("first_{k}_letters", "s", "the first {k} characters of the string s", "s[:{k}]", _words,
             lambda r: r.randint(1, 3), lambda x, k: x[:k]),
    Template("sum_plus_{k}", "numbers", "the sum of the list numbers plus {k}", "sum(numbers) + {k}", _lists,
             lambda r: r.randint(1, 9), lambda x, k: sum(x) + k),
    Template("count_above_{k}", "numbers", "how many items of the list numbers are greater than {k}",
             "len([v for v in numbers if v > {k}])", _lists, lambda r: r.randint(0, 6),
             lambda x, k: len([v for v in x if v > k])),
)


FAMILIES: tuple[str, ...] = tuple(t.family for t in TEMPLATES)


def templates_of(families: Sequence[str] | None) -> tuple[Template, ...]:
    """The templates of ``families`` (None: all), in :data:`TEMPLATES` order; an unknown name is an error."""
    if families is None:
        return TEMPLATES
    if isinstance(families, str) or not all(isinstance(f, str) for f in families) or not families:
        raise ConfigError(f"families must be a non-empty list of names from {list(FAMILIES)}, got {families!r}")
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise ConfigError(f"unknown families {unknown}; known: {list(FAMILIES)}")
    chosen = set(families)
    return tuple(t for t in TEMPLATES if t.family in chosen)


def problem(index: int, seed: int = 0, families: Sequence[str] | None = None) -> dict[str, Any]:
    """Problem ``index`` of the seeded set: ``{task_id, prompt, test, reference, entry_point}``.

    ``families``: draw only from these templates (:data:`FAMILIES`; None: all ten, the same
    problems as before the option existed)."""
    return _problem(index, seed, templates_of(families))


def _problem(index: int, seed: int, pool: tuple[Template, ...]) -> dict[str, Any]:
    rng = random.Random(f"basic_functions:{seed}:{index}")
    template = pool[rng.randrange(len(pool))]
    k = template.constant(rng)
    name = template.name.format(k=k)
    inputs = template.inputs(rng)
    example_in = inputs[0]
    example_out = template.function(example_in, k)
    prompt = (
        f"Write a Python function `{name}({template.arg})` that returns {template.text.format(k=k)}. "
        f"For example, `{name}({example_in!r})` returns `{example_out!r}`."
    )
    tests = [f"assert {name}({value!r}) == {template.function(value, k)!r}" for value in inputs]
    reference = f"def {name}({template.arg}):\n    return {template.body.format(k=k)}\n"
    return {"task_id": f"basic/{index}", "prompt": prompt, "test": tests, "reference": reference, "entry_point": name}


def basic_function_items(count: int, seed: int = 0, start: int = 0, families: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """``count`` distinct problems from index ``start`` on (a duplicate function name + tests is
    skipped), drawn from ``families`` (None: all)."""
    pool = templates_of(families)  # resolved (and checked) once, not per problem
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    index = start
    while len(out) < count:
        item = _problem(index, seed, pool)
        key = item["reference"] + "\n".join(item["test"])
        if key not in seen:
            seen.add(key)
            out.append(item)
        index += 1
        if index - start > 50 * count + 1000:  # pragma: no cover - the templates allow far more
            raise ValueError(f"basic functions: only {len(out)} distinct problems from index {start}")
    return out
