"""``trainer.bf16: auto | true | false``: bfloat16 autocast only where the hardware computes it natively."""

from __future__ import annotations

import pytest

from mrgrpo.train import precision
from mrgrpo.train.config import ConfigError, validate_config
from mrgrpo.train.job import grpo_config, run_precision
from mrgrpo.train.precision import cpu_bf16_flags, resolve_bf16

from .conftest import tiny_config

X86_NATIVE = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
X86_AVX512_ONLY = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni\n"
X86_AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
ARM_BF16 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"
ARM_PLAIN = "processor\t: 0\nFeatures\t: fp asimd crc32 atomics\n"


def _cpuinfo(tmp_path, text):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "flags"),
    [(X86_NATIVE, ("avx512_bf16", "amx_bf16")), (X86_AVX512_ONLY, ()), (X86_AVX2, ()), (ARM_BF16, ("bf16",)),
     (ARM_PLAIN, ())],
)
def test_native_bfloat16_is_read_from_the_cpu_flags(tmp_path, text, flags):
    assert cpu_bf16_flags(_cpuinfo(tmp_path, text)) == flags


def test_an_unreadable_cpuinfo_means_no_native_bfloat16(tmp_path):
    assert cpu_bf16_flags(tmp_path / "missing") == ()
    assert resolve_bf16("auto", cuda=False, cpuinfo=tmp_path / "missing").bf16 is False


def test_auto_follows_the_cpu_and_says_why(tmp_path):
    native = resolve_bf16("auto", cuda=False, cpuinfo=_cpuinfo(tmp_path, X86_NATIVE))
    assert native.bf16 is True and "avx512_bf16" in native.line() and native.line().startswith("precision: bfloat16")
    emulated = resolve_bf16(None, cuda=False, cpuinfo=_cpuinfo(tmp_path, X86_AVX512_ONLY))
    assert emulated.bf16 is False and "no native bfloat16" in emulated.line() and "trainer.bf16: true" in emulated.line()


@pytest.mark.parametrize("forced", [True, False])
def test_true_and_false_force_it_on_any_cpu(tmp_path, forced):
    for text in (X86_NATIVE, X86_AVX2):
        assert resolve_bf16(forced, cuda=False, cpuinfo=_cpuinfo(tmp_path, text)).bf16 is forced


def test_auto_leaves_bfloat16_off_when_fp16_is_asked(tmp_path):
    assert resolve_bf16("auto", cuda=False, fp16=True, cpuinfo=_cpuinfo(tmp_path, X86_NATIVE)).bf16 is False


def test_anything_else_is_refused():
    with pytest.raises(ValueError, match="auto, true or false"):
        resolve_bf16("fast", cuda=False)


def test_the_config_accepts_auto_and_refuses_other_words():
    assert validate_config(tiny_config(trainer={"bf16": "auto"})).trainer["bf16"] == "auto"
    with pytest.raises(ConfigError) as info:
        validate_config(tiny_config(trainer={"bf16": "fast"}), "test.yaml")
    assert "trainer.bf16: expected auto, true or false, got 'fast'" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("text", "expected"), [(X86_NATIVE, True), (X86_AVX512_ONLY, False)])
def test_a_cpu_run_trains_in_what_its_cpu_computes_natively(tmp_path, monkeypatch, text, expected):
    monkeypatch.setattr(precision, "CPUINFO", _cpuinfo(tmp_path, text))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    for trainer in ({}, {"bf16": "auto"}):  # unset means auto
        config = validate_config(tiny_config(trainer=trainer))
        assert run_precision(config).bf16 is expected
        assert grpo_config(config, tmp_path / "run").bf16 is expected
    forced = validate_config(tiny_config(trainer={"bf16": not expected}))
    assert grpo_config(forced, tmp_path / "run").bf16 is (not expected)
