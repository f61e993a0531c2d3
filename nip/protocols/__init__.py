"""Interaction protocols: who speaks when, who sees what, who wins.

Build the handler for a configuration with :func:`build_protocol_handler`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nip.errors import UnknownProtocolError
from nip.protocols._handler import VERIFIER, ProtocolHandler
from nip.protocols._spec import AgentSpec, ChannelSpec, Decision, StepOutcome, datapoint_stance
from nip.protocols.decision_scales import (
    DECISION_SCALES,
    DecisionScale,
    ScalePoint,
    decision_scale,
)
from nip.protocols.protocols import (
    PROTOCOLS,
    AdpProtocol,
    DebateProtocol,
    MerlinArthurProtocol,
    MnipProtocol,
    NipProtocol,
    SoloVerifierProtocol,
)

if TYPE_CHECKING:
    from nip.parameters import HyperParameters

__all__ = [
    "DECISION_SCALES",
    "PROTOCOLS",
    "VERIFIER",
    "AdpProtocol",
    "AgentSpec",
    "ChannelSpec",
    "DebateProtocol",
    "Decision",
    "DecisionScale",
    "MerlinArthurProtocol",
    "MnipProtocol",
    "NipProtocol",
    "ProtocolHandler",
    "ScalePoint",
    "SoloVerifierProtocol",
    "StepOutcome",
    "build_protocol_handler",
    "datapoint_stance",
    "decision_scale",
    "protocol_class",
]


def protocol_class(name: str) -> type[ProtocolHandler]:
    """The handler class of the protocol called ``name``.

    Raises:
        UnknownProtocolError: No protocol has that name.
    """
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise UnknownProtocolError(
            f"unknown interaction protocol {name!r}; choose one of {', '.join(PROTOCOLS)}"
        ) from None


def build_protocol_handler(hyper_params: HyperParameters) -> ProtocolHandler:
    """Build the protocol handler a configuration asks for."""
    cls = protocol_class(hyper_params.interaction_protocol)
    if cls.params_field is None:
        return cls(hyper_params.protocol_common)  # type: ignore[call-arg]
    return cls(hyper_params.protocol_common, hyper_params.get(cls.params_field))  # type: ignore[call-arg]
