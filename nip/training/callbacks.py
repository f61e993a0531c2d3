"""What watches a run: callbacks the trainer calls at its events (TRL's ``TrainerCallback``).

The loop knows nothing of terminals, W&B or control files: it calls each callback's hooks with
the run's :class:`~nip.training.context.RunContext`, never the trainer. The defaults
(``PureTextEiTrainer.callbacks``) are :class:`~nip.training.reporter.RunReporter`,
:class:`WandbCallback`, :class:`ControlFileCallback` (``nip control RUN_DIR pause|resume|stop``),
:class:`StageProgressCallback` and :class:`EstimateCallback`; pass more with
``build_trainer(..., callbacks=[...])``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nip.runs.control import StageProgressWriter, between_stages, report_status
from nip.runs.spend import ESTIMATE_FILE, read_spend
from nip.settings import ExperimentSettings
from nip.training.context import RunContext
from nip.training.cost_estimate import save_estimate
from nip.utils.notices import warn


class Callbacks(list["TrainerCallback"]):
    """A run's callbacks, whose hooks are called in order."""

    async def call(self, hook: str, run: RunContext, *args: Any, **kwargs: Any) -> None:
        for callback in self:
            await getattr(callback, hook)(run, *args, **kwargs)

    def log(self, run: RunContext, metrics: dict[str, Any], prefix: str = "") -> None:
        for callback in self:
            callback.on_log(run, {f"{prefix}{k}": v for k, v in metrics.items()})

    def progress(self, run: RunContext, stage: str, offset: int = 0):
        """The ``on_progress(done, total)`` of a stage's dialogues."""
        return lambda done, total: [c.on_progress(run, stage, done, total, offset) for c in self]


class TrainerCallback:
    """Hooks the trainer calls; each does nothing unless overridden."""

    async def on_train_begin(self, run: RunContext) -> None:
        """Before the first stage of a ``train`` call."""

    async def on_engines_wait(self, run: RunContext, *, done: bool) -> None:
        """Around the wait for the agents' engines (``done`` False before, True after)."""

    async def on_stage_begin(self, run: RunContext, stage: str) -> None:
        """Before a stage runs."""

    async def on_stage_end(
        self, run: RunContext, stage: str, error: BaseException | None = None
    ) -> None:
        """After a stage ran (``error``: what it raised), before the state moves on."""

    async def on_state_saved(self, run: RunContext, stage: str) -> None:
        """After the state was saved at the end of ``stage``."""

    async def should_continue(self, run: RunContext) -> bool:
        """At a stage boundary: False stops the run there (it can be resumed)."""
        return True

    def on_progress(
        self, run: RunContext, stage: str, done: int, total: int, offset: int = 0
    ) -> None:
        """Dialogues of the running stage finished (``offset``: a batch's place in the stage)."""

    def on_log(self, run: RunContext, metrics: dict[str, Any]) -> None:
        """Metrics of the current iteration."""

    async def on_job_submitted(self, run: RunContext, group: str, job_id: str) -> None:
        """A group's fine-tuning job was submitted (and recorded in the state)."""

    async def on_train_end(self, run: RunContext) -> None:
        """The run finished (not called when ``train`` returns early)."""


class WandbCallback(TrainerCallback):
    """Metrics to W&B (online, offline or disabled: ``ExperimentSettings.wandb_mode``), and
    the run directory as an artifact after every iteration."""

    def __init__(self) -> None:
        self.logger: Any = None

    async def on_train_begin(self, run: RunContext) -> None:
        # W&B's start takes seconds (imports, its service, files): off the event loop, where
        # a sweep's other cells go on meanwhile.
        if self.logger is None and run.state.stage != "done":
            self.logger = await asyncio.to_thread(make_logger, run)

    def on_log(self, run: RunContext, metrics: dict[str, Any]) -> None:
        if self.logger is not None:
            self.logger.log(metrics, run.state.iteration)

    async def on_state_saved(self, run: RunContext, stage: str) -> None:
        if self.logger is None:
            return
        # Each stage's saved dialogues as artifacts (the state has moved past switch_models).
        iteration = run.state.iteration - (stage == "switch_models")
        # A run that saves transcripts logs the original's processed ones and prompts too.
        agents = run.session.agents if run.run_dir.transcript_format is not None else None
        await asyncio.to_thread(
            self.logger.on_stage_end, run.run_dir.path, stage, iteration, agents
        )
        if stage == "switch_models":
            await asyncio.to_thread(self.logger.save_run_artifact, run.run_dir.path)

    async def on_train_end(self, run: RunContext) -> None:
        if self.logger is not None:
            logger, self.logger = self.logger, None
            logger.summarise(read_spend(run.run_dir.path).to_metrics())  # nip.runs.spend
            await asyncio.to_thread(logger.finish)


class ControlFileCallback(TrainerCallback):
    """Pauses or stops between stages as ``control.json`` asks, and reports the run's status
    and stages in ``run_status.json``."""

    def _report(self, run: RunContext, status: Any, error: str | None = None) -> None:
        total = getattr(run.plan, "total_stages", None)  # a RunPlan's
        report_status(run.run_dir.path, status, run.state.stages_completed, total, error=error)

    async def on_train_begin(self, run: RunContext) -> None:
        if run.state.stage != "done":  # a resumed failed or stopped run runs again
            self._report(run, "running")

    async def should_continue(self, run: RunContext) -> bool:
        return await between_stages(
            run.run_dir.path,
            run.state.stages_completed,
            poll_interval_s=run.poll_interval_s,
            stages_total=getattr(run.plan, "total_stages", None),
        )

    async def on_stage_end(
        self, run: RunContext, stage: str, error: BaseException | None = None
    ) -> None:
        if error is None:
            return
        interrupted = isinstance(error, asyncio.CancelledError | KeyboardInterrupt)
        message = None if interrupted else f"{stage}: {type(error).__name__}: {error}"
        self._report(run, "stopped" if interrupted else "failed", message)

    async def on_train_end(self, run: RunContext) -> None:
        self._report(run, "finished")


class StageProgressCallback(TrainerCallback):
    """Writes ``stage_progress.json`` (how many of its dialogues the stage has finished)."""

    def __init__(self) -> None:
        self._writers: dict[tuple[str, int, int], StageProgressWriter] = {}

    def on_progress(
        self, run: RunContext, stage: str, done: int, total: int, offset: int = 0
    ) -> None:
        key = (stage, run.state.iteration, offset)
        if key not in self._writers:
            self._writers.clear()
            passes = run.step.test_passes if stage == "test" else 1
            self._writers[key] = StageProgressWriter(
                run.run_dir.path,
                stage,
                run.state.iteration,
                total=total * passes if stage == "test" else None,
                offset=offset,
            )
        self._writers[key](done, total)


class EstimateCallback(TrainerCallback):
    """Saves the dry run's estimate of the run's plan (``cost_estimate.json``) when it first
    starts, which its spend is shown beside (a plan it cannot price is warned about, and the
    run goes on without one)."""

    async def on_train_begin(self, run: RunContext) -> None:
        if (run.run_dir.path / ESTIMATE_FILE).exists() or run.state.stage == "done":
            return
        prices = run.settings.prices_usd_per_1m
        settings = ExperimentSettings(show_progress=False, prices_usd_per_1m=prices)
        protocol = type(run.session.handler)  # the run's, shipped or one's own
        try:
            await asyncio.to_thread(
                save_estimate, run.run_dir.path, run.hyper_params, settings, protocol
            )
        except Exception as error:  # the estimate is a comparison, never a reason to stop
            warn(f"the run's cost could not be estimated ({error}); it goes on without one")


def make_logger(run: RunContext) -> Any:
    """The run's W&B logger (a ``NullLogger`` when W&B is disabled or not installed)."""
    from nip.training.logging import make_logger as logger_for

    return logger_for(run.run_dir.path, run.hyper_params.to_dict(), run.settings)
