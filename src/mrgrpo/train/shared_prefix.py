"""Sampling a batch whose inputs share a long prefix: the prefix runs through the model once.

A GRPO group's rollouts start from the same prompt, and in a multi-turn episode every turn
re-reads it: with ``num_generations`` rollouts of a 700-token AgentDojo prompt, each turn's
prefill was ``num_generations`` copies of the same 700 tokens (a third of a CPU step's time).
:func:`generate_sharing_prefix` computes the key/value cache of the batch's longest common
prefix for one row, repeats it for every row (``Cache.batch_repeat_interleave``) and lets
``generate`` continue from it.

Layout: the rows' own suffixes differ in length, so the padding goes *between* the shared
prefix and each suffix, ``[prefix][pad … pad][suffix_i]``, with an attention mask of 0 on the
pads. ``generate`` derives position ids from the mask's running count, so every suffix token
has the position it has in the unpadded row, and no token attends to a pad: the result is the
unshared computation's up to float rounding (the prefix is computed at batch size 1, so a
reduction may add in another order). Inputs without a long enough common prefix, or a batch
of one, take ``generate``'s own left-padded path.
"""

from __future__ import annotations

from typing import Any

import torch

# Below this many shared tokens, one batched prefill costs about what the extra forward call does.
MIN_SHARED_TOKENS = 32


def common_prefix_length(inputs: list[list[int]]) -> int:
    """Length of the longest prefix all ``inputs`` share."""
    first = inputs[0]
    length = min(len(ids) for ids in inputs)
    for ids in inputs[1:]:
        same = 0
        while same < length and ids[same] == first[same]:
            same += 1
        length = same
    return length


def generate_sharing_prefix(model: Any, inputs: list[list[int]], pad: int, **generate_kwargs: Any) -> tuple[Any, int]:
    """``model.generate`` over ``inputs`` (token id lists), the shared prefix computed once.

    Returns ``(sequences, width)``: ``generate``'s ``[B, width + new]`` output and the width of
    the input part, after which each row's new tokens start. Runs under ``torch.inference_mode``
    in whatever train/eval mode the caller set.
    """
    rows = len(inputs)
    # at least one token of every row is left for generate's first forward (it produces the logits)
    shared = min(common_prefix_length(inputs), min(len(ids) for ids in inputs) - 1)
    device = model.device
    with torch.inference_mode():
        if rows < 2 or shared < MIN_SHARED_TOKENS:
            width = max(len(ids) for ids in inputs)
            input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in inputs], device=device)
            attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in inputs], device=device)
            return model.generate(input_ids=input_ids, attention_mask=attention, **generate_kwargs), width
        prefix = torch.tensor([inputs[0][:shared]], device=device)
        cache = model(input_ids=prefix, use_cache=True).past_key_values
        cache.batch_repeat_interleave(rows)
        tail = max(len(ids) - shared for ids in inputs)
        width = shared + tail
        input_ids, attention = [], []
        for ids in inputs:
            gap = tail - (len(ids) - shared)
            input_ids.append(ids[:shared] + [pad] * gap + ids[shared:])
            attention.append([1] * shared + [0] * gap + [1] * (len(ids) - shared))
        sequences = model.generate(
            input_ids=torch.tensor(input_ids, device=device),
            attention_mask=torch.tensor(attention, device=device),
            past_key_values=cache,
            **generate_kwargs,
        )
    return sequences, width
