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
from types import MappingProxyType
from typing import Any

from nip.backends._types import ChatBackend
from nip.backends.local.backend import LocalBackend
from nip.backends.local.vllm_backend import LocalVllmBackend
from nip.errors import InvalidParameterError
from nip.parameters.agents import DEFAULT_LOCAL_MODEL

#: Every ``local_engine`` (see :class:`~nip.settings.ExperimentSettings`), by name.
LOCAL_ENGINES: Mapping[str, Callable[..., ChatBackend]] = MappingProxyType(
    {"transformers": LocalBackend, "vllm": LocalVllmBackend}
)


def local_backend(
    model: str = DEFAULT_LOCAL_MODEL, *, engine: str = "transformers", **options: Any
) -> ChatBackend:
    """The embedded model's backend on the engine named ``engine``; ``options`` go to its class.

    Raises:
        InvalidParameterError: No engine has that name.
    """
    if engine not in LOCAL_ENGINES:
        raise InvalidParameterError("local_engine", engine, " or ".join(map(repr, LOCAL_ENGINES)))
    return LOCAL_ENGINES[engine](model, **options)
