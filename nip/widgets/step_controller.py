"""Buttons to play a dialogue round by round, beside its transcript and prompt inspector.

::

    controller = DialogueController(session.dialogue(item))
    controller                      # in a notebook: click "Next round", "Branch"...
    await controller.next_round()   # what the button does, awaitable
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ipywidgets

from nip.widgets._html import PlainTextRepr, escape
from nip.widgets._tasks import Actions, button
from nip.widgets.prompt_inspector import PromptInspector

if TYPE_CHECKING:
    from nip.rollouts.dialogue import Dialogue
    from nip.rollouts.records import AgentTurn, Transcript


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
