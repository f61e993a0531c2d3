"""What "auto" means on a CPU, and ``NIP_CPU_DTYPE``, which forces it for every engine: the way
to compute, on one machine, as a machine of the other kind (AVX2 or AVX-512 with bfloat16)."""

from __future__ import annotations

import pytest

from nip.utils import precision
from nip.utils.precision import cpu_dtype, forced_cpu_dtype


@pytest.mark.parametrize("native_bf16", [False, True])
def test_unforced_the_fast_engines_use_bfloat16_only_where_the_cpu_has_it(monkeypatch, native_bf16):
    monkeypatch.delenv("NIP_CPU_DTYPE", raising=False)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native_bf16)

    assert forced_cpu_dtype() is None
    assert cpu_dtype(fast=True) == ("bfloat16" if native_bf16 else "float32")
    assert cpu_dtype(fast=False) == "float32"  # the transformers engine: exact everywhere


@pytest.mark.parametrize("forced", ["float32", "bfloat16", " BFloat16 "])
@pytest.mark.parametrize("native_bf16", [False, True])
def test_nip_cpu_dtype_forces_every_engine_on_any_cpu(monkeypatch, forced, native_bf16):
    monkeypatch.setenv("NIP_CPU_DTYPE", forced)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native_bf16)

    assert cpu_dtype(fast=True) == cpu_dtype(fast=False) == forced.strip().lower()


@pytest.mark.parametrize(
    ("forced", "native_bf16", "emulated"),
    [
        ("bfloat16", False, True),
        ("bfloat16", True, False),
        ("float32", False, False),
        ("", False, False),
    ],
)
def test_bfloat16_is_emulated_only_where_forced_on_a_cpu_without_it(
    monkeypatch, forced, native_bf16, emulated
):
    monkeypatch.setenv("NIP_CPU_DTYPE", forced)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native_bf16)

    assert precision.bfloat16_is_emulated() is emulated


def test_an_empty_nip_cpu_dtype_is_as_if_unset(monkeypatch):
    monkeypatch.setenv("NIP_CPU_DTYPE", "")

    assert forced_cpu_dtype() is None


def test_an_unknown_nip_cpu_dtype_names_the_variable_and_the_choices(monkeypatch):
    monkeypatch.setenv("NIP_CPU_DTYPE", "bf16")

    with pytest.raises(ValueError, match=r"NIP_CPU_DTYPE='bf16' is not allowed: .*float32"):
        cpu_dtype(fast=True)


@pytest.mark.parametrize("forced", ["float32", "bfloat16"])
def test_the_embedded_engine_reads_auto_as_nip_cpu_dtype_on_a_cpu(monkeypatch, forced):
    import torch

    from nip.backends.local._engine import resolve_dtype

    monkeypatch.setenv("NIP_CPU_DTYPE", forced)

    assert resolve_dtype("auto", torch.device("cpu")) == getattr(torch, forced)
    assert resolve_dtype("float32", torch.device("cpu")) == torch.float32  # asked for: kept
