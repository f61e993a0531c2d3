"""A live dashboard of a training run: where it stands, its metrics, its jobs, pause and stop.

``RunMonitor(trainer)`` (beside ``asyncio.create_task(trainer.train_async())``) or
``RunMonitor("runs/my-run")`` (a ``nip run`` elsewhere) reads the run's directory
(:class:`RunSnapshot`) on an asyncio task of the kernel's loop; its buttons write the run's
control file (:mod:`nip.runs.control`). It takes a trainer rather than being a
``trainer.dashboard()`` method because the training layer must not import the widgets.

:class:`RunSnapshot`, the model the dashboard renders, is a plain record read from the files a
trainer writes, so it works the same for a run in this kernel and a ``nip run`` elsewhere, and is
tested without a browser (``RunSnapshot.read("runs/my-run").position``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import ipywidgets
import plotly.graph_objects as go

from nip.runs import control
from nip.runs.run_dir import RunDirectory
from nip.runs.spend import ESTIMATE_FILE, RunSpend, usd
from nip.training.context import RunContext
from nip.training.plan import RunPlan
from nip.utils import counted
from nip.utils.files import read_growing_jsonl, read_json_object
from nip.viz.live_figure import LiveFigure
from nip.widgets._html import PlainTextRepr, error_html, escape, note_html, table_html
from nip.widgets._tasks import Polling, button


@dataclass(frozen=True)
class JobSnapshot:
    """A group's latest fine-tuning job, as the run directory records it.

    Attributes:
        outcome: The group's last fine-tuning outcome ("submitted", "frozen", ...).
        model: The model the group generates with now.
        status: The job's own status when its folder records one (local LoRA jobs).
        losses: ``(step, loss)`` points its events reported, oldest first.
        dummy: Whether the group's agents use the dummy backend (its jobs train nothing).
    """

    group: str
    job_id: str | None
    iteration: int | None
    outcome: str
    model: str | None
    status: str | None = None
    losses: tuple[tuple[int, float], ...] = ()
    failed: bool = False
    dummy: bool = False

    @property
    def state(self) -> str:
        """Where the group's fine-tuning stands, in words ("succeeded, in use", "running"...)."""
        if self.status:
            words = self.status
        elif self.outcome == "none":  # the iteration's outcome is forgotten once switched
            words = "no job yet" if self.job_id is None else "succeeded, in use"
            words = "failed: kept the previous model" if self.failed else words
        else:
            words = _OUTCOME_WORDS.get(self.outcome, self.outcome.replace("_", " "))
        return f"{words} (dummy backend: trains nothing)" if self.dummy and self.job_id else words


#: A group's ``last_job_outcome`` in words, where its name says too little.
_OUTCOME_WORDS = {
    "frozen": "frozen: never trained",
    "insufficient_data": "too few examples: not trained",
    "not_scheduled": "not scheduled this iteration",
    "failed": "failed: keeps its previous model",
}


@dataclass(frozen=True)
class RunSnapshot:
    """A run's position, metrics and jobs, read from its directory.

    Attributes:
        exists: Whether the folder holds a run (a trainer was built there).
        started: Whether the trainer has saved a state yet (finished a stage).
        stage: The stage being run (or next to run); ``"done"`` once finished.
        request: The standing control request: "run", "pause" or "stop".
        reported: The trainer's report at its last stage boundary (None when older than the
            saved state; "interrupted": it said running, but was killed); ``error`` what made
            it fail.
        metrics: Every saved metrics file, one dict each (with ``split`` and ``iteration``).
        stage_done / stage_total: Dialogues the current stage has finished and plays (None
            when it plays none, or has not reported yet).
        plan: The run's plan (``plan.json``; None for a run saved before plans).
        estimate: The dry run's estimate saved when it started (``cost_estimate.json``).
    """

    run_dir: Path
    exists: bool = False
    started: bool = False
    iteration: int = 0
    num_iterations: int = 1
    stage: str = "sample_rollouts"
    stages_completed: int = 0
    request: str = "run"
    reported: str | None = None
    error: str | None = None
    metrics: tuple[dict[str, Any], ...] = ()
    jobs: tuple[JobSnapshot, ...] = field(default_factory=tuple)
    stage_done: int | None = None
    stage_total: int | None = None
    plan: RunPlan | None = None
    estimate: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, run_dir: str | Path) -> RunSnapshot:
        """Read the run in ``run_dir`` (a folder without a run gives ``exists=False``)."""
        directory = RunDirectory(run_dir)
        path = directory.path
        params = read_json_object(path / "hyper_params.json")
        state = read_json_object(path / "state.json")
        status = control.read_status(path)
        reported = control.reported_status(path, status)
        stages_completed = int(state.get("stages_completed", 0))
        fresh = status.get("stages_completed") == stages_completed
        iteration = int(state.get("iteration", 0))
        stage = str(state.get("stage", "sample_rollouts"))
        played = control.read_stage_progress(path)
        plan_data = read_json_object(path / "plan.json")
        try:
            plan = RunPlan.from_dict(plan_data) if plan_data else None
        except (TypeError, KeyError):  # a plan.json of another nip
            plan = None
        current = (played.get("stage"), played.get("iteration")) == (stage, iteration)
        return cls(
            run_dir=path,
            exists=bool(params),
            started=bool(state),
            iteration=iteration,
            num_iterations=int(params.get("rl", {}).get("num_iterations", 1) or 1),
            stage=stage,
            stages_completed=stages_completed,
            request=control.read_request(path),
            reported=reported if fresh or reported == "interrupted" else None,
            error=status.get("error") if fresh else None,
            metrics=tuple(directory.metrics_records()),
            jobs=tuple(_jobs(path, state, params, plan)),
            stage_done=int(played["done"]) if current else None,
            stage_total=int(played["total"]) if current else None,
            plan=plan,
            estimate=read_json_object(path / ESTIMATE_FILE),
        )

    # ------------------------------------------------------------------ position
    @property
    def finished(self) -> bool:
        return self.stage == "done"

    @property
    def status(self) -> str:
        """In words: "no run", "not started", "running", "pausing" (not yet at a stage
        boundary), "paused", "stopping", "stopped", "failed", "interrupted" (killed: resume it)
        or "finished"."""
        if self.finished:
            return "finished"
        if not self.exists:
            return "no run"
        if self.reported == "interrupted":
            return self.reported
        if self.request == "pause":
            return "paused" if self.reported == "paused" else "pausing"
        if self.request == "stop":
            return "stopping"
        if self.reported in ("stopped", "failed"):
            return self.reported
        return "running" if self.started else "not started"

    @property
    def stages_of_iteration(self) -> tuple[str, ...]:
        """The stages the current iteration runs (the plan's; none without a plan)."""
        if self.plan is None or self.iteration >= len(self.plan):
            return ()
        return self.plan[self.iteration].stages

    @property
    def stage_number(self) -> int:
        """The current stage's place in its iteration, from 1 (0 once finished)."""
        stages = self.stages_of_iteration
        return stages.index(self.stage) + 1 if self.stage in stages else 0

    @property
    def total_stages(self) -> int:
        """Stages in the whole run (the plan's)."""
        return self.plan.total_stages if self.plan is not None else 0

    @property
    def progress(self) -> float:
        """Share of the run's stages finished, from 0 to 1."""
        if self.finished:
            return 1.0
        return min(self.stages_completed / self.total_stages, 1.0) if self.total_stages else 0.0

    # ------------------------------------------------------------------- metrics
    def metric(self, split: str, name: str) -> list[tuple[int, float]]:
        """``(iteration, value)`` of one metric of one split, in order (missing ones left out)."""
        return sorted(
            (int(row["iteration"]), float(row[name]))
            for row in self.metrics
            if row.get("split") == split and isinstance(row.get(name), int | float)
        )

    def latest(self, split: str, name: str) -> float | None:
        """The last value of one metric of one split (None before it is saved)."""
        points = self.metric(split, name)
        return points[-1][1] if points else None

    @property
    def spend(self) -> RunSpend:
        """What the run has spent so far (inference and fine-tuning) beside its estimate."""
        return RunSpend.from_records(self.metrics, self.estimate)

    @property
    def agents(self) -> list[str]:
        """Agents with a mean episode reward in the metrics."""
        suffix = ".mean_episode_reward"
        names = {k[: -len(suffix)] for row in self.metrics for k in row if k.endswith(suffix)}
        return sorted(names)

    @property
    def stage_progress(self) -> str:
        """How far the current stage has got, in words ("5 of 8 dialogues"), or ""."""
        if self.finished or self.stage_total is None:
            return ""
        return f"{self.stage_done} of {self.stage_total} dialogues"

    @property
    def position(self) -> str:
        """Where the run stands, in words: its iteration and stage (and how far it has got)."""
        if self.finished:
            return f"all {counted(self.num_iterations, 'iteration')} done"
        played = f" ({self.stage_progress})" if self.stage_progress else ""
        return (
            f"iteration {self.iteration + 1} of {self.num_iterations} · "
            f"stage {self.stage_number} of {len(self.stages_of_iteration)}: "
            f"{self.stage.replace('_', ' ')}{played}"
        )

    @property
    def planned(self) -> str:
        """What the plan has this iteration do, in words: its test and its fine-tuning."""
        if self.plan is None or self.finished or self.iteration >= len(self.plan):
            return ""
        row = self.plan.rows()[self.iteration]
        return f"{row['test']} · fine-tuning: {row['fine-tuning']}"

    def describe(self) -> str:
        """One line: the status and the position."""
        return f"{self.status} · {self.position}"


def _jobs(
    run_dir: Path, state: dict[str, Any], params: dict[str, Any], plan: RunPlan | None
) -> list[JobSnapshot]:
    iterations = state.get("job_iterations", {})
    agents = params.get("agents") or {}
    steps = [g for it in plan.iterations for g in it.groups] if plan is not None else []
    members = {g.group: g.agents for g in steps}
    jobs = []
    for group, group_state in sorted(state.get("groups", {}).items()):
        job_id = group_state.get("fine_tune_job_id")
        history = group_state.get("model_history") or []
        model = group_state.get("fine_tuned_model_name") or (history[-1] if history else None)
        folder = run_dir / "jobs" / job_id if job_id else None  # a local LoRA job's folder
        local = folder is not None and folder.is_dir()
        status = read_json_object(folder / "status.json").get("status") if local else None
        losses = loss_points(read_growing_jsonl(folder / "events.jsonl")) if local else ()
        dummy = [agents.get(a, {}).get("use_dummy_api") for a in members.get(group, ())]
        jobs.append(
            JobSnapshot(
                group=group,
                job_id=job_id,
                iteration=iterations.get(group),
                outcome=str(group_state.get("last_job_outcome", "none")),
                model=model,
                status=status,
                losses=losses,
                failed=any(
                    f.get("job_id") == job_id for f in group_state.get("fine_tune_failures") or ()
                ),
                dummy=bool(dummy) and all(dummy),
            )
        )
    return jobs


def loss_points(events: list[dict[str, Any]]) -> tuple[tuple[int, float], ...]:
    """``(step, loss)`` of every event reporting a training loss (no step: numbered in order)."""
    points = []
    for number, event in enumerate(events):
        data = event.get("data", event)
        loss = data.get("loss", data.get("train_loss"))
        if isinstance(loss, int | float):
            points.append((int(data.get("step", number)), float(loss)))
    return tuple(points)


# ------------------------------------------------------------------ the dashboard
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
        control.request(self.run_dir, what)
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
