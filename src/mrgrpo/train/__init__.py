"""Training: TRL integration (:class:`MultiRewardGRPOTrainer`), the ``train``/``eval`` jobs, presets.

Imported lazily: ``import mrgrpo.train`` does not import TRL until a name is used.
"""

from __future__ import annotations

from typing import Any

from mrgrpo.extras import require

__all__ = ["MultiRewardGRPOTrainer", "MultiRewardMixin", "TrainConfig", "load_config", "load_model", "run_train", "run_eval"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        require("trl", f"mrgrpo.train.{name}")
    if name in ("MultiRewardGRPOTrainer", "MultiRewardMixin"):
        from mrgrpo.train import trainer

        return getattr(trainer, name)
    if name in ("TrainConfig", "load_config"):
        from mrgrpo.train import config

        return getattr(config, name)
    if name == "load_model":
        from mrgrpo.train.presets import load_model

        return load_model
    if name == "run_train":
        from mrgrpo.train.job import run_train

        return run_train
    if name == "run_eval":
        from mrgrpo.train.evaluate import run_eval

        return run_eval
    raise AttributeError(f"module 'mrgrpo.train' has no attribute {name!r}")
