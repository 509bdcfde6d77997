"""The ``tiny`` preset: a Qwen2 policy of ~0.3M parameters and a tokenizer, both built in code.

The tokenizer is a byte-level BPE trained (in well under a second) on text of the small
arithmetic task it is meant for, with a ChatML-like chat template so the tiny preset runs the
same conversational code path as real instruct models. Nothing is downloaded. Its use is
speed (an end-to-end GRPO run of a few steps takes seconds), not skill: the weights are random.
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any

SPECIAL_TOKENS = ["<|pad|>", "<|eos|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
VOCAB_SIZE = 512


def arithmetic_problem(rng: random.Random, max_operand: int = 9) -> tuple[str, str]:
    """One problem ``(question, answer)`` of the tiny arithmetic task: ``a + b`` or ``a - b``."""
    a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
    op = rng.choice("+-")
    value = a + b if op == "+" else a - b
    return f"State the final answer to the following arithmetic problem: {a} {op} {b} =", str(value)


def _corpus(n: int = 2000) -> list[str]:
    rng = random.Random(0)
    lines = []
    for _ in range(n):
        question, answer = arithmetic_problem(rng)
        lines.append(f"system\nPut the final number inside <answer></answer>.\nuser\n{question}\n")
        lines.append(f"assistant\n{question[-9:]} {answer}. <answer>{answer}</answer>\n")
    return lines


@lru_cache(maxsize=1)
def _tokenizer_json() -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    return tokenizer.to_str()


def build_tokenizer() -> Any:
    """A ``PreTrainedTokenizerFast`` (save it with ``save_pretrained``; reload it with
    ``PreTrainedTokenizerFast.from_pretrained``: ``AutoTokenizer`` has no model type to go by)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json()),
        pad_token="<|pad|>",
        eos_token="<|im_end|>",
        bos_token="<|im_start|>",
        model_input_names=["input_ids", "attention_mask"],  # no token_type_ids (transformers 4.x adds them)
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(tokenizer: Any, seed: int = 0) -> Any:
    """A randomly initialized 4-layer Qwen2 (hidden 64, 2048 positions) sized to ``tokenizer``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,  # RoPE: no parameters; room for tool-listing prompts (AgentDojo, BFCL)
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model
