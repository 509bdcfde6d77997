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
