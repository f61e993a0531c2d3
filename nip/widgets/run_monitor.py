"""A live dashboard of a training run: where it stands, its metrics, its jobs, pause and stop.

``RunMonitor(trainer)`` (beside ``asyncio.create_task(trainer.train_async())``) or
``RunMonitor("runs/my-run")`` (a ``nip run`` elsewhere) reads the run's directory
(:class:`~nip.widgets.run_snapshot.RunSnapshot`) on an asyncio task of the kernel's loop; its
buttons write the run's control file (:mod:`nip.runs.control`). It takes a trainer rather than
being a ``trainer.dashboard()`` method because the training layer must not import the widgets.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Protocol

import ipywidgets
import plotly.graph_objects as go

from nip.runs.control import request
from nip.runs.spend import usd
from nip.training.context import RunContext
from nip.viz.live_figure import LiveFigure
from nip.widgets._html import PlainTextRepr, error_html, escape, note_html, table_html
from nip.widgets._tasks import Polling, button
from nip.widgets.run_snapshot import JobSnapshot, RunSnapshot, loss_points


class _Trainer(Protocol):
    context: RunContext


#: Each status's colour ("not started" and "no run" grey).
_STATUS_COLOURS = {
    **dict.fromkeys(("pausing", "paused"), "#e37400"),
    **dict.fromkeys(("stopping", "stopped", "failed", "interrupted"), "#c5221f"),
    "running": "#1a73e8",
    "finished": "#188038",
}


def _figure(
    title: str, y_title: str, *, x_title: str = "iteration", y_range: list[float] | None = None
) -> go.Figure:
    """An empty line plot sized so that two sit side by side in a notebook."""
    return go.Figure(
        layout=dict(
            title=dict(text=title, font=dict(size=14)),
            width=540,
            height=280,
            margin=dict(l=55, r=20, t=40, b=40),
            xaxis=dict(title=dict(text=x_title), dtick=1 if x_title == "iteration" else None),
            yaxis=dict(title=dict(text=y_title), range=y_range),
            template="plotly_white",
            showlegend=True,
            legend=dict(orientation="h", y=-0.3),
        )
    )


class RunMonitor(Polling, PlainTextRepr, ipywidgets.VBox):
    """Watch a run while it trains (here or in another process): status, progress, spend,
    accuracy and reward per iteration, each group's latest job and its loss, and Pause /
    Resume / Stop buttons (acting at the next stage boundary).

    Args:
        run: A trainer or its :class:`~nip.training.context.RunContext` (its jobs' losses
            are then also asked of its fine-tuning backends), or a run directory.
        start: Start polling at once when there is a running event loop (in a notebook).
    """

    def __init__(
        self,
        run: _Trainer | RunContext | str | Path,
        *,
        poll_interval_s: float = 1.0,
        start: bool = True,
    ):
        super().__init__()
        if isinstance(run, str | Path):
            self.context, self.run_dir = None, Path(run)
        else:
            self.context = run if isinstance(run, RunContext) else run.context
            self.run_dir = Path(self.context.run_dir.path)
        self.poll_interval_s = poll_interval_s
        self.snapshot = RunSnapshot(self.run_dir)
        self._job_events: dict[str, tuple[tuple[int, float], ...]] = {}
        self._job_done: dict[str, bool] = {}

        self.header = ipywidgets.HTML()
        self.progress = ipywidgets.FloatProgress(
            value=0.0, min=0.0, max=1.0, description="run", bar_style="info"
        )
        self.stage_progress = ipywidgets.IntProgress(value=0, min=0, max=6, description="stage")
        self.progress_text = ipywidgets.HTML()
        self.pause_button = button("Pause after stage", "pause", lambda: self.ask("pause"))
        self.resume_button = button("Resume", "play", lambda: self.ask("run"))
        self.stop_button = button(
            "Stop after stage", "stop", lambda: self.ask("stop"), button_style="danger"
        )
        self.accuracy_plot = LiveFigure(
            _figure("Verifier accuracy", "accuracy", y_range=[-0.02, 1.02])
        )
        self.reward_plot = LiveFigure(_figure("Mean episode reward (train)", "reward"))
        self.loss_plot = LiveFigure(
            _figure("Fine-tuning loss (latest job per group)", "loss", x_title="step")
        )
        self.jobs_view = ipywidgets.HTML()
        self.spend_view = ipywidgets.HTML()  # what the run spent, beside its estimate
        self.children = [
            self.header,
            ipywidgets.HBox([self.progress, self.stage_progress, self.progress_text]),
            self.spend_view,
            ipywidgets.HBox([self.pause_button, self.resume_button, self.stop_button]),
            ipywidgets.HBox([self.accuracy_plot, self.reward_plot]),
            ipywidgets.HBox([self.jobs_view, self.loss_plot]),
        ]
        self.refresh()
        if start:
            self.start()

    # ------------------------------------------------------------------ polling
    async def poll(self) -> RunSnapshot | None:
        """Refresh once; the snapshot once the run is finished (polling stops there)."""
        await self.refresh_async()
        return self.snapshot if self.snapshot.finished else None

    def close(self) -> None:
        self.stop_watching()
        super().close()

    async def refresh_async(self) -> RunSnapshot:
        """Read the run directory (and, with a trainer, its jobs' events) and redraw."""
        for group in self.context.groups.values() if self.context is not None else ():
            job_id = group.state.fine_tune_job_id
            if not job_id or self._job_done.get(job_id):
                continue
            with contextlib.suppress(Exception):  # a backend that cannot answer now
                backend = group.fine_tune_backend
                job = await backend.get_job(job_id)
                events = await backend.list_events(job_id)
                self._job_events[job_id] = loss_points([{"data": e.data} for e in events])
                self._job_done[job_id] = job.done
        return self.refresh()

    def refresh(self) -> RunSnapshot:
        """Read the run directory once and redraw."""
        self.snapshot = RunSnapshot.read(self.run_dir)
        self._draw()
        return self.snapshot

    # ------------------------------------------------------------------ control
    def ask(self, what: str) -> None:
        """Write a control request ("pause", "run" or "stop") and redraw."""
        request(self.run_dir, what)
        self.refresh()

    # ------------------------------------------------------------------ drawing
    def _draw(self) -> None:
        snapshot = self.snapshot
        status = snapshot.status
        colour = _STATUS_COLOURS.get(status, "#666")
        self.header.value = (
            f"<b>{escape(self.run_dir.name)}</b> &middot; "
            f"<span style='color:{colour};font-weight:600'>{escape(status)}</span> &middot; "
            f"{escape(snapshot.position)}"
            + (f"<br>{escape(snapshot.planned)}" if snapshot.planned else "")
            + (f"<br>{error_html(snapshot.error)}" if status == "failed" and snapshot.error else "")
            + (
                f"<br>nothing runs it (killed): resume it with nip resume {escape(self.run_dir)}"
                if status == "interrupted"
                else ""
            )
            + note_html(f"  ({self.run_dir})")
        )
        self.progress.value = snapshot.progress
        self.progress.bar_style = "success" if snapshot.finished else "info"
        stages = len(snapshot.stages_of_iteration)
        self.stage_progress.max = stages
        self.stage_progress.value = (
            stages if snapshot.finished else max(snapshot.stage_number - 1, 0)
        )
        played = f" · this stage: {snapshot.stage_progress}" if snapshot.stage_progress else ""
        self.progress_text.value = note_html(
            f"{snapshot.stages_completed} of {snapshot.total_stages} stages done{played}"
        )
        spend = snapshot.spend
        agents = ", ".join(f"{a} {usd(c)}" for a, c in spend.by_agent.items())
        self.spend_view.value = note_html(
            spend.describe() + (f" · by agent: {agents}" if agents else "")
        )
        ended = snapshot.finished or not snapshot.exists or status == "interrupted"
        self.pause_button.disabled = ended or snapshot.request == "pause"
        self.resume_button.disabled = ended or snapshot.request == "run"
        self.stop_button.disabled = ended or snapshot.request == "stop"
        self._set_traces(
            self.accuracy_plot,
            {split: snapshot.metric(split, "accuracy") for split in ("train", "test")},
        )
        self._set_traces(
            self.reward_plot,
            {a: snapshot.metric("train", f"{a}.mean_episode_reward") for a in snapshot.agents},
        )
        self._draw_jobs()

    @staticmethod
    def _set_traces(plot: LiveFigure, series: dict[str, list[tuple[int, float]]]) -> None:
        """Make ``plot`` show ``series`` (name -> points), and draw it if that changed."""
        plot.figure.data = ()
        for name, points in series.items():
            if points:
                xs, ys = zip(*points, strict=True)
                plot.figure.add_scatter(name=name, mode="lines+markers", x=list(xs), y=list(ys))
        plot.draw()

    def job_losses(self, job: JobSnapshot) -> tuple[tuple[int, float], ...]:
        """A job's loss points: from its folder, else from its backend (with a trainer)."""
        return job.losses or (self._job_events.get(job.job_id or "", ()))

    def _draw_jobs(self) -> None:
        jobs = self.snapshot.jobs
        losses = {job.group: list(self.job_losses(job)) for job in jobs}
        self._set_traces(self.loss_plot, losses)
        # No empty plot: a loss curve only where a job reported losses, else a line saying so.
        self.loss_plot.layout.display = None if any(losses.values()) else "none"
        if not jobs:
            self.jobs_view.value = note_html("no fine-tuning jobs yet")
            return
        rows = []
        for job in jobs:
            last = losses[job.group][-1][1] if losses[job.group] else None
            loss = f"{last:.4g}" if last is not None else "none" if job.dummy else "–"
            iteration = "–" if job.iteration is None else job.iteration
            model = job.model or "(base model)"
            rows.append(
                [
                    escape(v)
                    for v in (job.group, job.job_id or "–", iteration, job.state, loss, model)
                ]
            )
        head = ("group", "latest job", "iteration", "status", "loss", "model now")
        why = ": the dummy backend trains nothing" if all(j.dummy for j in jobs) else ""
        note = "" if any(losses.values()) else note_html("no losses reported" + why)
        self.jobs_view.value = table_html(head, rows, "font-size:90%;margin:40px 16px 0 0") + note

    def __repr__(self) -> str:
        return f"RunMonitor({str(self.run_dir)!r}: {self.snapshot.describe()})"
