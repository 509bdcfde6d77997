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

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.utils.checkpoint
from torch import Tensor
from transformers.modeling_outputs import BaseModelOutputWithPast

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


def shared_row_groups(input_ids: Tensor, attention_mask: Tensor) -> list[tuple[list[int], int]]:
    """Rows of ``[B, L]`` inputs grouped by a shared leading run of columns: ``[(rows, shared)]``.

    A row joins the first group whose first row agrees with it (token and mask) on at least
    :data:`MIN_SHARED_TOKENS` leading columns; ``shared`` is what every row of the group agrees
    on, at most ``L − 1`` (each row keeps a column of its own). A group of one has ``shared`` 0.
    """
    same_token = (input_ids[:, None, :] == input_ids[None, :, :]) & (attention_mask[:, None, :] == attention_mask[None, :, :])
    agree = same_token.long().cumprod(dim=-1).sum(dim=-1).tolist()  # [B, B] leading columns in common
    width = input_ids.shape[1]
    groups: list[tuple[list[int], int]] = []
    for row in range(input_ids.shape[0]):
        for index, (rows, shared) in enumerate(groups):
            if agree[rows[0]][row] >= MIN_SHARED_TOKENS:
                groups[index] = (rows + [row], min(shared, agree[rows[0]][row]) if len(rows) > 1 else agree[rows[0]][row])
                break
        else:
            groups.append(([row], 0))
    return [(rows, min(shared, width - 1) if len(rows) > 1 else 0) for rows, shared in groups]


def _shared_prefix(original: Any, ids: Tensor, mask: Tensor) -> tuple[Tensor, Any]:
    """The shared columns' hidden states ``[1, S, H]`` and key/value cache.

    With gradients on, the forward runs under activation checkpointing: only its outputs (the
    hidden states and the cache's keys and values, which every row's own columns attend to) are
    kept, and backward recomputes the rest. A 700-token prompt's activations are ~1.5 GB in
    float32 on SmolLM2-135M; recomputing them costs one forward of the prompt, once per group.
    """
    made: list[Any] = []

    def forward(ids: Tensor, mask: Tensor) -> tuple[Tensor, ...]:
        out = original(input_ids=ids, attention_mask=mask, use_cache=True)
        if not made:  # the first run's cache is the one used; a recomputation's is dropped
            made.append(getattr(out, "cache", None) or out.past_key_values)
        return (out.last_hidden_state,)

    if not torch.is_grad_enabled():
        (states,) = forward(ids, mask)
    else:
        (states,) = torch.utils.checkpoint.checkpoint(forward, ids, mask, use_reentrant=False)
    return states, made[0]


def _backbone_sharing_prefix(backbone: Any, original: Any) -> Any:
    def forward(*args: Any, **kwargs: Any) -> Any:
        input_ids, attention_mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        # what a causal LM passes its backbone besides ids and mask is None/False here (no cache,
        # positions from 0, no extra outputs); anything else takes the plain forward
        others = {k for k, v in kwargs.items() if v is not None and v is not False} - {
            "input_ids", "attention_mask", "use_cache", "return_dict"}
        if args or input_ids is None or attention_mask is None or others or input_ids.shape[0] < 2:
            return original(*args, **kwargs)
        groups = shared_row_groups(input_ids, attention_mask)
        # transformers 5.25 renamed the backbone's past_key_values to cache (the old name warns)
        cache_keyword = "cache" if "cache" in inspect.signature(original).parameters else "past_key_values"
        if all(len(rows) == 1 for rows, _ in groups):
            return original(*args, **kwargs)
        hidden = [None] * input_ids.shape[0]
        for rows, shared in groups:
            ids, mask = input_ids[rows], attention_mask[rows]
            if len(rows) == 1 or shared < MIN_SHARED_TOKENS:
                states = original(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
            else:
                prefix_states, cache = _shared_prefix(original, ids[:1, :shared], mask[:1, :shared])
                cache.batch_repeat_interleave(len(rows))
                rest = original(input_ids=ids[:, shared:], attention_mask=mask, use_cache=True, **{cache_keyword: cache})
                states = torch.cat([prefix_states.expand(len(rows), -1, -1), rest.last_hidden_state], dim=1)
            for row, state in zip(rows, states):
                hidden[row] = state
        return BaseModelOutputWithPast(last_hidden_state=torch.stack(hidden))

    return forward


@contextmanager
def prompt_shared_forward(model: Any) -> Iterator[bool]:
    """Within the block, ``model``'s transformer backbone computes each group of rows that share a
    leading run of columns (a GRPO group's prompt: its rollouts, left-padded alike) once for the
    group, then each row's own columns on top of it (the shared part's key/value cache repeated
    per row). Yields whether it is active.

    The hidden states are the unshared computation's, row for row (up to float rounding: the
    shared part runs at batch size 1), positions included (the model numbers columns from 0, pads
    too, as without sharing); the gradient of the shared part is the sum of its rows' gradients,
    as it is when each row recomputes it. Costs: the prompt's forward and backward once per group
    instead of once per rollout. Inactive (the plain forward) where it cannot apply: a model with
    gradient checkpointing (recomputation would re-run the cache), without a ``base_model``
    backbone or a ``batch_repeat_interleave`` cache, or inputs other than ids and a mask.
    """
    unwrapped = getattr(model, "module", model)
    backbone = getattr(unwrapped, "base_model", None)
    if backbone is None or backbone is unwrapped or getattr(unwrapped, "is_gradient_checkpointing", False):
        yield False
        return
    own = backbone.__dict__.get("forward")  # an instance-level forward (a hook's) is put back as it was
    backbone.forward = _backbone_sharing_prefix(backbone, backbone.forward)
    try:
        yield True
    finally:
        if own is None:
            del backbone.forward
        else:
            backbone.forward = own


class PromptSharingMixin:
    """Trainer mixin: with ``share_prompt=True`` the loss's forward passes compute a group's
    prompt once (:func:`prompt_shared_forward` around TRL's
    ``_get_per_token_logps_and_entropies``, named in :mod:`mrgrpo.train.trl_compat`).

    It helps where a micro-batch holds several rollouts of one prompt
    (``per_device_train_batch_size`` a multiple of ``num_generations``' share of it) and the
    prompt is long against the completion; it needs gradient checkpointing off (the caller checks:
    ``mrgrpo train`` refuses the pair). Off by default: the logps then equal stock TRL's bit for
    bit; on, they agree to float rounding.
    """

    def __init__(self, *args: Any, share_prompt: bool = False, **kwargs: Any) -> None:
        if not isinstance(share_prompt, bool):
            raise TypeError(f"share_prompt must be true or false, got {share_prompt!r}")
        self.share_prompt = share_prompt
        super().__init__(*args, **kwargs)

    def _get_per_token_logps_and_entropies(self, model: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.share_prompt:
            return super()._get_per_token_logps_and_entropies(model, *args, **kwargs)  # type: ignore[misc]
        with prompt_shared_forward(self.accelerator.unwrap_model(model)):  # type: ignore[attr-defined]
            return super()._get_per_token_logps_and_entropies(model, *args, **kwargs)  # type: ignore[misc]
