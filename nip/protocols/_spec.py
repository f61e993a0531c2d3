"""Plain records describing a protocol's agents, channels and the outcome of a round."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum


class Decision(IntEnum):
    """A verifier decision code, as in the original: 0 reject, 1 accept, 2 no decision, and
    3 neither (the verifier ended the episode at the middle of a decision scale)."""

    REJECT = 0
    ACCEPT = 1
    NONE = 2
    NEITHER = 3

    @property
    def word(self) -> str:
        """How prompts, transcripts and plots write it: reject, accept, no decision or neither."""
        return ("reject", "accept", "no decision", "neither")[self]


@dataclass(frozen=True)
class AgentSpec:
    """One agent of a protocol.

    Attributes:
        name: The agent's id in configs and records (``"prover0"``).
        human_name: How prompts name the agent (``"Expert_1"``).
        default_stance: A prover's unrandomised stance: 0 reject, 1 accept.
        anonymous: Other agents' prompts do not name this agent.
        response_channel_headers: For an agent writing several channels at once, the header
            of each channel's part of its response.
    """

    name: str
    human_name: str
    is_verifier: bool = False
    default_stance: int | None = None
    anonymous: bool = False
    response_channel_headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_prover(self) -> bool:
        return not self.is_verifier


@dataclass(frozen=True)
class ChannelSpec:
    """A message channel and the agents that can read it."""

    name: str
    visible_to: frozenset[str]


@dataclass(frozen=True)
class StepOutcome:
    """What a round means for the episode.

    Attributes:
        terminated: The verifier's last chance passed without a decision.
        decision: The effective decision this round (after ``force_guess``).
        score: The verifier's score in [-1, 1] when it decided, else None.
    """

    done: bool
    terminated: bool
    decision: Decision
    rewards: Mapping[str, float]
    score: float | None = None


def datapoint_stance(solution: str) -> int:
    """The stance (0 reject, 1 accept) a randomised prover argues: SHA-256 parity of the text."""
    return hashlib.sha256(solution.encode("utf-8")).digest()[-1] & 1
