"""Which floating-point type nip computes in on a CPU, and how to force it (``NIP_CPU_DTYPE``).

"auto": the transformers engine runs float32 (the same answers on every CPU); vLLM under
``nip serve`` and LoRA training use bfloat16 where the CPU has it natively (see
docs/self_hosted.md). ``NIP_CPU_DTYPE`` forces one type everywhere.
"""

from __future__ import annotations

import os

#: The environment variable that forces the dtype of everything nip runs on a CPU.
CPU_DTYPE_ENV = "NIP_CPU_DTYPE"
#: What it may say.
CPU_DTYPES = ("float32", "bfloat16")


def forced_cpu_dtype() -> str | None:
    """The dtype ``NIP_CPU_DTYPE`` forces on a CPU; None where unset (else ``ValueError``)."""
    value = os.environ.get(CPU_DTYPE_ENV, "").strip().lower()
    if not value:
        return None
    if value not in CPU_DTYPES:
        raise ValueError(
            f"{CPU_DTYPE_ENV}={os.environ[CPU_DTYPE_ENV]!r} is not allowed: expected one of "
            f"{', '.join(CPU_DTYPES)} (or unset: each engine's own choice)"
        )
    return value


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def bfloat16_is_emulated() -> bool:
    """Whether ``NIP_CPU_DTYPE`` forces bfloat16 on a CPU that only emulates it (slow)."""
    return forced_cpu_dtype() == "bfloat16" and not cpu_has_native_bf16()


def cpu_dtype(*, fast: bool) -> str:
    """What "auto" means on a CPU: ``NIP_CPU_DTYPE`` where set; else bfloat16 if ``fast`` (vLLM
    under ``nip serve``, LoRA training) and native, float32 otherwise."""
    forced = forced_cpu_dtype()
    if forced is not None:
        return forced
    return "bfloat16" if fast and cpu_has_native_bf16() else "float32"
