"""The exact chat messages an agent is (or was) prompted with, round by round.

::

    inspector = PromptInspector(dialogue)
    inspector.agent_picker.value = "verifier"
    inspector.round_picker.value = 2
    inspector.messages           # the list of {"role", "content", "name"} dicts sent
    inspector.to_json()          # the same, as JSON to paste elsewhere
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import ipywidgets

from nip.rollouts._transcript_html import turn_to_html
from nip.widgets._html import PlainTextRepr, escape, messages_html, note_html

if TYPE_CHECKING:
    from nip.backends import ChatMessage
    from nip.rollouts.dialogue import Dialogue


class PromptInspector(PlainTextRepr, ipywidgets.VBox):
    """Shows what one agent is sent in one round: every message, the completion it wrote if played,
    and the messages as JSON. The rounds offered are those it spoke in, and the next round if it
    speaks then; call :meth:`refresh` after the dialogue moves on.

    Args:
        dialogue: The dialogue to inspect (read live).
        agent: The agent to show first (default: the next speaker, else the first agent).
    """

    def __init__(self, dialogue: Dialogue, agent: str | None = None):
        super().__init__()
        self.dialogue = dialogue
        if agent is None:
            agent = next(iter(dialogue.next_speakers), next(iter(dialogue.agents)))
        self.agent_picker = ipywidgets.Dropdown(
            options=list(dialogue.agents), value=agent, description="agent"
        )
        self.round_picker = ipywidgets.Dropdown(description="round")
        self.prompt_view = ipywidgets.HTML()
        self.completion_view = ipywidgets.HTML()
        self.json_box = ipywidgets.Textarea(
            layout=ipywidgets.Layout(width="100%", height="16em"),
            tooltip="the messages as JSON: select all and copy",
        )
        self._messages: list[ChatMessage] = []
        self._refreshing = False
        self.agent_picker.observe(lambda _: self.refresh(), "value")
        self.round_picker.observe(lambda _: self._render(), "value")
        self.children = [
            ipywidgets.HBox([self.agent_picker, self.round_picker]),
            self.prompt_view,
            self.completion_view,
            ipywidgets.Accordion([self.json_box], titles=("messages as JSON",)),
        ]
        self.refresh()

    # ----------------------------------------------------------------- public
    @property
    def agent(self) -> str:
        """The agent shown."""
        return self.agent_picker.value

    @property
    def round_id(self) -> int | None:
        """The round shown (None when the agent has no round to show)."""
        return self.round_picker.value

    @property
    def messages(self) -> list[ChatMessage]:
        """The exact messages sent to the model (a copy)."""
        return [dict(m) for m in self._messages]  # type: ignore[misc]

    def to_json(self, indent: int | None = 2) -> str:
        """The messages as JSON (the OpenAI chat format)."""
        return json.dumps(self._messages, indent=indent, ensure_ascii=False)

    def rounds(self) -> list[int]:
        """The rounds the agent spoke in, and the next round if it speaks then."""
        transcript = self.dialogue.transcript
        spoken = sorted({t.round for t in transcript.turns_of(self.agent)})
        if self.agent in self.dialogue.next_speakers:
            spoken.append(self.dialogue.round_id)
        return spoken

    def refresh(self) -> None:
        """Re-read the dialogue: offer the rounds as they now are and redraw."""
        rounds = self.rounds()
        keep = self.round_picker.value
        options = [(self._round_label(r), r) for r in rounds]
        self._refreshing = True
        try:
            self.round_picker.options = options
            self.round_picker.value = keep if keep in rounds else (rounds[-1] if rounds else None)
        finally:
            self._refreshing = False
        self._render()

    # -------------------------------------------------------------- drawing
    def _round_label(self, round_id: int) -> str:
        if round_id == self.dialogue.round_id and not self.dialogue.done:
            return f"{round_id} (next)"
        return str(round_id)

    def _render(self) -> None:
        if self._refreshing:
            return
        round_id = self.round_id
        if round_id is None:
            self._messages = []
            self.prompt_view.value = note_html(
                f"{self.agent} has not spoken, and does not speak next"
            )
            self.completion_view.value = ""
            self.json_box.value = "[]"
            return
        self._messages = list(self.dialogue.prompt_for(self.agent, round_id))
        self.prompt_view.value = (
            f"<b>prompt of {escape(self.agent)} in round {round_id}</b> "
            f"{note_html(f'({len(self._messages)} messages)')}{messages_html(self._messages)}"
        )
        turn = self.dialogue.transcript.turn(self.agent, round_id)
        if turn is None:
            self.completion_view.value = note_html("not generated yet")
        else:
            sample = f" (sample {turn.sample_index})" if turn.sample_index else ""
            self.completion_view.value = f"<b>completion{sample}</b>{turn_to_html(turn)}"
        self.json_box.value = self.to_json()

    def __repr__(self) -> str:
        return (
            f"PromptInspector(dialogue={self.dialogue.transcript.id!r}, agent={self.agent!r}, "
            f"round={self.round_id}, messages={len(self._messages)})"
        )
