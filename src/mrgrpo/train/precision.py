"""Which floating-point precision a run trains in: ``trainer.bf16: auto | true | false``.

bfloat16 autocast pays off only where the hardware computes it natively. On a CPU without
bfloat16 instructions PyTorch emulates it, and a step is slower than in float32 (SmolLM2's
tool-calling config, 2 cores without AVX-512 BF16: 98-126 s a step in bfloat16 against its
~50 s budget). So ``auto``, the default, asks the hardware:

* CUDA: bfloat16 where ``torch.cuda.is_bf16_supported()`` (Ampere and newer);
* CPU: bfloat16 where the CPU has bfloat16 instructions: ``avx512_bf16`` or ``amx_bf16`` among
  the x86 flags, or ``bf16`` among the ARM features of ``/proc/cpuinfo``; anywhere else (no
  ``/proc/cpuinfo``: macOS, Windows) float32, which is never slower than emulated bfloat16.

``true`` and ``false`` force it either way (``fp16: true`` with ``auto`` gives float16 alone).
The decision and its reason are logged once per run (:class:`Precision.line`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrgrpo.errors import ConfigError

AUTO = "auto"
#: x86 flags / ARM features (``/proc/cpuinfo``) that mean native bfloat16 arithmetic.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
CPUINFO = Path("/proc/cpuinfo")


def cpu_bf16_flags(cpuinfo: Path | None = None) -> tuple[str, ...]:
    """The :data:`NATIVE_BF16_FLAGS` this CPU reports (``cpuinfo``: default :data:`CPUINFO`;
    empty where it is unreadable)."""
    try:
        text = Path(CPUINFO if cpuinfo is None else cpuinfo).read_text(errors="replace")
    except OSError:
        return ()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86, ARM: the first processor speaks for all
            present = set(value.split())
            return tuple(flag for flag in NATIVE_BF16_FLAGS if flag in present)
    return ()


@dataclass(frozen=True)
class Precision:
    """The resolved ``bf16`` setting of a run and why."""

    bf16: bool
    reason: str

    def line(self) -> str:
        """One log line: ``precision: bfloat16 autocast (...)`` or ``precision: float32 (...)``."""
        return f"precision: {'bfloat16 autocast' if self.bf16 else 'float32'} ({self.reason})"


def resolve_bf16(setting: Any, cuda: bool, fp16: bool = False, cpuinfo: Path | None = None) -> Precision:
    """``trainer.bf16`` (``"auto"``, ``None`` = auto, or a bool) for a CUDA or CPU run.

    ``fp16``: float16 was asked for, so ``auto`` leaves bfloat16 off."""
    if isinstance(setting, bool):
        return Precision(setting, f"trainer.bf16: {str(setting).lower()}")
    if setting not in (None, AUTO):
        raise ConfigError(f"trainer.bf16 must be auto, true or false, got {setting!r}")
    if fp16:
        return Precision(False, "trainer.fp16 is set")
    if cuda:
        import torch

        native = bool(torch.cuda.is_bf16_supported())
        return Precision(native, f"auto: this GPU {'computes' if native else 'has no native'} bfloat16"
                         + ("" if native else "; set trainer.bf16: true to force it"))
    flags = cpu_bf16_flags(cpuinfo)
    if flags:
        return Precision(True, f"auto: this CPU has native bfloat16 ({', '.join(flags)}); "
                         "set trainer.bf16: false for float32")
    return Precision(False, "auto: this CPU has no native bfloat16 instructions (emulated bfloat16 is slower "
                     "than float32); set trainer.bf16: true to force it")
