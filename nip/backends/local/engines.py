"""Which engine runs the ``Local`` provider's model, by ``local_engine`` name: decided here only.

================  ==========================================  ===================================
``local_engine``  backend                                     where it generates
================  ==========================================  ===================================
``transformers``  :class:`~nip.backends.local.LocalBackend`    this process (the default)
``vllm``          :class:`~nip.backends.local.LocalVllmBackend`  a vLLM process the backend owns
================  ==========================================  ===================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from nip.backends._types import ChatBackend
from nip.backends.local.backend import LocalBackend
from nip.backends.local.vllm_backend import LocalVllmBackend
from nip.backends.local.vllm_python import vllm_rank_at_least
from nip.errors import InvalidParameterError
from nip.parameters.agents import DEFAULT_LOCAL_MODEL

if TYPE_CHECKING:
    from nip.parameters import PureTextAgentParameters


def _no_options(params: PureTextAgentParameters) -> dict[str, Any]:
    return {}


def _vllm_options(params: PureTextAgentParameters) -> dict[str, Any]:
    """vLLM fixes the largest adapter rank when it starts: the agents' ``lora_rank``, rounded
    up to a rank vLLM accepts (a stack's ranks add up: pass ``max_lora_rank`` for more)."""
    return {"max_lora_rank": vllm_rank_at_least(params.lora_rank)}


@dataclass(frozen=True)
class LocalEngineEntry:
    """One engine: its backend class, and the options an agent's parameters give it."""

    backend: Callable[..., ChatBackend]
    options: Callable[[PureTextAgentParameters], dict[str, Any]] = field(default=_no_options)


#: Every ``local_engine`` (see :class:`~nip.settings.ExperimentSettings`), by name.
LOCAL_ENGINES: Mapping[str, LocalEngineEntry] = MappingProxyType(
    {
        "transformers": LocalEngineEntry(LocalBackend),
        "vllm": LocalEngineEntry(LocalVllmBackend, _vllm_options),
    }
)


def local_backend(
    model: str = DEFAULT_LOCAL_MODEL,
    *,
    engine: str = "transformers",
    params: PureTextAgentParameters | None = None,
    **options: Any,
) -> ChatBackend:
    """The embedded model's backend on the engine named ``engine``.

    Args:
        model: The model name or folder.
        engine: A key of :data:`LOCAL_ENGINES`.
        params: The agent's parameters, from which the engine may take options (vLLM: the
            largest LoRA rank); ``options`` win over them.
        **options: Keyword arguments of the engine's backend class.

    Raises:
        InvalidParameterError: No engine has that name.
    """
    if engine not in LOCAL_ENGINES:
        raise InvalidParameterError("local_engine", engine, " or ".join(map(repr, LOCAL_ENGINES)))
    entry = LOCAL_ENGINES[engine]
    derived = entry.options(params) if params is not None else {}
    return entry.backend(model, **{**derived, **options})
