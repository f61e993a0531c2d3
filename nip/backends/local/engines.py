"""Which engine runs the ``Local`` provider's model, by ``local_engine`` name: decided here only.

================  ==========================================  ===================================
``local_engine``  backend                                     where it generates
================  ==========================================  ===================================
``transformers``  :class:`~nip.backends.local.LocalBackend`    this process (the default)
``vllm``          :class:`~nip.backends.local.LocalVllmBackend`  a vLLM process the backend owns
``auto``          one of those, by :func:`choose_local_engine`  vLLM on a CUDA device with vLLM
================  ==========================================  ===================================
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from nip.backends._types import ChatBackend
from nip.backends.local.backend import LocalBackend
from nip.backends.local.vllm_backend import LocalVllmBackend
from nip.backends.local.vllm_python import HOW_TO_GET_VLLM, find_vllm_python, vllm_rank_at_least
from nip.errors import InvalidParameterError
from nip.parameters.agents import DEFAULT_LOCAL_MODEL

if TYPE_CHECKING:
    from nip.parameters import PureTextAgentParameters


def _vllm_options(params: PureTextAgentParameters) -> dict[str, Any]:
    """vLLM fixes the largest adapter rank when it starts: the agents' ``lora_rank``, rounded
    up to a rank vLLM accepts (a stack's ranks add up: pass ``max_lora_rank`` for more)."""
    return {"max_lora_rank": vllm_rank_at_least(params.lora_rank)}


@dataclass(frozen=True)
class LocalEngineEntry:
    """One engine: its backend class, and the options an agent's parameters give it."""

    backend: Callable[..., ChatBackend]
    options: Callable[[PureTextAgentParameters], dict[str, Any]] = lambda params: {}


#: Every ``local_engine`` (see :class:`~nip.settings.ExperimentSettings`), by name.
LOCAL_ENGINES: Mapping[str, LocalEngineEntry] = MappingProxyType(
    {
        "transformers": LocalEngineEntry(LocalBackend),
        "vllm": LocalEngineEntry(LocalVllmBackend, _vllm_options),
    }
)


#: Every name ``local_engine`` accepts: an engine, or "auto" (see :func:`choose_local_engine`).
LOCAL_ENGINE_NAMES = ("auto", *LOCAL_ENGINES)

#: vLLM's share of a GPU it shares with the in-process LoRA jobs (its own default is 0.9).
GPU_MEMORY_FOR_VLLM = 0.5


@dataclass(frozen=True)
class EngineChoice:
    """What ``local_engine="auto"`` runs, why, and the options that engine gets for it."""

    engine: str
    reason: str
    options: Mapping[str, Any] = field(default_factory=dict)


def choose_local_engine(cuda: bool | None = None) -> EngineChoice:
    """The engine for ``local_engine="auto"``: vLLM on a CUDA device (``cuda``; None: ask torch)
    where :func:`~nip.backends.local.vllm_python.find_vllm_python` finds it, else transformers."""
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    if not cuda:
        return EngineChoice("transformers", "no CUDA device, where vLLM is not faster")
    python = find_vllm_python()
    if python is None:
        return EngineChoice("transformers", f"a CUDA device but no vLLM: {HOW_TO_GET_VLLM}")
    options = {
        "dtype": "auto",  # bfloat16 where the GPU has it, as the transformers engine uses
        "vllm_python": python,
        "vllm_args": ("--gpu-memory-utilization", str(GPU_MEMORY_FOR_VLLM)),
    }
    return EngineChoice("vllm", f"a CUDA device and vLLM ({python})", options)


def local_backend(
    model: str = DEFAULT_LOCAL_MODEL,
    *,
    engine: str = "transformers",
    params: PureTextAgentParameters | None = None,
    **options: Any,
) -> ChatBackend:
    """The embedded model's backend on ``engine`` (a key of :data:`LOCAL_ENGINES`, or "auto":
    :func:`choose_local_engine` decides and one line on standard error says why), with options
    from the agent's ``params`` (vLLM: the largest LoRA rank), ``options`` winning over them.

    Raises:
        InvalidParameterError: No engine has that name.
    """
    if engine not in LOCAL_ENGINE_NAMES:
        allowed = " or ".join(map(repr, LOCAL_ENGINE_NAMES))
        raise InvalidParameterError("local_engine", engine, allowed)
    chosen: Mapping[str, Any] = {}
    if engine == "auto":
        choice = choose_local_engine()
        print(f"nip: local_engine=auto: {choice.engine} ({choice.reason})", file=sys.stderr)
        engine, chosen = choice.engine, choice.options
    entry = LOCAL_ENGINES[engine]
    derived = entry.options(params) if params is not None else {}
    return entry.backend(model, **{**derived, **chosen, **options})
