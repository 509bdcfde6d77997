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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mrgrpo.rewards.base import RewardComponent, RewardSuite, completion_text, register_suite

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


@register_suite("testbed")
def testbed_suite(scales: Mapping[str, float] | None = None) -> RewardSuite:
    """The testbed suite; ``scales`` multiplies components (and their ranges), e.g. ``{low: 100}``."""
    scales = dict(scales or {})
    unknown = sorted(set(scales) - set(COMPONENTS))
    if unknown:
        raise ValueError(f"scales: unknown component(s) {unknown}; the testbed has {list(COMPONENTS)}")
    for name, value in scales.items():
        if not value > 0:
            raise ValueError(f"scales.{name} must be > 0, got {value}")
    components = [_component(name, float(scales.get(name, 1.0))) for name in COMPONENTS]
    return RewardSuite("testbed", components)


# --------------------------------------------------------------------------------------------
# Supervised warm start (shared by every estimator of one seed: the paired design)


def warm_start(
    config: Any,
    seed: int,
    out_dir: str | Path,
    steps: int = 300,
    learning_rate: float = 3e-3,
    batch_size: int = 32,
    format_rate: float = 0.6,
) -> Path:
    """Fit the ``tiny`` preset (initialized with ``seed``) to the task's training prompts by
    supervised next-token prediction on the completion only; save model and tokenizer to
    ``out_dir`` (a loadable model directory) and return it. Idempotent: an existing
    ``out_dir/config.json`` is reused.

    The targets are ``<answer>N</answer>`` with probability ``format_rate`` and the bare
    number otherwise, so the format reward starts below 1. ``steps`` sets how well the
    arithmetic is learned before RL (fewer steps: lower starting accuracy).
    """
    import torch

    from mrgrpo.train.tasks import build_dataset
    from mrgrpo.train.tiny import build_model, build_tokenizer

    out_dir = Path(out_dir)
    if (out_dir / "config.json").is_file():
        return out_dir
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=seed)
    dataset = build_dataset(config.task, "train", chat=True)
    rng = random.Random(seed)
    prompts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in dataset["prompt"]]
    answers = [str(a) for a in dataset["answer"]]
    expressions = [json.loads(e)["metadata"].get("expression", "") for e in dataset["task_entry"]]
    eos = tokenizer.eos_token
    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    targets = [
        (tokenizer(f"{x} = {a}. <answer>{a}</answer>{eos}", add_special_tokens=False)["input_ids"],
         tokenizer(f"{x} = {a}.{eos}", add_special_tokens=False)["input_ids"])
        for a, x in zip(answers, expressions)
    ]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
        model.train()
        for _ in range(steps):
            idx = [rng.randrange(len(prompts)) for _ in range(batch_size)]
            ids, labels = [], []
            for i in idx:
                p = prompt_ids[i]
                c = targets[i][0] if rng.random() < format_rate else targets[i][1]
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
    tmp.rename(out_dir)
    return out_dir
