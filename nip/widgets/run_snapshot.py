"""What a run directory says about its run right now: the model the dashboard renders.

:class:`RunSnapshot` is a plain record read from the files a trainer writes, so it works the
same for a run in this kernel and a ``nip run`` elsewhere, and is tested without a browser
(``RunSnapshot.read("runs/my-run").position``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nip.runs.control import read_request, read_stage_progress, read_status, reported_status
from nip.runs.run_dir import RunDirectory
from nip.runs.spend import ESTIMATE_FILE, RunSpend
from nip.training.plan import RunPlan
from nip.utils.files import read_growing_jsonl, read_json_object


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
        params = read_json_object(directory.path / "hyper_params.json")
        num_iterations = int(params.get("rl", {}).get("num_iterations", 1) or 1)
        state = read_json_object(directory.path / "state.json")
        status, reported = read_status(directory.path), reported_status(directory.path)
        stages_completed = int(state.get("stages_completed", 0))
        fresh = status.get("stages_completed") == stages_completed
        iteration = int(state.get("iteration", 0))
        stage = str(state.get("stage", "sample_rollouts"))
        played = read_stage_progress(directory.path)
        plan_data = read_json_object(directory.path / "plan.json")
        try:
            plan = RunPlan.from_dict(plan_data) if plan_data else None
        except (TypeError, KeyError):  # a plan.json of another nip
            plan = None
        current = (played.get("stage"), played.get("iteration")) == (stage, iteration)
        return cls(
            run_dir=directory.path,
            exists=bool(params),
            started=bool(state),
            iteration=iteration,
            num_iterations=num_iterations,
            stage=stage,
            stages_completed=stages_completed,
            request=read_request(directory.path),
            reported=reported if fresh or reported == "interrupted" else None,
            error=status.get("error") if fresh else None,
            metrics=tuple(directory.metrics_records()),
            jobs=tuple(_jobs(directory.path, state, params, plan)),
            stage_done=int(played["done"]) if current else None,
            stage_total=int(played["total"]) if current else None,
            plan=plan,
            estimate=read_json_object(directory.path / ESTIMATE_FILE),
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
            return f"all {self.num_iterations} iteration(s) done"
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
