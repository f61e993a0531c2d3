"""Dialogues and their records: step through one, or run a batch concurrently."""

from nip.rollouts.records import (
    AgentTurn,
    ChannelMessage,
    Datapoint,
    Transcript,
    transcripts_from_jsonl,
    transcripts_to_jsonl,
)
from nip.utils.lazy import lazy_attributes

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

# The dialogue and the engine load on first use: the agents import only the records.
__getattr__, __dir__ = lazy_attributes(
    __name__,
    {
        "Dialogue": "nip.rollouts.dialogue",
        "RolloutBatch": "nip.rollouts.engine",
        "run_dialogues_async": "nip.rollouts.engine",
    },
)
