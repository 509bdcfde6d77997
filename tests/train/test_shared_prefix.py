"""Generation that computes a batch's shared prefix once gives what each row alone gives."""

from __future__ import annotations

import pytest
import torch

from mrgrpo.train import tiny
from mrgrpo.train.shared_prefix import MIN_SHARED_TOKENS, common_prefix_length, generate_sharing_prefix


@pytest.fixture(scope="module")
def policy():
    tokenizer = tiny.build_tokenizer()
    model = tiny.build_model(tokenizer, seed=3).eval()
    return model, tokenizer


def test_common_prefix_length():
    assert common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_length([[5, 6], [5, 6]]) == 2
    assert common_prefix_length([[1], [2]]) == 0
    assert common_prefix_length([[7, 8, 9]]) == 3


def _alone(model, ids: list[int], new: int) -> tuple[list[int], torch.Tensor]:
    out = model.generate(
        input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        max_new_tokens=new, do_sample=False, output_scores=True, return_dict_in_generate=True, pad_token_id=0,
    )
    return out.sequences[0, len(ids):].tolist(), torch.stack(out.scores, dim=1)[0]


def _rows(tokenizer) -> list[list[int]]:
    """A shared prompt longer than MIN_SHARED_TOKENS, then per-row turns of different lengths (a second turn)."""
    prompt = tokenizer("system\nPut the final number inside <answer></answer>.\nuser\n" * 3)["input_ids"]
    assert len(prompt) > MIN_SHARED_TOKENS
    suffixes = ["", "assistant\n3 + 4 = 7", "tool\nresult 12\n", "assistant\n9 - 2 = 7. <answer>7</answer>\n"]
    return [prompt + tokenizer(s)["input_ids"] for s in suffixes]


@pytest.mark.parametrize("identical", [True, False], ids=["first-turn", "later-turn"])
def test_each_row_continues_as_it_would_alone(policy, identical):
    model, tokenizer = policy
    rows = _rows(tokenizer)
    if identical:  # every rollout of a group starts from the same prompt
        rows = [rows[1]] * 4
    sequences, width = generate_sharing_prefix(
        model, rows, pad=0, max_new_tokens=6, do_sample=False, output_scores=True, return_dict_in_generate=True,
    )
    scores = torch.stack(sequences.scores, dim=1)
    assert width >= max(len(r) for r in rows)
    for i, ids in enumerate(rows):
        tokens, alone_scores = _alone(model, ids, 6)
        assert sequences.sequences[i, width:].tolist() == tokens
        torch.testing.assert_close(scores[i], alone_scores, atol=1e-4, rtol=1e-4)


def test_short_or_single_inputs_take_the_plain_path(policy):
    model, tokenizer = policy
    short = [tokenizer("user\n1 + 2")["input_ids"], tokenizer("user\n5 - 3 =")["input_ids"]]
    assert common_prefix_length(short) < MIN_SHARED_TOKENS
    sequences, width = generate_sharing_prefix(model, short, pad=0, max_new_tokens=4, do_sample=False)
    assert width == max(len(r) for r in short)  # left padding only
    for i, ids in enumerate(short):
        assert sequences[i, width:].tolist() == _alone(model, ids, 4)[0]
    single, width = generate_sharing_prefix(model, _rows(tokenizer)[:1], pad=0, max_new_tokens=4, do_sample=False)
    assert single.shape[0] == 1 and width == len(_rows(tokenizer)[0])
