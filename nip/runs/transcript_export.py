"""Readable transcripts (``text_rl.save_transcripts``) in JSON, YAML or Markdown.

The JSONL rollouts under ``rollouts/`` are the run's records: complete, and read back by the
trainer. These files are for people: each dialogue's claim, every turn (who wrote what, to which
channels, with which model), the decision and the rewards, one file per split and iteration under
``transcripts/`` (``transcripts/train_it0003.md``). They are written beside the records and
never read back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from nip.rollouts.records import Transcript

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
    rows = [readable(t) for t in transcripts]
    if transcript_format == "json":
        return json.dumps(rows, indent=2, ensure_ascii=False) + "\n"
    if transcript_format == "yaml":
        return _yaml(rows)
    if transcript_format == "markdown":
        return _markdown(rows)
    raise ValueError(f"unknown transcript format {transcript_format!r}")


def transcript_file_name(split: str, iteration: int, transcript_format: str) -> str:
    """Where the readable transcripts of ``split`` and ``iteration`` go in a run directory."""
    return f"transcripts/{split}_it{iteration:04d}.{SUFFIXES[transcript_format]}"


__all__ = ["SUFFIXES", "readable", "render", "transcript_file_name"]
