"""Running many dialogues at once: each on its own coroutine, bound only by the backends'
concurrency limits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nip.extras import needs
from nip.protocols import Decision
from nip.rollouts.dialogue import Dialogue
from nip.rollouts.records import Transcript, transcripts_from_jsonl, transcripts_to_jsonl
from nip.utils import counted


async def run_dialogues_async(
    dialogues: Sequence[Dialogue],
    *,
    show_progress: bool = True,
    description: str = "dialogues",
    on_progress: Callable[[int, int], None] | None = None,
) -> list[Transcript]:
    """Play every dialogue to its end, all at once; returns their transcripts in order.

    ``on_progress(done, total)`` is called at the start and after each dialogue. If one
    fails, the others are cancelled and its error propagates (not an ExceptionGroup).
    """
    from tqdm.auto import tqdm

    bar = tqdm(total=len(dialogues), desc=description, disable=not show_progress or None)
    done = 0
    if on_progress is not None:
        on_progress(0, len(dialogues))

    async def play(dialogue: Dialogue) -> Transcript:
        nonlocal done
        transcript = await dialogue.run_async()
        bar.update(1)
        done += 1
        if on_progress is not None:
            on_progress(done, len(dialogues))
        return transcript

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(play(d)) for d in dialogues]
    except BaseExceptionGroup as failures:
        first = failures.exceptions[0]
        if len(failures.exceptions) > 1:
            first.add_note(f"{counted(len(failures.exceptions) - 1, 'other dialogue')} failed too")
        raise first from None
    finally:
        bar.close()
    return [task.result() for task in tasks]


@dataclass
class RolloutBatch(Sequence[Transcript]):
    """The transcripts of a batch of dialogues, with summaries and exports."""

    transcripts: list[Transcript]

    def __len__(self) -> int:
        return len(self.transcripts)

    def __getitem__(self, index: int) -> Transcript:
        return self.transcripts[index]

    @property
    def accuracy(self) -> float:
        """Share of dialogues where the verifier decided correctly (no decision is wrong)."""
        if not self.transcripts:
            return float("nan")
        return sum(t.correct for t in self.transcripts) / len(self.transcripts)

    def mean_episode_reward(self, agent: str) -> float:
        if not self.transcripts:
            return float("nan")
        return sum(t.episode_reward(agent) for t in self.transcripts) / len(self.transcripts)

    def summary(self) -> dict[str, Any]:
        """Headline numbers: count, accuracy, mean rounds, retries, tokens, mean rewards."""
        n = len(self.transcripts)
        agents = sorted({a for t in self.transcripts for a in t.episode_rewards})
        rows = [t.summary() for t in self.transcripts]
        undecided = sum(t.decision is Decision.NONE for t in self.transcripts)
        summary: dict[str, Any] = {
            "dialogues": n,
            "accuracy": self.accuracy,
            "no_decision_rate": undecided / (n or 1),
            "mean_rounds": sum(r["rounds"] for r in rows) / (n or 1),
            "retries": sum(r["retries"] for r in rows),
            "invalid_turns": sum(r["invalid_turns"] for r in rows),
            "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
            "completion_tokens": sum(r["completion_tokens"] for r in rows),
        }
        for agent in agents:
            summary[f"{agent}.mean_episode_reward"] = self.mean_episode_reward(agent)
        return summary

    def to_dataframe(self):
        """One row per dialogue (see :meth:`Transcript.summary`; decisions as words)."""
        with needs("dataframes"):
            import pandas as pd

        return pd.DataFrame([t.summary() for t in self.transcripts])

    def messages_dataframe(self):
        """One row per agent turn, with the dialogue's id and label (decisions as words)."""
        with needs("dataframes"):
            import pandas as pd

        return pd.DataFrame(
            [{"dialogue": t.id, "y": t.datapoint.y, **u.to_row()} for t in self for u in t.turns]
        )

    def to_jsonl(self, path: str | Path | None = None) -> str:
        """The transcripts as JSON lines; also written to ``path`` when given."""
        text = transcripts_to_jsonl(self.transcripts)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @classmethod
    def from_jsonl(cls, path_or_text: str | Path) -> RolloutBatch:
        """Load transcripts written by :meth:`to_jsonl` (a path or the text itself)."""
        candidate = Path(path_or_text) if not str(path_or_text).lstrip().startswith("{") else None
        text = candidate.read_text(encoding="utf-8") if candidate else str(path_or_text)
        return cls(transcripts_from_jsonl(text))

    def __repr__(self) -> str:
        return f"RolloutBatch({json.dumps(self.summary(), default=str)})"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{k}</td><td>{format(v, '.3g') if isinstance(v, float) else v}</td></tr>"
            for k, v in self.summary().items()
        )
        return f"<b>RolloutBatch</b><table>{rows}</table>"
