"""Turning a completion into channel messages and a decision.

Only the verifier decides (a prover writing "Decision: accept" keeps its whole message); what
may follow ``Decision:`` is the protocol's decision scale.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from nip.errors import InvalidResponseError, NotAllActiveChannelsInResponseError
from nip.protocols import DECISION_SCALES, AgentSpec, Decision, DecisionScale

_DECISION = re.compile(r"decision\s*\**\s*:\s*\**\s*(.*)", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class ParsedResponse:
    """A completion split into per-channel messages, or a decision."""

    channel_messages: dict[str, str]
    decision: Decision = Decision.NONE
    #: The verifier's score in [-1, 1] on its decision scale, with a decision.
    score: float | None = None


def parse_response(
    text: str | None,
    *,
    spec: AgentSpec,
    channels: Sequence[str],
    can_decide: bool,
    scale: DecisionScale = DECISION_SCALES["accept_reject"],
) -> ParsedResponse:
    """Parse ``text`` written by the agent ``spec`` in a round where it writes to ``channels``.

    Raises:
        InvalidResponseError: Empty text, or a verifier decision in a round where it may not.
        InvalidDecisionError: ``Decision:`` followed by something not on the scale.
        NotAllActiveChannelsInResponseError: A multi-channel response misses a header.
    """
    if text is None or not text.strip():
        raise InvalidResponseError("the response is empty")
    if spec.is_verifier:
        match = _DECISION.search(text)
        if match is not None:
            if not can_decide:
                raise InvalidResponseError("the verifier may not decide in this round")
            point = scale.parse(match.group(1))
            return ParsedResponse({}, point.decision, point.score)
    if len(channels) == 1:
        return ParsedResponse({channels[0]: text.strip()})
    return ParsedResponse(_split_by_headers(text, spec, channels))


def _split_by_headers(text: str, spec: AgentSpec, channels: Sequence[str]) -> dict[str, str]:
    lowered = text.lower()
    positions: list[tuple[int, int, str]] = []
    missing = []
    for channel in channels:
        header = spec.response_channel_headers.get(channel)
        if header is None:
            raise AssertionError(f"{spec.name} has no header for channel {channel!r}")
        start = lowered.find(header.lower())
        if start < 0:
            missing.append(header)
        else:
            positions.append((start, start + len(header), channel))
    if missing:
        raise NotAllActiveChannelsInResponseError(
            f"the response must contain {' and '.join(repr(h) for h in missing)}"
        )
    positions.sort()
    parts = {}
    for i, (start, end, channel) in enumerate(positions):
        stop = positions[i + 1][0] if i + 1 < len(positions) else len(text)
        # Keep the header: a reader of both channels needs to know whom a question is for.
        parts[channel] = text[start:stop].strip() if text[end:stop].strip() else ""
    empty = [c for c, content in parts.items() if not content]
    if empty:
        raise NotAllActiveChannelsInResponseError(f"empty message for channel(s) {empty}")
    return parts
