"""Parameters of the interaction protocols: rewards, turn order and episode length."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal, NamedTuple

from pydantic import Field

from nip.errors import InvalidParameterError, UnknownProtocolError
from nip.parameters._base import BaseParameters

ForceGuess = Literal["zero", "one", "y"]

InteractionProtocolType = Literal["nip", "adp", "debate", "merlin_arthur", "mnip", "solo_verifier"]

#: Each protocol's agents, in its order (the handler classes read their ``agent_names`` here).
PROTOCOL_AGENT_NAMES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "nip": ("prover", "verifier"),
        "adp": ("prover", "verifier"),
        "debate": ("prover0", "prover1", "verifier"),
        "merlin_arthur": ("prover0", "prover1", "verifier"),
        "mnip": ("prover0", "prover1", "verifier"),
        "solo_verifier": ("verifier",),
    }
)


class ProtocolOnlySetting(NamedTuple):
    """A common protocol setting (a field of ``protocol_common``) that acts in some protocols
    only; elsewhere its ``inert`` value would be accepted and do nothing, so it is refused."""

    field: str
    #: The value that would do nothing where the setting does not act.
    inert: bool
    #: The handler class attribute that says whether it acts (a protocol of one's own sets it).
    declared_by: str
    #: The shipped protocols where it acts.
    acts_in: frozenset[str]
    #: Why it does nothing elsewhere (``{name!r}``: the protocol).
    why: str


#: The one place these facts live: the shipped handler classes read their declarations from it,
#: and the parameters refuse the inert value for a shipped protocol when built.
PROTOCOL_ONLY_SETTINGS: tuple[ProtocolOnlySetting, ...] = (
    ProtocolOnlySetting(
        "randomize_prover_stance",
        True,
        "stance_can_be_randomized",
        frozenset({"nip", "adp", "mnip"}),
        "the provers of {name!r} argue fixed stances",
    ),
    ProtocolOnlySetting(
        "verifier_first",
        False,
        "verifier_first_applies",
        frozenset({"nip", "debate", "mnip"}),
        "{name!r} has a fixed schedule",
    ),
)


def protocol_agent_names(protocol: str) -> tuple[str, ...]:
    """The agents of the shipped protocol called ``protocol``, in its order (else
    UnknownProtocolError)."""
    try:
        return PROTOCOL_AGENT_NAMES[protocol]
    except KeyError:
        raise UnknownProtocolError(
            f"unknown interaction protocol {protocol!r}; choose one of "
            f"{', '.join(PROTOCOL_AGENT_NAMES)}, or name a protocol of your own and its agents "
            "(HyperParameters.agents) and pass its class at run time (Session(..., protocol=))"
        ) from None


def is_shipped_protocol(protocol: str) -> bool:
    """Whether ``protocol`` is one of nip's six protocols (not one defined in user code)."""
    return protocol in PROTOCOL_AGENT_NAMES


#: The verifier decision scales (see :mod:`nip.protocols.decision_scales`).
VerifierDecisionScale = Literal[
    "accept_reject", "likert_4", "likert_5", "likert_6", "likert_7", "likert_int_scale_11",
    "out_of_10", "out_of_100",
]  # fmt: skip


class CommonProtocolParameters(BaseParameters):
    """Rewards and options shared by every protocol (penalties as the verifier's reward)."""

    verifier_reward: float = Field(1.0, description="Verifier reward for a correct decision.")
    verifier_incorrect_penalty: float = Field(
        -1.0, description="Verifier reward for a wrong decision (usually negative)."
    )
    verifier_terminated_penalty: float = Field(
        -1.0, description="Verifier reward when the episode ends without a decision."
    )
    verifier_no_guess_reward: float = Field(
        0.0, description="Verifier reward for each turn in which it does not decide."
    )
    prover_reward: float = Field(
        1.0, description="Prover reward when the verifier's decision matches the prover's stance."
    )
    shared_reward: bool = Field(False, description="Provers receive the verifier's reward instead.")
    force_guess: ForceGuess | None = Field(
        None,
        description="Debugging: replace every verifier decision by reject, accept or the label.",
    )
    verifier_first: bool = Field(True, description="The verifier speaks in the first round.")
    randomize_prover_stance: bool = Field(
        False,
        description="Each datapoint's prover stance is accept or reject by a hash of its solution.",
    )
    verifier_decision_scale: VerifierDecisionScale = Field(
        "accept_reject",
        description="What the verifier writes after 'Decision:' (accept/reject, a Likert scale, a "
        "number); provers are rewarded by its score.",
    )
    prover_invalid_response_penalty: float | None = Field(
        None,
        description="If set: a prover whose response stays invalid after every retry ends the "
        "episode (terminated) and receives this reward (usually negative).",
    )


class _MessageRounds(BaseParameters):
    """The episode length of a protocol with parameters of its own (a mixin of them)."""

    max_message_rounds: int = Field(9, description="Rounds in an episode (T in the paper).", ge=1)
    min_message_rounds: int = Field(
        0, description="The verifier may decide from round min_message_rounds - 1 on.", ge=0
    )

    def validate(self) -> None:
        if self.min_message_rounds > self.max_message_rounds:
            raise InvalidParameterError(
                "min_message_rounds",
                self.min_message_rounds,
                f"at most max_message_rounds={self.max_message_rounds}",
            )


class _TwoProverRounds(_MessageRounds):
    """The length and turn order of a protocol with two provers (a mixin of its parameters)."""

    sequential: bool = Field(
        False,
        description="Provers answer one after the other (a 3-round cycle) instead of together.",
    )
    prover0_first: bool = Field(True, description="In sequential mode, prover0 answers first.")
    randomize_channel_order: bool = Field(
        True,
        description="Shuffle, per round, the order in which the verifier reads the two channels.",
    )


class NipProtocolParameters(_MessageRounds):
    """Length of the nip (prover-verifier conversation) protocol."""


class DebateProtocolParameters(_TwoProverRounds):
    """Length and turn order of the debate protocol (two provers argue opposite sides)."""


class MnipProtocolParameters(_TwoProverRounds):
    """Length and turn order of mnip (two provers, each on a private channel)."""
