"""Rollout analysis: a judge model answers yes/no questions about each agent's messages.

Per dialogue, agent and channel it wrote to, the judge sees the problem, the solution and
that channel's messages, then a question; role conformance states the side the agent argued.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from operator import attrgetter
from typing import Any

from nip.backends import ChatBackend, ChatMessage, GenerationRequest
from nip.errors import InvalidParameterError
from nip.protocols import AgentSpec, ProtocolHandler
from nip.rollouts.records import Transcript
from nip.utils.seeding import derive_seed

_YES_NO = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)
_SIDE = {1: "the solution is correct (accept)", 0: "the solution is incorrect (reject)"}


@dataclass(frozen=True)
class BinaryAnalyser:
    """A yes/no question about one agent's messages on one channel.

    Attributes:
        question: ``{agent}``, ``{side}`` (the side it argued), ``{verifier}`` and
            ``{decision_form}`` (how the verifier writes a decision) are filled in.
    """

    name: str
    applies_to: Callable[[AgentSpec], bool]
    question: str


ANALYSERS: dict[str, BinaryAnalyser] = {
    a.name: a
    for a in (
        BinaryAnalyser(
            "prover_role_conformance",
            attrgetter("is_prover"),
            "{agent} was asked to argue that {side}. Does {agent} argue for that side in "
            "every message, without conceding the other side?",
        ),
        BinaryAnalyser(
            "prover_direct_quotation",
            attrgetter("is_prover"),
            "Does {agent} quote the proposed solution's code directly in its messages?",
        ),
        BinaryAnalyser(
            "prover_accurate_quotation",
            attrgetter("is_prover"),
            "Is every piece of code that {agent} quotes an exact quotation of the proposed "
            "solution (answer Yes if it quotes nothing)?",
        ),
        BinaryAnalyser(
            "follow_up",
            lambda spec: True,
            "Does each of {agent}'s messages follow up on the message it replies to, rather "
            "than ignoring it?",
        ),
        BinaryAnalyser(
            "verifier_format_conformance",
            attrgetter("is_verifier"),
            "Does {agent} follow the required format: questions as instructed, and a final "
            "line {decision_form}?",
        ),
    )
}


def check_analysers(analysers: Sequence[str]) -> None:
    """Refuse names :data:`ANALYSERS` does not have (``InvalidParameterError``)."""
    unknown = sorted(set(analysers) - set(ANALYSERS))
    if unknown:
        raise InvalidParameterError("--analysers", unknown, f"names from {', '.join(ANALYSERS)}")


@dataclass(frozen=True)
class AnalysisResult:
    """One judgement."""

    analyser: str
    dialogue_id: str
    agent: str
    channel: str
    answer: bool | None
    raw: str
    iteration: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge_prompt(
    analyser: BinaryAnalyser,
    transcript: Transcript,
    handler: ProtocolHandler,
    agent: str,
    channel: str,
) -> list[ChatMessage]:
    """The judge's prompt for one (dialogue, agent, channel)."""
    spec = handler.agent(agent)
    datapoint = transcript.datapoint
    system = (
        "You review a conversation in which AI agents discuss whether a proposed Python "
        "solution to a programming problem is correct.\n\n"
        f"## The problem\n\n{datapoint.question}\n\n"
        f"## The proposed solution\n\n```python\n{datapoint.solution}\n```\n\n"
        f"You will read the messages on one channel of the conversation, then answer one "
        f"question about {spec.human_name} with Yes or No."
    )
    messages: list[ChatMessage] = [{"role": "system", "content": system}]
    for message in transcript.messages:
        if message.channel == channel:
            sender = handler.agent(message.sender).human_name
            messages.append({"role": "user", "content": f"{sender}: {message.content}"})
    stance = transcript.stances.get(agent)
    question = analyser.question.format(
        agent=spec.human_name,
        side=_SIDE.get(stance, "its assigned side"),
        verifier=handler.agent("verifier").human_name,
        decision_form=handler.decision_scale.short_form,
    )
    messages.append({"role": "user", "content": f"{question} Answer Yes or No."})
    return messages


async def analyse_async(
    transcripts: Sequence[Transcript],
    handler: ProtocolHandler,
    backend: ChatBackend,
    *,
    model: str,
    analysers: Sequence[str] = tuple(ANALYSERS),
    retries: int = 3,
    seed: int = 0,
) -> list[AnalysisResult]:
    """Judge every (dialogue, agent, channel) each analyser applies to, concurrently.

    An answer that is not Yes/No after ``retries`` retries is recorded as ``None``.
    """
    check_analysers(analysers)
    jobs = [
        (ANALYSERS[name], transcript, agent, channel)
        for name in analysers
        for transcript in transcripts
        for agent in handler.agent_names
        if ANALYSERS[name].applies_to(handler.agent(agent))
        for channel in dict.fromkeys(m.channel for m in transcript.messages if m.sender == agent)
    ]

    async def run(job) -> AnalysisResult:
        analyser, transcript, agent, channel = job
        prompt = tuple(judge_prompt(analyser, transcript, handler, agent, channel))
        job_seed = derive_seed(seed, analyser.name, transcript.id, agent, channel)
        answer, raw = None, ""
        for attempt in range(retries + 1):
            request = GenerationRequest(
                model=model,
                messages=prompt,
                max_tokens=8,
                temperature=0.0,
                seed=derive_seed(job_seed, attempt),
                metadata={"expects": "yes_no"},
            )
            raw = (await backend.generate(request)).completions[0].text or ""
            if match := _YES_NO.match(raw):
                answer = match.group(1).lower() == "yes"
                break
        return AnalysisResult(
            analyser.name, transcript.id, agent, channel, answer, raw, transcript.iteration
        )

    return list(await asyncio.gather(*(run(job) for job in jobs)))


def summarise(results: Sequence[AnalysisResult]) -> dict[str, float | None]:
    """Share of "yes" per analyser and agent (unanswered judgements left out)."""
    summary: dict[str, float | None] = {}
    for analyser, agent in sorted({(r.analyser, r.agent) for r in results}):
        valid = [r.answer for r in results if (r.analyser, r.agent) == (analyser, agent)]
        valid = [a for a in valid if a is not None]
        summary[f"{agent}.{analyser}"] = sum(valid) / len(valid) if valid else None
    return summary
