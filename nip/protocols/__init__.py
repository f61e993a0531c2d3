"""Interaction protocols: who speaks when, who sees what, who wins.

Build the handler for a configuration with :func:`build_protocol_handler`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nip.errors import InvalidParameterError, UnknownProtocolError
from nip.protocols._handler import MAIN, VERIFIER, ProtocolHandler
from nip.protocols._spec import AgentSpec, ChannelSpec, Decision, StepOutcome, datapoint_stance
from nip.protocols.decision_scales import DECISION_SCALES, DecisionScale, ScalePoint, decision_scale
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
    "MAIN",
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
    """The shipped handler class of the protocol called ``name`` (``UnknownProtocolError``)."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise UnknownProtocolError(
            f"unknown interaction protocol {name!r}; choose one of {', '.join(PROTOCOLS)}, or "
            "pass the class of a protocol of your own as protocol= (Session(params, "
            "protocol=MyProtocol), build_trainer, PureTextEiTrainer.resume)"
        ) from None


def build_protocol_handler(
    hyper_params: HyperParameters, protocol: type[ProtocolHandler] | None = None
) -> ProtocolHandler:
    """Build the protocol handler a configuration asks for.

    Args:
        protocol: The class of a protocol of your own (by default the shipped one named by
            ``interaction_protocol``).

    Raises:
        UnknownProtocolError: No class was passed and no shipped protocol has the name.
        InvalidParameterError: The class has another name, or other agents, than the config.
    """
    cls = protocol or protocol_class(hyper_params.interaction_protocol)
    if cls.name != hyper_params.interaction_protocol:
        raise InvalidParameterError(
            "interaction_protocol",
            hyper_params.interaction_protocol,
            repr(cls.name),
            reason=f"the protocol passed, {cls.__name__}, is called {cls.name!r}",
        )
    if set(cls.agent_names) != set(hyper_params.agents):
        raise InvalidParameterError(
            "agents",
            sorted(hyper_params.agents),
            ", ".join(cls.agent_names),
            reason=f"{cls.name!r} has the agents {', '.join(cls.agent_names)}",
        )
    if cls.params_field is None:
        return cls(hyper_params.protocol_common)  # type: ignore[call-arg]
    return cls(hyper_params.protocol_common, hyper_params.get(cls.params_field))  # type: ignore[call-arg]
