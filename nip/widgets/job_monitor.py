"""Fine-tune one shared model group from a notebook: preview, launch, watch, switch.

::

    launcher = FineTuneLauncher(trainer.groups["verifier"], batch, select=True)
    launcher                  # preview the SFT examples; click Launch, then Switch
    await launcher.launch_and_watch()   # what the Launch button does
    await launcher.switch()             # what "Switch to new model" does
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import ipywidgets

from nip.rollouts._transcript_html import chat_bubble
from nip.utils import counted
from nip.widgets._html import (
    PlainTextRepr,
    error_html,
    escape,
    messages_html,
    note_html,
    pre_html,
)
from nip.widgets._tasks import Actions
from nip.widgets.run_monitor import loss_points

if TYPE_CHECKING:
    from nip.jobs import FineTuneEvent, FineTuneJob
    from nip.rollouts.records import Transcript
    from nip.training.groups import PureTextSharedModelGroup

_BAR_STYLE = {"running": "info", "succeeded": "success", "pending": ""}


def job_progress(job: FineTuneJob, events: Sequence[FineTuneEvent], num_epochs: int) -> float:
    """How far a job is, from 0 to 1 (its steps or epochs as events report them; 1 once
    it has ended; 0 when nothing says)."""
    if job.done:
        return 1.0
    for event in reversed(events):
        data = event.data
        if data.get("total_steps") and "step" in data:
            return min(data["step"] / data["total_steps"], 1.0)
        if "epoch" in data and num_epochs:
            return min(float(data["epoch"]) / num_epochs, 1.0)
    return 0.0


def job_loss(job: FineTuneJob, events: Sequence[FineTuneEvent]) -> float | None:
    """The job's final training loss, else the last loss its events report."""
    if job.training_loss is not None:
        return job.training_loss
    points = loss_points([{"data": e.data} for e in events])
    return points[-1][1] if points else None


class FineTuneLauncher(Actions, PlainTextRepr, ipywidgets.VBox):
    """Build a group's fine-tuning dataset, preview it, launch the job, watch it (status,
    progress, loss, events) and switch the group to the new model.

    Launch is enabled when the group is trainable with at least
    ``text_rl.min_fine_tune_examples`` examples; "Switch to new model" once the job succeeded.
    Clicks run on Jupyter's loop or, from a script, before ``click()`` returns; errors appear in
    :attr:`errors`.

    Args:
        group: The group to fine-tune.
        data: SFT: transcripts (for every member) or transcripts by agent name. DPO:
            :class:`~nip.training.algorithms.malt.DpoExample` pairs, or pairs by agent name.
        method: "supervised" or "dpo".
        select: SFT: keep the dialogues Expert Iteration would choose, else every dialogue in
            which the agent spoke (a checkbox changes it).
        iteration: The iteration the selection draws its seed (and guess replacement) for.
        job_name: The job's readable name (None: the backend's default).
        poll_interval_s: Seconds between polls of the job.
        preview_count: How many examples to show.
    """

    def __init__(
        self,
        group: PureTextSharedModelGroup,
        data: Iterable[Any] | Mapping[str, Iterable[Any]],
        *,
        method: Literal["supervised", "dpo"] = "supervised",
        select: bool = False,
        iteration: int = 0,
        job_name: str | None = None,
        poll_interval_s: float = 2.0,
        preview_count: int = 3,
    ):
        super().__init__()
        if method not in ("supervised", "dpo"):
            raise ValueError(f"method must be 'supervised' or 'dpo', not {method!r}")
        self.group = group
        self.method = method
        self.iteration = iteration
        self.poll_interval_s = poll_interval_s
        self.preview_count = preview_count
        members = list(group.agent_wholes)
        if isinstance(data, Mapping):
            self._data = {name: list(data.get(name, ())) for name in members}
        else:
            items = list(data)
            self._data = dict.fromkeys(members, items)  # read, never changed
        self.job_id: str | None = None
        self.job: FineTuneJob | None = None
        self.events: list[FineTuneEvent] = []
        self._switched = False
        self._declined = False  # launch() was refused by the group
        self._examples: list[dict[str, Any]] = []

        self.select_box = ipywidgets.Checkbox(
            value=select and method == "supervised",
            description="Expert Iteration's selection",
            disabled=method != "supervised",
            indent=False,
        )
        self.header = ipywidgets.HTML()
        self.summary = ipywidgets.HTML()
        self.preview = ipywidgets.HTML()
        self.job_name_box = ipywidgets.Text(
            value=job_name or "", description="job name", placeholder="(the backend's default)"
        )
        self.launch_button = self._button("Launch", "rocket", self.launch_and_watch)
        # Cancelling must work while Launch is still watching the job.
        self.cancel_button = self._button("Cancel job", "stop", self.cancel, exclusive=False)
        self.switch_button = self._button("Switch to new model", "exchange", self.switch)
        self.progress = ipywidgets.FloatProgress(value=0.0, min=0.0, max=1.0, description="job")
        self.status = ipywidgets.HTML()
        self.events_view = ipywidgets.HTML()
        self.errors = ipywidgets.Output()
        self.select_box.observe(lambda _: self.rebuild(), "value")
        self.children = [
            self.header,
            self.select_box,
            self.summary,
            ipywidgets.Accordion([self.preview], titles=("examples",), selected_index=0),
            ipywidgets.HBox(
                [self.job_name_box, self.launch_button, self.cancel_button, self.switch_button]
            ),
            ipywidgets.HBox([self.progress, self.status]),
            self.events_view,
            self.errors,
        ]
        self.rebuild()

    # --------------------------------------------------------------- dataset
    @property
    def examples(self) -> list[dict[str, Any]]:
        """The training lines the job gets (OpenAI fine-tuning format)."""
        return list(self._examples)

    def chosen_rollouts(self) -> tuple[dict[str, list[Transcript]], dict[str, list[Transcript]]]:
        """SFT: the dialogues each member learns from, and those whose verifier decision is
        replaced by the true label (Expert Iteration's selection, when it is on)."""
        if not self.select_box.value:
            return self._data, {}
        from nip.training.algorithms.expert_iteration import select_group_rollouts

        selected: dict[str, list[Transcript]] = {}
        replaced: dict[str, list[Transcript]] = {}
        for name, agent in self.group.agent_wholes.items():  # each member from its own data
            chosen, guess_replaced = select_group_rollouts(
                self._data[name], {name: agent}, self.group.hyper_params, self.iteration
            )
            selected |= chosen
            replaced |= guess_replaced
        return selected, replaced

    def rebuild(self) -> None:
        """Rebuild the examples from the data and the selection setting, and redraw."""
        self.header.value = self._header()
        if self.method == "supervised":
            self._examples = self.group.supervised_examples(*self.chosen_rollouts())
        else:
            self._examples = [pair.to_openai() for pairs in self._data.values() for pair in pairs]
        minimum = self.group.hyper_params.text_rl.min_fine_tune_examples
        summary = f"{counted(len(self._examples), self.method + ' example')} for {self._members()}"
        problem = self._launch_problem()
        self.summary.value = escape(summary) + (
            f"<br>{error_html(problem)}" if problem else note_html(f" (at least {minimum})")
        )
        shown = "<hr>".join(self._example_html(e) for e in self._examples[: self.preview_count])
        self.preview.value = shown or note_html("no examples")
        self._update_buttons()

    def _launch_problem(self) -> str:
        minimum = self.group.hyper_params.text_rl.min_fine_tune_examples
        from nip.training.groups import SKIP_REASONS, too_few_examples

        if not self.group.is_trainable:
            return f"the group is {SKIP_REASONS['frozen']}"
        if len(self._examples) < minimum:
            return too_few_examples(
                self.group.group_name, len(self._examples), self.method, minimum
            )
        return ""

    def _example_html(self, example: dict[str, Any]) -> str:
        if "messages" in example:
            return messages_html(example["messages"])
        chosen = example["preferred_output"][0]["content"]
        rejected = example["non_preferred_output"][0]["content"]
        return (
            messages_html(example["input"]["messages"])
            + chat_bubble("preferred", chosen, "#e6f4ea")
            + chat_bubble("not preferred", rejected, "#fce8e6")
        )

    # -------------------------------------------------------------- the job
    async def launch(self) -> str | None:
        """Submit the job; returns its id (None when there is none: the group is frozen or
        has too few examples, as :attr:`no_job_reason` and the status line say)."""
        name = self.job_name_box.value.strip() or None
        self._follow(None)
        if self._launch_problem():  # the group would decline it (and warn): not asked
            job_id = None
        elif self.method == "supervised":
            job_id = await self.group.create_supervised_fine_tune_job(
                *self.chosen_rollouts(), job_name=name
            )
        else:
            job_id = await self.group.create_dpo_fine_tune_job(self._data, job_name=name)
        self.job_id, self._declined = job_id, job_id is None
        self._update_buttons()
        submitted = escape(f"job {job_id} submitted")
        self.status.value = error_html(self.no_job_reason or "") or submitted
        return job_id

    @property
    def no_job_reason(self) -> str | None:
        """Why there is no job to watch or switch to (None when there is one): e.g. "no job
        was launched: group 'verifier': too few examples to fine-tune (0 dpo examples...)"."""
        if self.job_id is not None:
            return None
        outcome = self.group.state.last_job_outcome.replace("_", " ")
        declined = f"the group declined ({outcome})" if self._declined else ""
        unclicked = "Launch has not been clicked (or launch() awaited)"
        return f"no job was launched: {self._launch_problem() or declined or unclicked}"

    def _require_job(self, action: str) -> str:
        """The job's id, or a :class:`~nip.errors.FineTuneError` that says why there is none."""
        if self.job_id is None:
            from nip.errors import FineTuneError

            raise FineTuneError(f"{self._members()}: cannot {action}: {self.no_job_reason}")
        return self.job_id

    def _follow(self, job_id: str | None) -> None:
        """Show ``job_id`` from now on, forgetting everything about the previous job."""
        self.job_id, self.job, self.events = job_id, None, []
        self._switched = self._declined = False
        self.progress.value, self.progress.bar_style = 0.0, ""
        self._update_buttons()

    async def poll(self) -> FineTuneJob:
        """Ask the backend how the job is doing once, and show it."""
        job_id = self._require_job("poll a job")
        backend = self.group.fine_tune_backend
        self.job = await backend.get_job(job_id)
        self.events = await backend.list_events(job_id)
        self._show_job()
        return self.job

    async def watch(self, job_id: str | None = None) -> FineTuneJob:
        """Poll until the job ends, without blocking the loop (``job_id``: follow that job instead,
        e.g. a trainer's ``group.state.fine_tune_job_id``)."""
        if job_id is not None:
            self._follow(job_id)
        while not (await self.poll()).done:
            await asyncio.sleep(self.poll_interval_s)
        return self.job  # type: ignore[return-value]

    async def launch_and_watch(self) -> FineTuneJob | None:
        """Launch, then watch until the job ends (what the Launch button does)."""
        if await self.launch() is None:
            return None
        return await self.watch()

    async def cancel(self) -> None:
        """Ask the backend to stop the job; the next poll shows it cancelled."""
        if self.job_id is not None:
            await self.group.fine_tune_backend.cancel_job(self.job_id)
            await self.poll()

    async def switch(self) -> str:
        """Make the group generate with the job's model; returns its name.

        Raises:
            FineTuneError: No job was launched (the message says why), or it has not
                succeeded.
        """
        self._require_job("switch to a new model")
        model = await self.group.switch_to_next_model()
        self._switched = True
        self.header.value = self._header()
        verb = "generates" if len(self.group.agent_wholes) == 1 else "generate"
        self.status.value = escape(f"{self._members()} now {verb} with {model}")
        self._update_buttons()
        return model

    # --------------------------------------------------------------- display
    def _members(self) -> str:
        return ", ".join(self.group.agent_wholes)

    def _header(self) -> str:
        group = self.group
        return (
            f"<b>group {escape(group.group_name)}</b> ({escape(self._members())}) &middot; "
            f"model {escape(group.model_name)} &middot; fine-tuning: "
            f"{escape(getattr(group.fine_tune_backend, 'name', group.fine_tune_backend))}"
        )

    def _show_job(self) -> None:
        job = self.job
        assert job is not None
        self.progress.value = job_progress(job, self.events, self.group.num_epochs)
        self.progress.bar_style = _BAR_STYLE.get(job.status, "danger")
        loss = job_loss(job, self.events)
        parts = [
            f"job {job.id}: {job.status}",
            f"loss {loss:.4g}" if loss is not None else "",
            f"{job.trained_tokens} tokens trained" if job.trained_tokens else "",
            f"new model {job.fine_tuned_model}" if job.status == "succeeded" else "",
        ]
        text = escape(" · ".join(filter(None, parts)))
        self.status.value = text + (f"<br>{error_html(job.error)}" if job.error else "")
        lines = [f"{e.level}: {e.message}" for e in self.events[-5:]]
        self.events_view.value = pre_html("\n".join(lines)) if lines else ""
        self._update_buttons()

    def _update_buttons(self) -> None:
        job = self.job
        active = self.job_id is not None and (job is None or not job.done)
        self.launch_button.disabled = self._busy or active or bool(self._launch_problem())
        self.cancel_button.disabled = not active
        self.switch_button.disabled = (
            self._busy or self._switched or job is None or job.status != "succeeded"
        )

    _redraw = _update_buttons

    def __repr__(self) -> str:
        status = self.job.status if self.job else ("launched" if self.job_id else "no job")
        return (
            f"FineTuneLauncher(group={self.group.group_name!r}, method={self.method!r}, "
            f"examples={len(self._examples)}, status={status!r})"
        )
