"""Buttons to play a dialogue round by round, beside its transcript and prompt inspector
(the exact chat messages an agent is, or was, prompted with, round by round).

::

    controller = DialogueController(session.dialogue(item))
    controller                      # in a notebook: click "Next round", "Branch"...
    await controller.next_round()   # what the button does, awaitable

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
from nip.widgets._tasks import Actions, button

if TYPE_CHECKING:
    from nip.backends import ChatMessage
    from nip.rollouts.dialogue import Dialogue
    from nip.rollouts.records import AgentTurn, Transcript


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
        playing = None if self.dialogue.done else self.dialogue.round_id
        options = [(f"{r} (next)" if r == playing else str(r), r) for r in rounds]
        self._refreshing = True
        try:
            self.round_picker.options = options
            self.round_picker.value = keep if keep in rounds else (rounds[-1] if rounds else None)
        finally:
            self._refreshing = False
        self._render()

    # -------------------------------------------------------------- drawing
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


class DialogueController(Actions, PlainTextRepr, ipywidgets.VBox):
    """Step through a :class:`~nip.rollouts.dialogue.Dialogue` with buttons.

    "Next round" plays one round, "Regenerate last round" replays it with a new sample, "Run to
    end" plays until the dialogue is over, and "Branch" adds a controller for an independent copy.
    The transcript and prompt inspector follow every step; errors appear in :attr:`errors`. In
    Jupyter a click schedules the action on the kernel's loop (:attr:`task`); from a script it runs
    before ``click()`` returns. The actions are also coroutines to ``await``.

    Args:
        dialogue: The dialogue to play (changed in place).
        title: A heading (branches get "branch N (from round R)").
    """

    def __init__(self, dialogue: Dialogue, *, title: str = ""):
        super().__init__()
        self.dialogue = dialogue
        self.title = title
        self.branches: list[DialogueController] = []
        self.next_button = self._button("Next round", "step-forward", self.next_round)
        self.regenerate_button = self._button("Regenerate last round", "refresh", self.regenerate)
        self.branch_button = button("Branch", "code-fork", self._click_branch)
        self.run_button = self._button("Run to end", "fast-forward", self.run_to_end)
        self.status = ipywidgets.HTML()
        self.transcript_view = ipywidgets.HTML()
        self.inspector = PromptInspector(dialogue)
        self.errors = ipywidgets.Output()
        self._branch_area = ipywidgets.Accordion()
        heading = [ipywidgets.HTML(f"<b>{escape(title)}</b>")] if title else []
        self.children = [
            *heading,
            ipywidgets.HBox(self.buttons),
            self.status,
            self.errors,
            self.transcript_view,
            ipywidgets.Accordion([self.inspector], titles=("prompt inspector",)),
            self._branch_area,
        ]
        self.refresh()

    @property
    def buttons(self) -> tuple[ipywidgets.Button, ...]:
        """Next round, regenerate, branch and run-to-end, in that order."""
        return (self.next_button, self.regenerate_button, self.branch_button, self.run_button)

    # --------------------------------------------------------------- actions
    async def next_round(self) -> list[AgentTurn]:
        """Play one round; returns its turns."""
        try:
            return await self.dialogue.step_async()
        finally:
            self.refresh()

    async def regenerate(self) -> list[AgentTurn]:
        """Replay the last round with a new sample; returns its turns."""
        try:
            return await self.dialogue.regenerate_async()
        finally:
            self.refresh()

    async def run_to_end(self) -> Transcript:
        """Play rounds until the dialogue is over, showing each as it is played."""
        while not self.dialogue.done:
            await self.next_round()
        return self.dialogue.transcript

    def branch(self) -> DialogueController:
        """A controller for an independent copy of the dialogue as it stands, shown below."""
        round_id = self.dialogue.round_id
        title = f"branch {len(self.branches) + 1} (from round {round_id})"
        branch = DialogueController(self.dialogue.branch(), title=title)
        self.branches.append(branch)
        self._branch_area.children = [*self._branch_area.children, branch]
        self._branch_area.titles = tuple(b.title for b in self.branches)
        return branch

    def refresh(self) -> None:
        """Redraw the status, transcript, inspector and buttons from the dialogue."""
        dialogue = self.dialogue
        self.transcript_view.value = dialogue.transcript._repr_html_()
        if dialogue.done:
            state = f"over after {dialogue.round_id} rounds"
        else:
            state = f"next: round {dialogue.round_id}, {', '.join(dialogue.next_speakers)}"
        self.status.value = escape(state) + (" &middot; <i>working…</i>" if self._busy else "")
        self.inspector.refresh()
        self.next_button.disabled = self.run_button.disabled = self._busy or dialogue.done
        self.regenerate_button.disabled = self._busy or dialogue.round_id == 0
        self.branch_button.disabled = self._busy

    _redraw = refresh

    def _click_branch(self) -> None:
        self.errors.outputs = ()
        try:
            self.branch()
        except Exception as error:
            self._show_error(error)

    def __repr__(self) -> str:
        state = "over" if self.dialogue.done else f"next round {self.dialogue.round_id}"
        return (
            f"DialogueController(dialogue={self.dialogue.transcript.id!r}, "
            f"rounds={self.dialogue.round_id}, {state}, branches={len(self.branches)})"
        )
