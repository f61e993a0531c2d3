"""Which floating-point type nip computes in on a CPU, and how to force it (``NIP_CPU_DTYPE``).

Left to nip ("auto"), a CPU runs the embedded transformers engine (and the ``Local`` provider's
vLLM engine) in float32, which gives the same answers on every CPU, while vLLM under
``nip serve`` and LoRA training's mixed precision use bfloat16 where the CPU multiplies it
natively (AVX512-BF16 or AMX: several times faster) and float32 elsewhere. Two machines of
different kinds therefore sample different text from the same seed. ``NIP_CPU_DTYPE=float32``
or ``NIP_CPU_DTYPE=bfloat16`` makes all of them use that type on any CPU: to see on one machine
what the other kind computes (bfloat16 without native support is emulated, several times
slower), or to keep vLLM's answers exact on a machine that has bfloat16.
"""

from __future__ import annotations

import os

#: The environment variable that forces the dtype of everything nip runs on a CPU.
CPU_DTYPE_ENV = "NIP_CPU_DTYPE"
#: What it may say.
CPU_DTYPES = ("float32", "bfloat16")


def forced_cpu_dtype() -> str | None:
    """The dtype ``NIP_CPU_DTYPE`` forces on a CPU; None where it is unset or empty.

    Raises:
        ValueError: It says something else (the message names the variable and the choices).
    """
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
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), where mixed
    precision trains several times faster than float32."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def bfloat16_is_emulated() -> bool:
    """Whether ``NIP_CPU_DTYPE`` forces bfloat16 on a CPU that only emulates it (several times
    slower than float32)."""
    return forced_cpu_dtype() == "bfloat16" and not cpu_has_native_bf16()


def cpu_dtype(*, fast: bool) -> str:
    """What "auto" means on a CPU: ``NIP_CPU_DTYPE`` where set; else bfloat16 for what
    favours speed (``fast``: vLLM under ``nip serve``, LoRA training) on a CPU with native
    bfloat16, and float32 for everything else (the transformers engine: exact answers, the
    same on every CPU)."""
    forced = forced_cpu_dtype()
    if forced is not None:
        return forced
    return "bfloat16" if fast and cpu_has_native_bf16() else "float32"
