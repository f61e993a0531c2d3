"""Dialogues and their records: step through one, or run a batch concurrently."""

from nip.rollouts.records import (
    AgentTurn,
    ChannelMessage,
    Datapoint,
    Transcript,
    transcripts_from_jsonl,
    transcripts_to_jsonl,
)

__all__ = [
    "AgentTurn",
    "ChannelMessage",
    "Datapoint",
    "Dialogue",
    "RolloutBatch",
    "Transcript",
    "run_dialogues_async",
    "transcripts_from_jsonl",
    "transcripts_to_jsonl",
]


def __getattr__(name: str):
    # Dialogue and the engine import the agents, which import the records above.
    if name == "Dialogue":
        from nip.rollouts.dialogue import Dialogue

        return Dialogue
    if name in ("RolloutBatch", "run_dialogues_async"):
        from nip.rollouts import engine

        return getattr(engine, name)
    raise AttributeError(name)
