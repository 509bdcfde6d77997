"""Generation that computes a batch's shared prefix once gives what each row alone gives."""

from __future__ import annotations

import contextlib

import pytest
import torch

from mrgrpo.train import tiny
from mrgrpo.train.shared_prefix import MIN_SHARED_TOKENS, common_prefix_length, generate_sharing_prefix, shared_row_groups


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


def _training_batch(tokenizer):
    """Two prompts (a GRPO batch: each prompt's rollouts are consecutive), left-padded to one
    width, each rollout's completion right-padded: TRL's layout for the loss."""
    prompts = [tokenizer("system\nPut the final number inside <answer></answer>.\nuser\n3 + 4 =\n" * k)["input_ids"] for k in (2, 3)]
    completions = ["7. <answer>7</answer>", "<answer>8</answer>", "seven", "", "1", "<answer>7"]
    width = max(len(p) for p in prompts)
    rows, masks = [], []
    done = [tokenizer(c)["input_ids"] for c in completions]
    tail = max(len(c) for c in done) + 1
    for index, completion in enumerate(done):
        prompt = prompts[index // 3]
        row = [0] * (width - len(prompt)) + prompt + completion + [1] + [0] * (tail - len(completion) - 1)
        mask = [0] * (width - len(prompt)) + [1] * (len(prompt) + len(completion) + 1) + [0] * (tail - len(completion) - 1)
        rows.append(row), masks.append(mask)
    return torch.tensor(rows), torch.tensor(masks), tail


def _logps_and_grads(model, input_ids, mask, keep, share):
    from mrgrpo.train.shared_prefix import prompt_shared_forward

    model.zero_grad(set_to_none=True)
    with prompt_shared_forward(model) if share else contextlib.nullcontext(False) as active:
        logits = model(input_ids=input_ids, attention_mask=mask, logits_to_keep=keep + 1).logits[:, :-1]
    logps = torch.log_softmax(logits.float(), -1).gather(-1, input_ids[:, -keep:, None])[..., 0]
    (logps * mask[:, -keep:]).sum().backward()
    return active, logps.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_a_prompt_shared_forward_gives_each_rows_logps_and_the_same_gradient(policy):
    model, tokenizer = policy
    model.train()
    input_ids, mask, keep = _training_batch(tokenizer)
    assert [len(rows) for rows, _ in shared_row_groups(input_ids, mask)] == [3, 3]
    active, shared_logps, shared_grads = _logps_and_grads(model, input_ids, mask, keep, share=True)
    plain_active, logps, grads = _logps_and_grads(model, input_ids, mask, keep, share=False)
    assert active and not plain_active
    torch.testing.assert_close(shared_logps, logps, atol=1e-5, rtol=1e-5)
    assert shared_grads.keys() == grads.keys()
    for name in grads:
        torch.testing.assert_close(shared_grads[name], grads[name], atol=1e-5, rtol=1e-4)
    assert "forward" not in model.base_model.__dict__  # the model is left as it was


def test_gradient_checkpointing_keeps_the_plain_forward(policy):
    from mrgrpo.train.shared_prefix import prompt_shared_forward

    model, _ = policy
    model.gradient_checkpointing_enable()
    try:
        with prompt_shared_forward(model) as active:
            assert not active
    finally:
        model.gradient_checkpointing_disable()


def test_rows_group_by_their_shared_leading_columns():
    ids = torch.tensor([[5] * 40 + [1, 2], [5] * 40 + [1, 3], [6] * 40 + [1, 2], [5] * 40 + [9, 9]])
    mask = torch.ones_like(ids)
    assert shared_row_groups(ids, mask) == [([0, 1, 3], 40), ([2], 0)]
    mask[3, :2] = 0  # the same tokens, padded otherwise: not the same prefix
    assert shared_row_groups(ids, mask) == [([0, 1], 41), ([2], 0), ([3], 0)]


def _trainer(tmp_path, share_prompt: bool):
    from mrgrpo.tasks.registry import task_rows
    from mrgrpo.train.config import TaskConfig
    from mrgrpo.train.presets import load_model
    from mrgrpo.train.trainer import MultiRewardGRPOTrainer

    from .conftest import tiny_grpo_config

    loaded = load_model("tiny")
    length = lambda prompts, completions, **kwargs: [float(len(str(c))) for c in completions]  # noqa: E731
    args = tiny_grpo_config(tmp_path, max_steps=2, per_device_train_batch_size=8, num_generations=4)
    return MultiRewardGRPOTrainer(
        model=loaded.model, reward_funcs=[length], args=args, processing_class=loaded.tokenizer,
        train_dataset=task_rows(TaskConfig(size=8, eval_size=1), "train", chat=True), estimator="grpo",
        share_prompt=share_prompt,
    )


def test_the_trainer_computes_the_loss_forward_with_the_prompt_shared(tmp_path, monkeypatch):
    from mrgrpo.train import shared_prefix

    trainer = _trainer(tmp_path, share_prompt=True)
    input_ids, mask, keep = _training_batch(trainer.processing_class)
    active = []
    original = shared_prefix.prompt_shared_forward

    @contextlib.contextmanager
    def spy(model):
        with original(model) as on:
            active.append(on)
            yield on

    monkeypatch.setattr(shared_prefix, "prompt_shared_forward", spy)
    shared = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, mask, keep, compute_entropy=True)
    trainer.share_prompt = False
    plain = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, mask, keep, compute_entropy=True)
    assert active == [True]  # only the shared call went through it
    torch.testing.assert_close(shared[0], plain[0], atol=1e-5, rtol=1e-5)  # logps
    torch.testing.assert_close(shared[1], plain[1], atol=1e-5, rtol=1e-5)  # entropies
    trainer.share_prompt = True
    trainer.train()  # a whole step with it: generation, loss, backward, optimizer
    assert trainer.state.global_step == 2


def test_share_prompt_with_gradient_checkpointing_is_refused_in_the_config(tiny):
    from mrgrpo.train.config import validate_config

    with pytest.raises(ValueError, match="share_prompt needs trainer.gradient_checkpointing off"):
        validate_config(tiny(share_prompt=True, trainer={"gradient_checkpointing": True}))
    assert validate_config(tiny(share_prompt=True)).share_prompt
