"""The six interaction protocols for code validation.

==================  ==============================================================  ========
protocol            who speaks                                                      rounds
==================  ==============================================================  ========
``nip``             verifier and one prover take turns on one channel               T
``adp``             the prover speaks once, then the verifier decides               2
``debate``          two provers argue reject (prover0) and accept (prover1);        T
                    everyone reads both channels
``merlin_arthur``   one of the two provers, chosen by the seed, speaks; the         2
                    verifier decides (MAC)
``mnip``            two provers argue the same side, each on a private channel      T
``solo_verifier``   the verifier decides alone                                      1
==================  ==============================================================  ========
"""

from __future__ import annotations

from types import MappingProxyType
from typing import ClassVar

from nip.parameters import HyperParameters
from nip.parameters.protocol import (
    CommonProtocolParameters,
    DebateProtocolParameters,
    MnipProtocolParameters,
    NipProtocolParameters,
)
from nip.protocols._handler import MAIN, VERIFIER, ProtocolHandler, Speakers, shuffled
from nip.protocols._spec import AgentSpec, ChannelSpec

_OwnParameters = NipProtocolParameters | DebateProtocolParameters | MnipProtocolParameters


def _verifier(**kwargs) -> AgentSpec:
    return AgentSpec(name=VERIFIER, human_name="Verifier", is_verifier=True, **kwargs)


class _WithParameters(ProtocolHandler):
    """A protocol with parameters of its own (the ``params_field`` of HyperParameters)."""

    params_field: ClassVar[str]

    def __init__(
        self, common: CommonProtocolParameters | None = None, params: _OwnParameters | None = None
    ):
        #: Its parameters (their defaults when none are passed).
        self.params = params or HyperParameters.model_fields[self.params_field].default_factory()
        super().__init__(
            common,
            max_message_rounds=self.params.max_message_rounds,
            min_message_rounds=self.params.min_message_rounds,
        )


class NipProtocol(_WithParameters):
    """Neural interactive proof: the verifier questions one prover, then decides."""

    name = "nip"
    params_field = "nip_protocol"

    def _build_agents(self) -> tuple[AgentSpec, ...]:
        return (AgentSpec("prover", "Expert", default_stance=1), _verifier())

    def speakers(self, round_id: int, seed: int = 0) -> Speakers:
        verifier_turn = (round_id % 2 == 0) == self.common.verifier_first
        return {VERIFIER if verifier_turn else "prover": (MAIN,)}


class AdpProtocol(ProtocolHandler):
    """Abstract decision problem: the prover sends one message, the verifier decides."""

    name = "adp"
    max_message_rounds = 2

    def _build_agents(self) -> tuple[AgentSpec, ...]:
        return (AgentSpec("prover", "Expert", default_stance=1), _verifier())

    def speakers(self, round_id: int, seed: int = 0) -> Speakers:
        return {"prover": (MAIN,)} if round_id == 0 else {VERIFIER: (MAIN,)}


class MerlinArthurProtocol(ProtocolHandler):
    """Merlin-Arthur classifier (MAC): one prover, picked by the seed, speaks; then decision.

    The provers are anonymous: the verifier is not told which one it heard.
    """

    name = "merlin_arthur"
    max_message_rounds = 2

    def _build_agents(self) -> tuple[AgentSpec, ...]:
        return (
            AgentSpec("prover0", "Expert_1", default_stance=0, anonymous=True),
            AgentSpec("prover1", "Expert_2", default_stance=1, anonymous=True),
            _verifier(),
        )

    def speakers(self, round_id: int, seed: int = 0) -> Speakers:
        if round_id == 0:
            return {"prover0" if seed % 2 == 0 else "prover1": (MAIN,)}
        return {VERIFIER: (MAIN,)}


class SoloVerifierProtocol(ProtocolHandler):
    """The verifier decides alone, in a single round (a baseline with no prover)."""

    name = "solo_verifier"
    max_message_rounds = 1

    def _build_agents(self) -> tuple[AgentSpec, ...]:
        return (_verifier(),)

    def speakers(self, round_id: int, seed: int = 0) -> Speakers:
        return {VERIFIER: (MAIN,)}


class _TwoProverProtocol(_WithParameters):
    """Two provers, each with a channel to the verifier, who questions both at once.

    A 2-round cycle (verifier, both provers), or 3 when sequential (verifier, first, second).
    """

    #: Whether each prover's channel is read by the verifier only (else by everyone).
    private_channels: ClassVar[bool]
    #: The stance prover0 argues by default (prover1 argues accept).
    prover0_stance: ClassVar[int]

    def _build_agents(self) -> tuple[AgentSpec, ...]:
        headers = {
            "prover0_channel": "Question for Expert_1:",
            "prover1_channel": "Question for Expert_2:",
        }
        return (
            AgentSpec("prover0", "Expert_1", default_stance=self.prover0_stance),
            AgentSpec("prover1", "Expert_2", default_stance=1),
            _verifier(response_channel_headers=headers),
        )

    def _build_channels(self) -> tuple[ChannelSpec, ...]:
        everyone = frozenset(self.agent_names)
        return tuple(
            ChannelSpec(
                f"{prover}_channel",
                frozenset({prover, VERIFIER}) if self.private_channels else everyone,
            )
            for prover in ("prover0", "prover1")
        )

    def speakers(self, round_id: int, seed: int = 0) -> Speakers:
        verifier_turn = {VERIFIER: ("prover0_channel", "prover1_channel")}
        if not self.params.sequential:
            if (round_id % 2 == 0) == self.common.verifier_first:
                return verifier_turn
            return {"prover0": ("prover0_channel",), "prover1": ("prover1_channel",)}
        first, second = ("prover0", "prover1")[:: 1 if self.params.prover0_first else -1]
        cycle = [verifier_turn, {first: (f"{first}_channel",)}, {second: (f"{second}_channel",)}]
        if not self.common.verifier_first:
            cycle = cycle[1:] + cycle[:1]
        return cycle[round_id % 3]

    def channel_order(self, agent_name: str, round_id: int, seed: int = 0) -> tuple[str, ...]:
        visible = self.visible_channels(agent_name)
        if agent_name == VERIFIER:
            if self.params.randomize_channel_order:
                return shuffled(visible, seed=seed, round_id=round_id, salt=self.name)
            return visible
        # A prover reads the other prover's channel first and its own last.
        own = f"{agent_name}_channel"
        return (*tuple(c for c in visible if c != own), own)


class DebateProtocol(_TwoProverProtocol):
    """Debate: prover0 argues reject, prover1 argues accept; all read both channels."""

    name = "debate"
    params_field = "debate_protocol"
    private_channels = False
    prover0_stance = 0


class MnipProtocol(_TwoProverProtocol):
    """Multi-prover NIP: two provers argue the same side (accept), each on a private channel."""

    name = "mnip"
    params_field = "mnip_protocol"
    private_channels = True
    prover0_stance = 1


#: Every protocol, by its name in configuration. Immutable: add a protocol by adding a class.
PROTOCOLS: MappingProxyType[str, type[ProtocolHandler]] = MappingProxyType({
    cls.name: cls
    for cls in (
        NipProtocol, AdpProtocol, DebateProtocol, MerlinArthurProtocol, MnipProtocol,
        SoloVerifierProtocol,
    )
})  # fmt: skip
