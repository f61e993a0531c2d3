"""Reading a completion: decisions (verifier only), channel headers, and bad responses."""

from __future__ import annotations

import pytest

from nip.agents import parse_response
from nip.errors import (
    InvalidDecisionError,
    InvalidResponseError,
    NotAllActiveChannelsInResponseError,
)
from nip.protocols import DebateProtocol, Decision, NipProtocol

NIP = NipProtocol()
VERIFIER, PROVER = NIP.agent("verifier"), NIP.agent("prover")
DEBATE_VERIFIER = DebateProtocol().agent("verifier")
BOTH = ("prover0_channel", "prover1_channel")


@pytest.mark.parametrize(
    ("text", "decision"),
    [
        ("Decision: accept", Decision.ACCEPT),
        ("decision: REJECT", Decision.REJECT),
        ("After thinking it over.\nDecision: reject.", Decision.REJECT),
        ("**Decision:** accept", Decision.ACCEPT),
        ("Decision : accepted", Decision.ACCEPT),
    ],
)
def test_a_verifier_decision_is_read_anywhere_in_the_text(text, decision):
    parsed = parse_response(text, spec=VERIFIER, channels=("main",), can_decide=True)
    assert parsed.decision is decision
    assert parsed.channel_messages == {}


def test_a_verifier_question_is_a_message_on_its_channel():
    parsed = parse_response(" Question: why? ", spec=VERIFIER, channels=("main",), can_decide=True)
    assert parsed == parsed.__class__({"main": "Question: why?"}, Decision.NONE)


def test_a_prover_that_writes_decision_keeps_its_message():
    """The original treated it as a decision and dropped the prover's message."""
    text = "Answer: the only sensible Decision: accept."
    parsed = parse_response(text, spec=PROVER, channels=("main",), can_decide=False)
    assert parsed.decision is Decision.NONE
    assert parsed.channel_messages == {"main": text}


def test_a_decision_other_than_accept_or_reject_is_invalid():
    with pytest.raises(InvalidDecisionError, match="'maybe'"):
        parse_response("Decision: maybe", spec=VERIFIER, channels=("main",), can_decide=True)


def test_a_decision_where_the_verifier_may_not_decide_is_invalid():
    with pytest.raises(InvalidResponseError, match="may not decide"):
        parse_response("Decision: accept", spec=VERIFIER, channels=("main",), can_decide=False)


@pytest.mark.parametrize("text", [None, "", "   \n"])
def test_an_empty_response_is_invalid(text):
    with pytest.raises(InvalidResponseError, match="empty"):
        parse_response(text, spec=PROVER, channels=("main",), can_decide=False)


def test_a_multi_channel_response_is_split_at_the_headers_which_are_kept():
    text = "Thinking...\nquestion for expert_2: Why b?\nQuestion for Expert_1: Why a?"
    parsed = parse_response(text, spec=DEBATE_VERIFIER, channels=BOTH, can_decide=True)
    assert parsed.channel_messages == {
        "prover1_channel": "question for expert_2: Why b?",
        "prover0_channel": "Question for Expert_1: Why a?",
    }


def test_a_multi_channel_response_missing_a_header_is_invalid():
    with pytest.raises(NotAllActiveChannelsInResponseError, match="Question for Expert_2"):
        parse_response(
            "Question for Expert_1: why?", spec=DEBATE_VERIFIER, channels=BOTH, can_decide=True
        )


def test_a_multi_channel_response_with_an_empty_part_is_invalid():
    with pytest.raises(NotAllActiveChannelsInResponseError, match="empty"):
        parse_response(
            "Question for Expert_1:\nQuestion for Expert_2: b?",
            spec=DEBATE_VERIFIER,
            channels=BOTH,
            can_decide=True,
        )


def test_a_multi_channel_verifier_may_decide_without_headers():
    parsed = parse_response(
        "Decision: reject", spec=DEBATE_VERIFIER, channels=BOTH, can_decide=True
    )
    assert parsed.decision is Decision.REJECT
