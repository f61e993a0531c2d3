"""What watches a run: callbacks the trainer calls at its events (TRL's ``TrainerCallback``).

The trainer's loop knows nothing of terminals, W&B or control files; it calls each callback's
hooks in turn. The default ones (:func:`default_callbacks`):

- :class:`ReporterCallback`: the stage lines, bars and iteration summaries
  (:mod:`nip.training.progress`);
- :class:`WandbCallback`: metrics and the run artifact to W&B (:mod:`nip.training.logging`);
- :class:`ControlFileCallback`: a pause or stop asked for in ``control.json``
  (``nip control RUN_DIR pause|resume|stop``, :mod:`nip.training.run_control`);
- :class:`StageProgressCallback`: ``stage_progress.json``, the dashboard's dialogue count.

Pass more with ``build_trainer(..., callbacks=[MyCallback()])``; subclass
:class:`TrainerCallback` and override the hooks you need.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from nip.training.progress import RunReporter
from nip.training.run_control import StageProgressWriter, between_stages

if TYPE_CHECKING:
    from nip.training.trainer import PureTextEiTrainer


class TrainerCallback:
    """Hooks the trainer calls; each does nothing unless overridden."""

    async def on_train_begin(self, trainer: PureTextEiTrainer) -> None:
        """Before the first stage of a ``train`` call."""

    async def on_engines_wait(self, trainer: PureTextEiTrainer, *, done: bool) -> None:
        """Around the wait for the agents' engines (``done`` False before, True after)."""

    async def on_stage_begin(self, trainer: PureTextEiTrainer, stage: str) -> None:
        """Before a stage runs."""

    async def on_stage_end(
        self, trainer: PureTextEiTrainer, stage: str, error: BaseException | None = None
    ) -> None:
        """After a stage ran (``error``: what it raised), before the state moves on."""

    async def on_state_saved(self, trainer: PureTextEiTrainer, stage: str) -> None:
        """After the state was saved at the end of ``stage``."""

    async def should_continue(self, trainer: PureTextEiTrainer) -> bool:
        """At a stage boundary: False stops the run there (it can be resumed)."""
        return True

    def on_progress(
        self, trainer: PureTextEiTrainer, stage: str, done: int, total: int, offset: int = 0
    ) -> None:
        """Dialogues of the running stage finished (``offset`` places a batch in a stage of
        several, such as a test stage's passes)."""

    def on_log(self, trainer: PureTextEiTrainer, metrics: dict[str, Any]) -> None:
        """Metrics of the current iteration."""

    async def on_job_submitted(self, trainer: PureTextEiTrainer, group: str, job_id: str) -> None:
        """A group's fine-tuning job was submitted (and recorded in the state)."""

    async def on_train_end(self, trainer: PureTextEiTrainer) -> None:
        """The run finished (not called when ``train`` returns early)."""


class ReporterCallback(TrainerCallback):
    """The run's stage lines, bars and per-iteration summaries (:class:`RunReporter`)."""

    def __init__(self, reporter: RunReporter):
        self.reporter = reporter
        self._stack: contextlib.AsyncExitStack | None = None
        self._engines: contextlib.AsyncExitStack | None = None

    async def on_engines_wait(self, trainer: PureTextEiTrainer, *, done: bool) -> None:
        if not done:
            self._engines = contextlib.AsyncExitStack()
            await self._engines.enter_async_context(self.reporter.waiting_for_engines())
        elif self._engines is not None:
            await self._engines.aclose()
            self._engines = None

    async def on_stage_begin(self, trainer: PureTextEiTrainer, stage: str) -> None:
        self._stack = contextlib.AsyncExitStack()
        await self._stack.enter_async_context(self.reporter.stage(trainer, stage))

    async def on_stage_end(
        self, trainer: PureTextEiTrainer, stage: str, error: BaseException | None = None
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            if error is None:
                await stack.aclose()
            else:
                await stack.__aexit__(type(error), error, error.__traceback__)


class WandbCallback(TrainerCallback):
    """Metrics to W&B (online, offline or disabled: ``ExperimentSettings.wandb_mode``), and
    the run directory as an artifact after every iteration."""

    def __init__(self) -> None:
        self.logger: Any = None

    async def on_train_begin(self, trainer: PureTextEiTrainer) -> None:
        if self.logger is None and not trainer.finished:
            self.logger = trainer._make_logger()

    def on_log(self, trainer: PureTextEiTrainer, metrics: dict[str, Any]) -> None:
        if self.logger is not None:
            self.logger.log(metrics, trainer.state.iteration)

    async def on_state_saved(self, trainer: PureTextEiTrainer, stage: str) -> None:
        if self.logger is None:
            return
        # Each stage's saved dialogues as artifacts (the state has moved past switch_models).
        iteration = trainer.state.iteration - (stage == "switch_models")
        self.logger.on_stage_end(trainer.run_dir.path, stage, iteration)
        if stage == "switch_models":
            self.logger.save_run_artifact(trainer.run_dir.path)

    async def on_train_end(self, trainer: PureTextEiTrainer) -> None:
        if self.logger is not None:
            self.logger.finish()
            self.logger = None


class ControlFileCallback(TrainerCallback):
    """Pauses between stages while ``control.json`` asks, and stops the run when it asks."""

    async def should_continue(self, trainer: PureTextEiTrainer) -> bool:
        return await between_stages(
            trainer.run_dir.path,
            trainer.state.stages_completed,
            poll_interval_s=trainer.poll_interval_s,
        )


class StageProgressCallback(TrainerCallback):
    """Writes ``stage_progress.json`` (how many of its dialogues the stage has finished)."""

    def __init__(self) -> None:
        self._writers: dict[tuple[str, int, int], StageProgressWriter] = {}

    def on_progress(
        self, trainer: PureTextEiTrainer, stage: str, done: int, total: int, offset: int = 0
    ) -> None:
        key = (stage, trainer.state.iteration, offset)
        if key not in self._writers:
            self._writers.clear()
            passes = trainer.plan[trainer.state.iteration].test_passes if stage == "test" else 1
            self._writers[key] = StageProgressWriter(
                trainer.run_dir.path,
                stage,
                trainer.state.iteration,
                total=total * passes if stage == "test" else None,
                offset=offset,
            )
        self._writers[key](done, total)


def make_logger(trainer: PureTextEiTrainer) -> Any:
    """The run's W&B logger (a ``NullLogger`` when W&B is disabled or not installed)."""
    from nip.training.logging import make_logger as logger_for

    return logger_for(trainer.run_dir.path, trainer.hyper_params.to_dict(), trainer.settings)


def default_callbacks(show_progress: bool) -> list[TrainerCallback]:
    """The callbacks every run has: the reporter, W&B, the control file and the progress
    file."""
    return [
        ReporterCallback(RunReporter(enabled=show_progress)),
        WandbCallback(),
        ControlFileCallback(),
        StageProgressCallback(),
    ]
