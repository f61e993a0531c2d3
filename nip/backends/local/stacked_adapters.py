"""One plain LoRA adapter for vLLM from a stack of adapters.

vLLM applies one adapter per request, so a stack (:mod:`nip.backends.local.adapters`) is served
as its exact sum: each adapter's update is ``s_i · B_i A_i`` (``s_i = alpha_i / r_i``), and
concatenating along the rank,

    A = [A_1; A_2; ...],  B = [s_1 B_1, s_2 B_2, ...],  scaling 1,

gives ``B A = Σ s_i B_i A_i`` with rank ``Σ r_i`` (zero-padded to a rank vLLM accepts). Unlike
PEFT's ``add_weighted_adapter(combination_type="cat")`` this needs only the adapter files.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nip.backends.local.adapters import AdapterStack
from nip.errors import UnservableAdapterError

_WEIGHTS = "adapter_model.safetensors"
_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<side>[AB])\.weight$")


def concatenated_rank(stack: AdapterStack, allowed_ranks: Sequence[int] | None = None) -> int:
    """The rank of the adapter :func:`write_concatenated_adapter` writes for ``stack``."""
    total = sum(int(_config(layer.path)["r"]) for layer in stack.layers)
    return _padded(total, allowed_ranks)


def write_concatenated_adapter(
    stack: AdapterStack, out: Path, *, allowed_ranks: Sequence[int] | None = None
) -> int:
    """Write the single adapter equal to ``stack`` (predecessors first) into ``out``; returns its
    rank, zero-padded up to the smallest of ``allowed_ranks`` that fits (None: the exact sum).

    Raises:
        UnservableAdapterError: An adapter uses what the sum cannot express (DoRA, per-module
            ranks, weights other than LoRA A/B), or the sum exceeds every allowed rank.
    """
    import torch
    from safetensors.torch import load_file, save_file

    configs = [_config(layer.path) for layer in stack.layers]
    for layer, config in zip(stack.layers, configs, strict=True):
        if config.get("use_dora") or config.get("rank_pattern") or config.get("alpha_pattern"):
            raise UnservableAdapterError(
                f"{layer.path}: DoRA or per-module ranks cannot be stacked for vLLM"
            )
    ranks = [int(c["r"]) for c in configs]
    rank = _padded(sum(ranks), allowed_ranks)
    pairs: dict[str, list[tuple[Any, Any] | None]] = {}
    for index, (layer, config) in enumerate(zip(stack.layers, configs, strict=True)):
        scaling = config["lora_alpha"] / (
            math.sqrt(ranks[index]) if config.get("use_rslora") else ranks[index]
        )
        for module, (a, b) in _pairs(layer.path / _WEIGHTS, load_file).items():
            pairs.setdefault(module, [None] * len(configs))[index] = (a, b * scaling)
    tensors = {}
    for module, per_layer in pairs.items():
        known = next(p for p in per_layer if p is not None)
        fan_in, fan_out = known[0].shape[1], known[1].shape[0]
        parts = [  # zeros where an adapter lacks the module, and for the padding
            pair if pair is not None else (torch.zeros(r, fan_in), torch.zeros(fan_out, r))
            for pair, r in zip([*per_layer, None], [*ranks, rank - sum(ranks)], strict=True)
        ]
        for side, axis in (("A", 0), ("B", 1)):  # A stacked along rows, B along columns
            joined = torch.cat([part[axis].float() for part in parts], axis)
            tensors[f"{module}.lora_{side}.weight"] = joined.to(known[0].dtype).contiguous()
    config = dict(configs[-1])
    config.update(r=rank, lora_alpha=rank, use_rslora=False, rank_pattern={}, alpha_pattern={})
    config["target_modules"] = sorted(
        {m for c in configs for m in _as_list(c.get("target_modules"))}
    ) or configs[-1].get("target_modules")
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / _WEIGHTS))
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return rank


def _config(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "adapter_config.json").read_text())


def _pairs(path: Path, load_file: Any) -> dict[str, tuple[Any, Any]]:
    """The (A, B) matrices of every module in an adapter's weights file."""
    if not path.is_file():
        raise UnservableAdapterError(
            f"{path.parent}: no {_WEIGHTS} (only safetensors adapters are stacked)"
        )
    halves: dict[str, dict[str, Any]] = {}
    for key, tensor in load_file(str(path)).items():
        match = _KEY.match(key)
        if match is None:
            raise UnservableAdapterError(f"{path.parent}: {key!r} is not a LoRA A/B matrix")
        halves.setdefault(match["module"], {})[match["side"]] = tensor
    return {module: (h["A"], h["B"]) for module, h in halves.items()}


def _padded(total: int, allowed_ranks: Sequence[int] | None) -> int:
    if allowed_ranks is None:
        return total
    fitting = [r for r in sorted(allowed_ranks) if r >= total]
    if not fitting:
        raise UnservableAdapterError(
            f"the stacked adapters add up to rank {total}, above the largest rank the engine "
            f"serves ({max(allowed_ranks)})"
        )
    return fitting[0]


def _as_list(value: Any) -> list[str]:
    return list(value) if isinstance(value, list | tuple | set) else []
