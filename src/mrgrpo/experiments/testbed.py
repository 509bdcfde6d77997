"""A controlled multi-reward testbed: the ``testbed`` reward suite and a supervised warm start.

The task is one-digit arithmetic (reasoning-gym ``chain_sum``, ``a ± b``), the policy the
``tiny`` preset after a short supervised warm start (:func:`warm_start`), so a GRPO run learns
something measurable on a CPU within a minute. Four reward components, each with a declared
range and a ``scale`` set in the config (``rewards.options.scales``):

* ``correct`` — binary: the last integer of the completion equals the reference.
* ``format`` — binary: the completion holds ``<answer>N</answer>`` with an integer ``N``.
  The warm start leaves it below 1 on purpose (``format_rate``), and it saturates early.
* ``close`` — continuous closeness ``1 − min(|pred − ref|, 9) / 9`` (0 without an integer):
  strongly correlated with ``correct`` (the correlated pair).
* ``low`` — continuous preference for small answers ``clip((18 − pred) / 27, 0, 1)``
  (0 without an integer): a stand-in for a style or length term that correct answers tend
  to lose. It **conflicts** with ``correct``: for any prompt it grows by answering below the
  reference. Its scale is the knob (×1, ×10, ×100) that makes one component dominate the
  variance of the weighted total.

Each component's value is multiplied by its scale, and so is its declared range, so
saturation (SA-MRPO) is unaffected by the scale while GRPO's and CorrGRPO's numerators are not.
"""

from __future__ import annotations

import json
import random
import re
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mrgrpo.errors import ConfigError, InputError
from mrgrpo.rewards.base import RewardComponent, RewardSuite, completion_text, register_suite
from mrgrpo.rewards.scaled import scaled_suite  # noqa: F401  (the scale experiments' suite; importable here as before)

COMPONENTS = ("correct", "format", "close", "low")
_INT = re.compile(r"-?\d+")
_TAG = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")


def parse_answer(text: str) -> int | None:
    """The answer of a completion: the number in ``<answer></answer>`` if present, else the last integer."""
    tagged = _TAG.findall(text)
    if tagged:
        return int(tagged[-1])
    found = _INT.findall(text)
    return int(found[-1]) if found else None


def _reference(answer: Any) -> int | None:
    try:
        return int(str(answer).strip())
    except ValueError:
        return None


def _scores(completions: list[Any], answers: list[Any]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in COMPONENTS}
    for completion, answer in zip(completions, answers):
        text = completion_text(completion)
        pred, ref = parse_answer(text), _reference(answer)
        out["format"].append(1.0 if _TAG.search(text) else 0.0)
        if pred is None or ref is None:
            out["correct"].append(0.0)
            out["close"].append(0.0)
            out["low"].append(0.0)
            continue
        out["correct"].append(1.0 if pred == ref else 0.0)
        out["close"].append(1.0 - min(abs(pred - ref), 9) / 9.0)
        out["low"].append(min(max((18.0 - pred) / 27.0, 0.0), 1.0))
    return out


def _component(name: str, scale: float) -> RewardComponent:
    def fn(prompts: list, completions: list, answer: list | None = None, **_: Any) -> list[float | None]:
        answers = answer if answer is not None else [None] * len(completions)
        return [scale * v for v in _scores(completions, answers)[name]]

    fn.__name__ = name
    return RewardComponent(name, (0.0, float(scale)), fn)


#: Optional components (``extra``) for estimators with roles: a cost and a length.
#: ``unformatted`` = 1 − ``format`` (a cost for ``constrained_grpo``), range [0, 1];
#: ``length`` = characters of the completion, clipped to [0, 200] (24 tokens of the tiny
#: tokenizer stay below it), for ``ddca``'s length role. Give them weight 0 to leave the
#: weighted total (and every other estimator's advantage) as without them.
EXTRA = {"unformatted": (0.0, 1.0), "length": (0.0, 200.0)}


def _extra(name: str) -> RewardComponent:
    lo, hi = EXTRA[name]

    def fn(prompts: list, completions: list, **_: Any) -> list[float | None]:
        texts = [completion_text(c) for c in completions]
        if name == "unformatted":
            return [0.0 if _TAG.search(t) else 1.0 for t in texts]
        return [float(min(len(t), hi)) for t in texts]

    fn.__name__ = name
    return RewardComponent(name, (lo, hi), fn)


@register_suite("testbed")
def testbed_suite(scales: Mapping[str, float] | None = None, extra: list[str] | None = None) -> RewardSuite:
    """The testbed suite; ``scales`` multiplies components (and their ranges), e.g. ``{low: 100}``;
    ``extra`` appends optional components after the four (:data:`EXTRA`), e.g. ``[unformatted]``."""
    scales = dict(scales or {})
    unknown = sorted(set(scales) - set(COMPONENTS))
    if unknown:
        raise ConfigError(f"scales: unknown component(s) {unknown}; the testbed has {list(COMPONENTS)}")
    for name, value in scales.items():
        if not value > 0:
            raise ConfigError(f"scales.{name} must be > 0, got {value}")
    extra = list(extra or [])
    bad = sorted(set(extra) - set(EXTRA))
    if bad or len(set(extra)) != len(extra):
        raise ConfigError(f"extra: {bad or extra} is not a list of distinct optional components; choose from {sorted(EXTRA)}")
    components = [_component(name, float(scales.get(name, 1.0))) for name in COMPONENTS] + [_extra(n) for n in extra]
    return RewardSuite("testbed", components)


# --------------------------------------------------------------------------------------------
# Supervised warm start (shared by every estimator of one seed: the paired design)

#: Offsets of a warm-start guess from the right answer (``answer_noise``).
GUESS_OFFSETS = (-2, -1, 1, 2)


def sft_completion(expression: str, answer: str, tagged: bool, guess: str | None = None) -> str:
    """A warm-start target (without end-of-sequence): the worked sum ``"3 + 4 = 7."``, or for a
    ``guess`` the guessed answer alone (``"9."``); then ``" <answer>N</answer>"`` if ``tagged``."""
    if guess is not None:
        answer, worked = guess, f"{guess}."
    else:
        worked = f"{expression} = {answer}." if expression else f"{answer}."
    return f"{worked} <answer>{answer}</answer>" if tagged else worked


def warm_start(
    config: Any,
    seed: int,
    out_dir: str | Path,
    steps: int = 300,
    learning_rate: float = 3e-3,
    batch_size: int = 32,
    format_rate: float = 0.6,
    answer_noise: float = 0.0,
    include_eval: bool = False,
) -> Path:
    """Fit the ``tiny`` preset (initialized with ``seed``) to the task's training prompts by
    supervised next-token prediction on the completion only; save model and tokenizer to
    ``out_dir`` (a loadable model directory) and return it. Idempotent: an existing
    ``out_dir/config.json`` is reused.

    The targets are ``<answer>N</answer>`` with probability ``format_rate`` and the bare
    number otherwise, so the format reward starts below 1. ``steps`` sets how well the
    arithmetic is learned before RL (fewer steps: lower starting accuracy).

    ``answer_noise``: probability that a target is a *guess* instead: the answer alone,
    without the worked expression, and wrong (``c + d``, ``d`` uniform in {−2, −1, +1, +2},
    drawn afresh each time), e.g. ``9. <answer>9</answer>`` for ``3 + 4``. The fitted policy
    then has two modes, working the sum out (right when it knows the fact) and guessing near
    it (always wrong), and samples the guess often: sampled correctness starts low, and RL
    can raise it by learning to work the sum out, a behaviour shared by all prompts. ``include_eval``: also fit the held-out prompts, so they are
    held out of RL only (the warm start plays the part of pretraining knowledge; RL's gains
    on them are what transfers from the training prompts). The tiny model does not generalize
    one-digit arithmetic to problems it never saw, so without it held-out correctness stays
    near what guessing neighbours gives.
    """
    import torch

    from mrgrpo.tasks import task_rows
    from mrgrpo.train.tiny import build_model

    out_dir = Path(out_dir)
    if (out_dir / "config.json").is_file():
        return out_dir
    if not 0.0 <= answer_noise <= 1.0:
        raise ConfigError(f"answer_noise must be in [0, 1], got {answer_noise}")
    tokenizer = reloadable_tokenizer(out_dir.with_name(out_dir.name + ".tok"))
    model = build_model(tokenizer, seed=seed)
    splits = ["train", "eval"] if include_eval else ["train"]
    rows = [row for split in splits for row in task_rows(config.task, split, chat=True)]
    rng = random.Random(seed)
    prompts = [tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True) for row in rows]
    expressions = [json.loads(row["task_entry"])["metadata"].get("expression", "") for row in rows]
    eos = tokenizer.eos_token
    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]

    def target(x: str, a: str, tagged: bool, guessed: str | None = None) -> list[int]:
        return tokenizer(sft_completion(x, a, tagged, guessed) + eos, add_special_tokens=False)["input_ids"]

    def guess(row: dict[str, Any]) -> str | None:
        a = _reference(row["answer"])
        if answer_noise and rng.random() < answer_noise and a is not None:
            return str(a + rng.choice(GUESS_OFFSETS))
        return None

    targets = [(target(x, str(row["answer"]), True), target(x, str(row["answer"]), False)) for row, x in zip(rows, expressions)]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
        model.train()
        for _ in range(steps):
            idx = [rng.randrange(len(prompts)) for _ in range(batch_size)]
            ids, labels = [], []
            for i in idx:
                p = prompt_ids[i]
                tagged = rng.random() < format_rate
                guessed = guess(rows[i])
                c = targets[i][0 if tagged else 1] if guessed is None else target(expressions[i], "", tagged, guessed)
                ids.append(p + c)
                labels.append([-100] * len(p) + c)
            width = max(len(x) for x in ids)
            pad = tokenizer.pad_token_id
            input_ids = torch.tensor([x + [pad] * (width - len(x)) for x in ids])
            label_ids = torch.tensor([y + [-100] * (width - len(y)) for y in labels])
            mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])
            loss = model(input_ids=input_ids, attention_mask=mask, labels=label_ids).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    _check_roundtrip(tokenizer, tmp, prompts[0] + tokenizer.decode(targets[0][0]))
    tmp.rename(out_dir)
    return out_dir


def reloadable_tokenizer(scratch: str | Path) -> Any:
    """The tiny preset's tokenizer *as a saved checkpoint of it reloads*.

    RL and evaluation read the warm start back through
    :func:`mrgrpo.train.presets.load_tokenizer`; fitting the warm start with the tokenizer that
    this reload yields keeps warm start, RL and evaluation on the same ids whatever the loader
    does (a checkpoint with a Qwen2 ``config.json`` once came back as Qwen2's digit-splitting
    tokenizer; the loader now returns the saved tokenizer itself, which this follows).
    """
    import shutil

    from mrgrpo.train.presets import load_tokenizer
    from mrgrpo.train.tiny import build_model, build_tokenizer

    scratch = Path(scratch)
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(scratch)
    build_model(tokenizer).config.save_pretrained(scratch)  # the model type decides the reload
    try:
        return load_tokenizer(str(scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _check_roundtrip(tokenizer: Any, directory: Path, text: str) -> None:
    from mrgrpo.train.presets import load_tokenizer

    reloaded = load_tokenizer(str(directory))
    if reloaded(text, add_special_tokens=False)["input_ids"] != tokenizer(text, add_special_tokens=False)["input_ids"]:
        raise RuntimeError(f"warm start {directory}: the saved tokenizer reloads with other token ids")


# --------------------------------------------------------------------------------------------
# Training-time diagnostics of a comparison, per estimator (the claim table's explanations)


def run_diagnostics(run_dir: str | Path, window: int = 5) -> dict[str, Any]:
    """Summary of one run's ``diagnostics.jsonl`` (written by ``mrgrpo train`` every step):

    * ``distinct_advantages`` / ``distinct_profiles``: mean over steps of the distinct advantage
      values per group of the run's own estimator, and of the distinct reward rows per group
      (fewer advantages than profiles: reward combinations the estimator cannot tell apart);
    * ``saturation_first`` / ``saturation_last``: each component's batch saturation
      ``(mean − lo)/(hi − lo)`` averaged over the first and the last ``window`` steps;
    * ``variance_share``: each component's share of Var(weighted total), *median* over steps:
      a group whose total is constant in exact arithmetic but not in the logged float32 values
      (``close`` and ``low`` can trade exactly) has a Var(total) of ~1e-15 and shares of ±1e6 in
      :func:`mrgrpo.diagnose`, which would decide a mean over steps by itself;
    * ``constant_groups_first`` / ``constant_groups_last``: the fraction of groups whose weighted
      total is constant (no advantage, no gradient), averaged over the first and the last
      ``window`` steps (``None`` for logs that do not carry it).
    """
    lines = [json.loads(x) for x in (Path(run_dir) / "diagnostics.jsonl").read_text().splitlines() if x.strip()]
    if not lines:
        raise InputError(f"{run_dir}: diagnostics.jsonl is empty")
    names = lines[0]["names"]

    def mean(values: list[Any]) -> float | None:
        kept = [float(v) for v in values if v is not None]
        return sum(kept) / len(kept) if kept else None

    def median(values: list[Any]) -> float | None:
        kept = [float(v) for v in values if v is not None]
        return statistics.median(kept) if kept else None

    collapse = [line.get("advantage_collapse") or {} for line in lines]
    return {
        "steps": len(lines),
        "distinct_advantages": mean([next(iter(c.get("distinct_advantages", {}).values()), None) for c in collapse]),
        "distinct_profiles": mean([c.get("distinct_reward_profiles") for c in collapse]),
        "saturation_first": {n: mean([line["components"][n]["saturation"] for line in lines[:window]]) for n in names},
        "saturation_last": {n: mean([line["components"][n]["saturation"] for line in lines[-window:]]) for n in names},
        "variance_share": {n: median([(line.get("variance_share") or {}).get(n) for line in lines]) for n in names},
        "constant_groups_first": mean([line.get("zero_variance_fraction") for line in lines[:window]]),
        "constant_groups_last": mean([line.get("zero_variance_fraction") for line in lines[-window:]]),
    }
