"""One dialogue, played round by round: the step-through API for notebooks.

::

    dialogue = session.dialogue(dataset[0])
    dialogue.prompt_for("verifier")      # the exact chat prompt, before it generates
    dialogue.step()                      # play one round (``await dialogue.step_async()``)
    dialogue.step(overrides={"prover": "Answer: the loop is off by one."})
    alternative = dialogue.branch()      # an independent copy from here
    dialogue.regenerate()                # replay the last round with a fresh sample
    dialogue.run()                       # play to the end
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from nip.backends import ChatMessage
from nip.errors import NipError
from nip.protocols import VERIFIER, Decision, ProtocolHandler
from nip.rollouts.records import AgentTurn, ChannelMessage, Datapoint, Transcript
from nip.utils.sync import run_sync


class DialogueAgent(Protocol):
    """What a dialogue needs of an agent (:class:`nip.agents.PureTextWholeAgent` is one)."""

    def build_chat_prompt(self, transcript: Transcript, round_id: int) -> list[ChatMessage]:
        """The messages the agent is prompted with in ``round_id``."""

    async def generate_turn(
        self, transcript: Transcript, round_id: int, *, sample_index: int = 0
    ) -> tuple[AgentTurn, list[ChannelMessage]]:
        """Generate and parse the agent's turn in ``round_id``."""

    def turn_from_text(
        self, text: str, transcript: Transcript, round_id: int, **turn_fields: Any
    ) -> tuple[AgentTurn, list[ChannelMessage]]:
        """Parse ``text`` as the agent's turn in ``round_id``."""


class DialogueOverError(NipError, RuntimeError):
    """The dialogue has ended; no round can be played."""


class Dialogue:
    """A dialogue between a protocol's agents about one datapoint."""

    def __init__(
        self, handler: ProtocolHandler, agents: Mapping[str, DialogueAgent], transcript: Transcript
    ):
        self.handler = handler
        self.agents = dict(agents)
        self.transcript = transcript

    @classmethod
    def start(
        cls,
        handler: ProtocolHandler,
        agents: Mapping[str, DialogueAgent],
        datapoint: Datapoint,
        *,
        seed: int,
        iteration: int = 0,
        dialogue_id: str = "",
    ) -> Dialogue:
        """A new dialogue about ``datapoint``; ``seed`` fixes its random choices."""
        stances = {p: handler.prover_stance(p, datapoint.stance) for p in handler.prover_names}
        transcript = Transcript(
            handler.name, datapoint, seed, stances, iteration=iteration, id=dialogue_id
        )
        return cls(handler, agents, transcript)

    @property
    def round_id(self) -> int:
        """The round to be played next."""
        return self.transcript.num_rounds

    @property
    def done(self) -> bool:
        return self.transcript.done

    @property
    def next_speakers(self) -> tuple[str, ...]:
        """The agents that speak in the next round (empty when the dialogue is over)."""
        if self.done:
            return ()
        return self.handler.active_agents(self.round_id, self.transcript.seed)

    def prompt_for(self, agent_name: str, round_id: int | None = None) -> list[ChatMessage]:
        """The exact chat prompt ``agent_name`` gets in ``round_id`` (by default the next)."""
        round_id = self.round_id if round_id is None else round_id
        return self.agents[agent_name].build_chat_prompt(self.transcript, round_id)

    async def step_async(
        self, overrides: Mapping[str, str] | None = None, *, sample_index: int = 0
    ) -> list[AgentTurn]:
        """Play one round: every speaking agent generates at once, or uses its text in
        ``overrides``; another ``sample_index`` draws another sample."""
        if self.done:
            raise DialogueOverError("the dialogue is over")
        overrides = dict(overrides or {})
        round_id, transcript = self.round_id, self.transcript
        speakers = self.next_speakers
        unknown = set(overrides) - set(speakers)
        if unknown:
            raise ValueError(f"{sorted(unknown)} do not speak in round {round_id}: {speakers}")
        generated = await asyncio.gather(
            *(
                self.agents[name].generate_turn(transcript, round_id, sample_index=sample_index)
                for name in speakers
                if name not in overrides
            )
        )
        written = [
            self.agents[name].turn_from_text(text, transcript, round_id, overridden=True)
            for name, text in overrides.items()
        ]
        results = sorted(generated + written, key=lambda tm: speakers.index(tm[0].agent))
        self.apply_round([t for t, _ in results], [m for _, ms in results for m in ms])
        return [t for t, _ in results]

    def apply_round(self, turns: list[AgentTurn], messages: list[ChannelMessage]) -> None:
        """Record a played round and score it with the protocol."""
        transcript = self.transcript
        round_id = self.round_id
        transcript.turns.extend(turns)
        transcript.messages.extend(messages)
        deciding = next(
            (t for t in turns if t.agent == VERIFIER and t.decision is not Decision.NONE), None
        )
        outcome = self.handler.step(
            round_id,
            deciding.decision if deciding is not None else Decision.NONE,
            transcript.datapoint.y,
            seed=transcript.seed,
            datapoint_stance=transcript.datapoint.stance,
            score=deciding.score if deciding is not None else None,
            invalid_provers=[t.agent for t in turns if not t.valid and t.agent != VERIFIER],
        )
        transcript.rewards.append(dict(outcome.rewards))
        for name in ("done", "terminated", "decision", "score"):
            setattr(transcript, name, getattr(outcome, name))

    def step(
        self, overrides: Mapping[str, str] | None = None, *, sample_index: int = 0
    ) -> list[AgentTurn]:
        """Sync :meth:`step_async` (works in scripts and inside Jupyter)."""
        return run_sync(self.step_async(overrides, sample_index=sample_index))

    async def run_async(self) -> Transcript:
        """Play until the dialogue ends; returns the transcript."""
        while not self.done:
            await self.step_async()
        return self.transcript

    def run(self) -> Transcript:
        """Sync :meth:`run_async`."""
        return run_sync(self.run_async())

    def branch(self) -> Dialogue:
        """An independent copy of the dialogue as it stands (same agents and backends)."""
        return Dialogue(self.handler, self.agents, self.transcript.truncated(self.round_id))

    def undo(self, rounds: int = 1) -> None:
        """Forget the last ``rounds`` rounds."""
        keep = max(self.round_id - rounds, 0)
        self.transcript = self.transcript.truncated(keep)

    async def regenerate_async(self) -> list[AgentTurn]:
        """Replay the last round with new samples (the next sample index)."""
        if self.round_id == 0:
            raise ValueError("no round has been played yet")
        previous = [t for t in self.transcript.turns if t.round == self.round_id - 1]
        next_index = max((t.sample_index for t in previous), default=0) + 1
        self.undo()
        return await self.step_async(sample_index=next_index)

    def regenerate(self) -> list[AgentTurn]:
        """Sync :meth:`regenerate_async`."""
        return run_sync(self.regenerate_async())

    def __repr__(self) -> str:
        state = "over" if self.done else f"next round {self.round_id}: {list(self.next_speakers)}"
        return f"Dialogue({self.transcript!r}, {state})"

    def _repr_html_(self) -> str:
        footer = (
            "<i>the dialogue is over</i>"
            if self.done
            else f"<i>next: round {self.round_id}, {', '.join(self.next_speakers)}</i>"
        )
        return self.transcript._repr_html_() + footer
