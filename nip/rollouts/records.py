"""Plain records of a dialogue: the datapoint, each agent's turn, each channel message.

A :class:`Transcript` grows by one :class:`AgentTurn` per agent per round and one
:class:`ChannelMessage` per channel written; prompts are rebuilt from it on demand.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from nip.protocols import Decision


@dataclass(frozen=True)
class Datapoint:
    """The claim under test: is ``solution`` a correct answer to ``question``?

    Attributes:
        y: The true label: 1 correct, 0 incorrect.
        stance: The stance a randomised prover argues for on this item (0 or 1).
    """

    id: str
    question: str
    solution: str
    y: int
    stance: int = 1


@dataclass(frozen=True)
class ChannelMessage:
    """A message one agent wrote to one channel in one round."""

    round: int
    channel: str
    sender: str
    content: str


@dataclass(frozen=True)
class AgentTurn:
    """One agent's generation in one round, as parsed.

    Attributes:
        raw_text: The completion exactly as the model wrote it.
        decision: The verifier's decision (``Decision.NONE`` for provers and questions).
        score: With a decision, the verifier's score in [-1, 1]; None otherwise.
        retries: How many generations were rejected before this one.
        valid: False when every retry failed; the turn then writes nothing.
        prompt_tokens / completion_tokens: Usage of every attempt, rejected ones included.
        latency_s: Wall time of the accepted generation.
        cached: Every generation of the turn was served from the response cache.
        overridden: Written by a person through the step-through API, not generated.
        sample_index: Which sample of the request this is (MALT siblings, regenerations).
    """

    round: int
    agent: str
    raw_text: str
    decision: Decision = Decision.NONE
    channels: tuple[str, ...] = ()
    retries: int = 0
    token_limit: bool = False
    valid: bool = True
    error: str | None = None
    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cached: bool = False
    overridden: bool = False
    sample_index: int = 0
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"decision": int(self.decision), "channels": list(self.channels)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentTurn:
        decision = Decision(data.get("decision", Decision.NONE))
        return cls(**{**data, "decision": decision, "channels": tuple(data.get("channels", ()))})

    def to_row(self) -> dict[str, Any]:
        """One flat row for a DataFrame: :meth:`to_dict` with the decision as a word."""
        return self.to_dict() | {"decision": self.decision.word}

    def __repr__(self) -> str:
        text = " ".join(self.raw_text.split())
        text = text if len(text) <= 60 else text[:57] + "..."
        parts = [f"round {self.round}", self.agent, repr(text)]
        if self.decision is not Decision.NONE:
            parts.append(f"decision={self.decision.word}")
        if not self.valid:
            parts.append("invalid")
        if self.overridden:
            parts.append("overridden")
        return f"AgentTurn({', '.join(parts)})"

    def _repr_html_(self) -> str:
        from nip.rollouts._transcript_html import turn_to_html

        return turn_to_html(self)


@dataclass
class Transcript:
    """Everything that happened in one dialogue.

    Attributes:
        seed: The dialogue's seed (fixes MAC's speaker and channel shuffles).
        stances: Each prover's stance in this dialogue (0 reject, 1 accept).
        rewards: Each agent's reward, one mapping per round played.
        done / terminated: Whether the episode is over, and whether it ran out of rounds.
        score: The verifier's score in [-1, 1] for its decision, None without one.
        id: A run-unique id for this dialogue.
    """

    protocol: str
    datapoint: Datapoint
    seed: int
    stances: dict[str, int] = field(default_factory=dict)
    turns: list[AgentTurn] = field(default_factory=list)
    messages: list[ChannelMessage] = field(default_factory=list)
    rewards: list[dict[str, float]] = field(default_factory=list)
    done: bool = False
    terminated: bool = False
    decision: Decision = Decision.NONE
    iteration: int = 0
    id: str = ""
    score: float | None = None

    @property
    def num_rounds(self) -> int:
        """Rounds played so far."""
        return len(self.rewards)

    @property
    def correct(self) -> bool:
        """The verifier decided, and decided right (no decision counts as wrong)."""
        return self.decision is not Decision.NONE and int(self.decision) == self.datapoint.y

    def episode_reward(self, agent: str) -> float:
        """``agent``'s total reward over the episode."""
        return sum(r.get(agent, 0.0) for r in self.rewards)

    @property
    def episode_rewards(self) -> dict[str, float]:
        agents = {a for r in self.rewards for a in r}
        return {a: self.episode_reward(a) for a in sorted(agents)}

    def turns_of(self, agent: str) -> list[AgentTurn]:
        return [t for t in self.turns if t.agent == agent]

    def turn(self, agent: str, round_id: int) -> AgentTurn | None:
        """``agent``'s turn in ``round_id``, if it spoke."""
        return next((t for t in self.turns if t.agent == agent and t.round == round_id), None)

    def messages_in(self, round_id: int, channel: str) -> list[ChannelMessage]:
        return [m for m in self.messages if m.round == round_id and m.channel == channel]

    def truncated(self, num_rounds: int) -> Transcript:
        """A copy holding only the first ``num_rounds`` rounds (for branching and undo)."""
        turns = [t for t in self.turns if t.round < num_rounds]
        deciding = next((t for t in reversed(turns) if t.decision is not Decision.NONE), None)
        whole = num_rounds >= self.num_rounds
        return dataclasses.replace(
            self,
            stances=dict(self.stances),
            turns=turns,
            messages=[m for m in self.messages if m.round < num_rounds],
            rewards=self.rewards[:num_rounds],
            done=whole and self.done,
            terminated=whole and self.terminated,
            decision=deciding.decision if whole and deciding is not None else Decision.NONE,
            score=self.score if whole else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict; :meth:`from_dict` rebuilds an equal transcript."""
        data = asdict(self)  # copies every dict and list
        return data | {"turns": [t.to_dict() for t in self.turns], "decision": int(self.decision)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Transcript:
        values = copy.deepcopy({k: data[k] for k in cls.__dataclass_fields__ if k in data})
        values["datapoint"] = Datapoint(**data["datapoint"])
        values["turns"] = [AgentTurn.from_dict(t) for t in data.get("turns", [])]
        values["messages"] = [ChannelMessage(**m) for m in data.get("messages", [])]
        values["decision"] = Decision(data.get("decision", Decision.NONE))
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    def summary(self) -> dict[str, Any]:
        """One flat row for a DataFrame of dialogues."""
        row: dict[str, Any] = {
            "id": self.id,
            "iteration": self.iteration,
            "protocol": self.protocol,
            "datapoint_id": self.datapoint.id,
            "y": self.datapoint.y,
            "decision": self.decision.word,
            "score": self.score,
            "correct": self.correct,
            "rounds": self.num_rounds,
            "terminated": self.terminated,
            "retries": sum(t.retries for t in self.turns),
            "token_limit_turns": sum(t.token_limit for t in self.turns),
            "invalid_turns": sum(not t.valid for t in self.turns),
            "prompt_tokens": sum(t.prompt_tokens for t in self.turns),
            "completion_tokens": sum(t.completion_tokens for t in self.turns),
        }
        for agent, reward in self.episode_rewards.items():
            row[f"{agent}.reward"] = reward
        return row

    def __repr__(self) -> str:
        verdict = self.decision.word
        label = "correct" if self.datapoint.y == 1 else "incorrect"
        return (
            f"Transcript({self.protocol}, datapoint={self.datapoint.id!r} ({label}), "
            f"rounds={self.num_rounds}, decision={verdict}, rewards={self.episode_rewards})"
        )

    def _repr_html_(self) -> str:
        from nip.rollouts._transcript_html import transcript_to_html

        return transcript_to_html(self)


def transcripts_to_jsonl(transcripts: Iterable[Transcript]) -> str:
    """One JSON object per line."""
    return "".join(t.to_json() + "\n" for t in transcripts)


def transcripts_from_jsonl(text: str) -> list[Transcript]:
    """Parse what :func:`transcripts_to_jsonl` wrote."""
    return [Transcript.from_dict(json.loads(line)) for line in text.splitlines() if line.strip()]
