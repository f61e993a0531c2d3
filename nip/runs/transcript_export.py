"""Readable transcripts (``text_rl.save_transcripts``) in JSON, YAML or Markdown.

The JSONL rollouts are the run's records; these files are for people (claim, every turn, the
decision and rewards), one per split and iteration under ``transcripts/``, never read back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from nip.protocols import Decision
from nip.rollouts.records import Transcript

if TYPE_CHECKING:
    from nip.runs.run_dir import RunDirectory

#: File suffix of each format.
SUFFIXES = {"json": "json", "yaml": "yaml", "markdown": "md"}


def readable(transcript: Transcript) -> dict[str, Any]:
    """The parts of a dialogue a person reads, as plain data."""
    return {
        "id": transcript.id,
        "iteration": transcript.iteration,
        "protocol": transcript.protocol,
        "question": transcript.datapoint.question,
        "solution": transcript.datapoint.solution,
        "true_label": "correct" if transcript.datapoint.y == 1 else "incorrect",
        "decision": transcript.decision.word,
        "verifier_right": transcript.correct,
        "episode_rewards": transcript.episode_rewards,
        "turns": [
            {
                "round": turn.round,
                "from": turn.agent,
                "channels": list(turn.channels),
                "model": turn.model,
                "text": turn.raw_text if turn.valid else f"(invalid turn: {turn.error})",
            }
            for turn in transcript.turns
        ],
    }


def _json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, indent=2, ensure_ascii=False) + "\n"


def _yaml(rows: list[dict[str, Any]]) -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        """Writes multi-line strings (code, messages) as ``|`` blocks."""

    def text(dumper: yaml.SafeDumper, value: str) -> Any:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump(rows, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=100)


def _markdown(rows: list[dict[str, Any]]) -> str:
    parts = []
    for row in rows:
        rewards = ", ".join(f"{a} {r:g}" for a, r in row["episode_rewards"].items())
        parts += [
            f"## Dialogue {row['id']} ({row['protocol']}, iteration {row['iteration']})",
            "",
            f"**Question.** {row['question']}",
            "",
            "```python",
            row["solution"].rstrip("\n"),
            "```",
            "",
            f"The solution is **{row['true_label']}**; the verifier decided "
            f"**{row['decision']}** ({'right' if row['verifier_right'] else 'wrong'}). "
            f"Rewards: {rewards or 'none'}.",
            "",
        ]
        for turn in row["turns"]:
            about = [f"to {', '.join(turn['channels'])}"] if turn["channels"] else []
            about += [turn["model"]] if turn["model"] else []
            parts += [
                f"**Round {turn['round']}, {turn['from']}**"
                + (f" ({'; '.join(about)})" if about else "")
                + ":",
                "",
                *(f"> {line}" if line else ">" for line in turn["text"].splitlines()),
                "",
            ]
    return "\n".join(parts)


def render(transcripts: Iterable[Transcript], transcript_format: str) -> str:
    """``transcripts`` as one readable document in ``transcript_format``."""
    writers = {"json": _json, "yaml": _yaml, "markdown": _markdown}
    if transcript_format not in writers:
        raise ValueError(f"unknown transcript format {transcript_format!r}")
    return writers[transcript_format]([readable(t) for t in transcripts])


def transcript_file_name(split: str, iteration: int, transcript_format: str) -> str:
    """Where the readable transcripts of ``split`` and ``iteration`` go in a run directory."""
    return f"transcripts/{split}_it{iteration:04d}.{SUFFIXES[transcript_format]}"


class PromptBuilder(Protocol):
    """An agent as far as its prompts go (``PureTextWholeAgent``)."""

    def build_chat_prompt(self, transcript: Transcript, round_id: int) -> list[Any]: ...


def processed(transcript: Transcript) -> dict[str, Any]:
    """The original's processed transcript: per round, each message as it reached its channel
    (``"<sender>@<channel>"``) and each decision (``"<agent>@decision"``), with the claim,
    the decision and the rewards."""
    rows = readable(transcript)
    rounds: list[dict[str, str]] = [{} for _ in range(transcript.num_rounds)]
    for message in transcript.messages:
        rounds[message.round][f"{message.sender}@{message.channel}"] = message.content
    for turn in transcript.turns:
        if turn.decision is not Decision.NONE:
            rounds[turn.round][f"{turn.agent}@decision"] = turn.decision.word
    del rows["turns"]
    return {**rows, "transcript": rounds}


def prompts(transcript: Transcript, agents: Mapping[str, PromptBuilder]) -> dict[str, Any]:
    """Every turn's chat prompt, per round and agent (the original's ``prompts_`` files),
    rebuilt exactly by each agent's prompt builder."""
    rounds: list[dict[str, list[Any]]] = [{} for _ in range(transcript.num_rounds)]
    for turn in transcript.turns:
        rounds[turn.round][turn.agent] = agents[turn.agent].build_chat_prompt(
            transcript, turn.round
        )
    return {"id": transcript.id, "iteration": transcript.iteration, "prompts": rounds}


def save_processed_and_prompts(
    run_dir: RunDirectory, split: str, iteration: int, agents: Mapping[str, PromptBuilder]
) -> None:
    """Write ``processed_transcripts/`` and ``prompts/`` (JSON) for one split and iteration's
    saved dialogues, the original's two other transcript artifacts."""
    transcripts = run_dir.load_rollouts(split, iteration)
    name = f"{split}_it{iteration:04d}.json"
    run_dir.write_json(f"processed_transcripts/{name}", [processed(t) for t in transcripts])
    run_dir.write_json(f"prompts/{name}", [prompts(t, agents) for t in transcripts])


__all__ = [
    "SUFFIXES",
    "processed",
    "prompts",
    "readable",
    "render",
    "save_processed_and_prompts",
    "transcript_file_name",
]
