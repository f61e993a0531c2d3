"""The resumable training loop: a small loop over the run plan.

The trainer runs each planned stage's coroutine (:data:`nip.training.stages.STAGES`) in turn and
saves its state after each::

    sample_rollouts -> log_stats -> test -> create_fine_tune_jobs -> await_fine_tune_jobs
    -> switch_models -> (next iteration)

Algorithms (:mod:`nip.training.algorithms`) say what an iteration learns from; callbacks watch
the run; all see a :class:`~nip.training.context.RunContext`, not the trainer. Every stage can be
repeated safely, so a run killed at any point resumes (:meth:`~PureTextEiTrainer.resume`)
without lost or duplicated rollouts or jobs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nip._version import __version__
from nip.data import dataset_provenance
from nip.errors import BackendUnavailableError
from nip.jobs import FineTuneBackend
from nip.parameters import HyperParameters
from nip.parameters.groups import group_members
from nip.protocols import ProtocolHandler
from nip.providers.pool import BackendPool
from nip.runs.ownership import owning
from nip.runs.run_dir import RunDirectory, new_run_path, refuse_existing_run
from nip.runs.run_dir import RunDirectoryError as RunDirectoryError  # re-exported
from nip.runs.state import Stage as Stage  # re-exported: the stages' names
from nip.runs.state import TrainerState
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.training.algorithms import TrainingAlgorithm
from nip.training.algorithms.malt import load_trees
from nip.training.callbacks import (
    Callbacks,
    ControlFileCallback,
    EstimateCallback,
    StageProgressCallback,
    TrainerCallback,
    WandbCallback,
    make_logger,
)
from nip.training.checkpoint_start import apply_starting_models
from nip.training.context import RunContext
from nip.training.groups import PureTextSharedModelGroup
from nip.training.logging import check_wandb
from nip.training.plan import RunPlan, check_saved_plan, plan_for_session
from nip.training.reporter import RunReporter
from nip.training.stages import STAGES, algorithm_of
from nip.utils.sync import run_sync


class PureTextEiTrainer:
    """Runs the plan of ``hyper_params``: Expert Iteration (``pure_text_ei``), or MALT after its
    first Expert Iteration iterations (``pure_text_malt``); :class:`PureTextMaltTrainer` is the
    same class under the original's name.

    Args:
        settings: Runtime settings; ``settings.run_dir`` is where the run is saved.
        fine_tune_backends: Backends for given groups (by group name); by default chosen from
            each group's provider.
        overwrite: Start afresh even if ``run_dir`` holds a run.
        protocol: The class of your own protocol that ``interaction_protocol`` names.
        backends: A backend pool shared with other trainers (a sweep's cells share one).
        callbacks: More :class:`~nip.training.callbacks.TrainerCallback` s, after the defaults.
    """

    def __init__(
        self,
        hyper_params: HyperParameters,
        settings: ExperimentSettings | None = None,
        *,
        fine_tune_backends: Mapping[str, FineTuneBackend] | None = None,
        overwrite: bool = False,
        protocol: type[ProtocolHandler] | None = None,
        backends: BackendPool | None = None,
        callbacks: Sequence[TrainerCallback] | None = None,
        _resuming: bool = False,
    ):
        settings = settings or ExperimentSettings()
        check_wandb(settings.wandb_mode)  # W&B asked for but not installed: before any write
        self.hyper_params, self.settings = hyper_params, settings
        # What the configuration or its data can get wrong (protocol, agents, prompts, the
        # dataset's rows) fails here, before the run's folder is made or written.
        self.session = Session(hyper_params, settings, protocol=protocol, backends=backends)
        plan = plan_for_session(hyper_params, self.session)  # loads the data
        # Source, Hub revision and fingerprint of each split the plan plays.
        provenance = None
        if not _resuming:
            provenance = {s: dataset_provenance(self.session.dataset(s)) for s in plan.splits}
        if settings.run_dir is None:
            settings.run_dir = new_run_path()
        with owning(settings.run_dir, "a run starting"):  # one writer of the folder at a time
            self._open(plan, provenance, fine_tune_backends, overwrite, callbacks)

    def _open(self, plan: RunPlan, provenance, fine_tune_backends, overwrite, callbacks) -> None:
        """Open the run's folder (``provenance`` None: a resumed run's, already written)."""
        hyper_params, settings = self.hyper_params, self.settings
        text_rl = hyper_params.text_rl
        self.run_dir = RunDirectory(
            settings.run_dir,
            transcript_format=text_rl.transcript_format if text_rl.save_transcripts else None,
        )
        _resuming = provenance is None
        if not _resuming:
            if not overwrite:
                refuse_existing_run(
                    self.run_dir.path,
                    "resume it with Trainer.resume(run_dir) (nip resume), or pass overwrite=True",
                )
            self.run_dir.write_json("hyper_params.json", hyper_params.to_dict())
            meta = {"nip_version": __version__, "created": time.time()}
            self.run_dir.write_json("meta.json", meta)
            self.run_dir.write_json("dataset.json", provenance)  # two runs' data compare by it
            self.run_dir.write_json("plan.json", plan.to_dict())
        self.groups: dict[str, PureTextSharedModelGroup] = {
            name: PureTextSharedModelGroup(
                hyper_params,
                settings,
                self.session.handler,
                {a: self.session.agents[a] for a in members},
                name,
                fine_tune_backend=(fine_tune_backends or {}).get(name),
            )
            for name, members in group_members(hyper_params).items()
        }
        #: What algorithms and callbacks see of the run: its parameters, plan, state, folder.
        self.context = RunContext(
            hyper_params, settings, self.session, self.run_dir, plan, groups=self.groups
        )
        #: Its monitors: the reporter, W&B, the control file, the progress file, the saved
        #: estimate, then yours.
        self.callbacks = Callbacks(
            [
                RunReporter(enabled=settings.show_progress),
                WandbCallback(),
                ControlFileCallback(),
                StageProgressCallback(),
                EstimateCallback(),
                *(callbacks or ()),
            ]
        )
        self._servers_ready = False
        if not _resuming:  # a resumed run has its starting models in its saved state
            from nip.training.logging import resolve_mode

            online = resolve_mode(settings.wandb_mode) == "online"
            apply_starting_models(self.groups, self.run_dir.path, wandb_online=online)

    @property
    def plan(self) -> RunPlan:
        """What the run does, iteration by iteration (:mod:`nip.training.plan`)."""
        return self.context.plan  # type: ignore[return-value]

    @property
    def state(self) -> TrainerState:
        """Where the run stands (saved as ``state.json`` after every stage)."""
        return self.context.state

    @property
    def poll_interval_s(self) -> float:
        """How often jobs and the control file are polled."""
        return self.context.poll_interval_s

    @poll_interval_s.setter
    def poll_interval_s(self, seconds: float) -> None:
        self.context.poll_interval_s = seconds

    # ------------------------------------------------------------------ resume
    @classmethod
    def resume(
        cls,
        run_dir: str | Path,
        settings: ExperimentSettings | None = None,
        *,
        force: bool = False,
        fine_tune_backends: Mapping[str, FineTuneBackend] | None = None,
        protocol: type[ProtocolHandler] | None = None,
        backends: BackendPool | None = None,
        accept_plan_change: bool = False,
    ) -> PureTextEiTrainer:
        """Continue the run saved in ``run_dir`` from the stage it had reached (your own protocol
        needs its class again: ``protocol``).

        Raises:
            NotARunDirectoryError: ``run_dir`` is missing, a file, or holds no run.
            DirectoryInUseError: Another process is writing the run directory.
            IncompatibleParametersError: Saved by an incompatible nip (``force=True`` tries anyway).
            PlanChangedError: The plan made now differs from ``plan.json`` (``accept_plan_change``).
        """
        directory = RunDirectory.of_run(run_dir)
        hyper_params = directory.load_hyper_params(force=force)
        settings = settings or ExperimentSettings()
        settings.run_dir = directory.path
        with owning(directory.path, "a run resuming"):
            trainer = cls(
                hyper_params,
                settings,
                fine_tune_backends=fine_tune_backends,
                protocol=protocol,
                backends=backends,
                _resuming=True,
            )
            if directory.exists("state.json"):
                trainer.context.state = TrainerState(**directory.read_json("state.json"))
                for name, group_state in trainer.state.groups.items():
                    trainer.groups[name].set_state(group_state)
            trainer.context.plan = check_saved_plan(
                trainer.run_dir, trainer.plan, trainer.state, accept=accept_plan_change
            )
        return trainer

    # --------------------------------------------------------------------- loop
    @property
    def finished(self) -> bool:
        return self.state.stage == "done"

    @property
    def algorithm(self) -> TrainingAlgorithm:
        """The algorithm the plan runs in the current iteration."""
        return algorithm_of(self.context)

    async def _call(self, hook: str, *args: Any, **kwargs: Any) -> None:
        await self.callbacks.call(hook, self.context, *args, **kwargs)

    async def train_async(self, max_stages: int | None = None) -> TrainerState:
        """Run stages until the run is finished, ``max_stages`` stages ran, or a callback stopped it
        (``nip control RUN_DIR stop``; a pause waits between stages). :class:`DirectoryInUseError`
        when another process (or task) is writing the run directory."""
        with owning(self.run_dir.path, "training"):
            return await self._train(max_stages)

    async def _train(self, max_stages: int | None) -> TrainerState:
        stages_run = 0
        await self._call("on_train_begin")
        if not self.finished and not self._servers_ready:
            await self._wait_for_servers()
        while not self.finished and (max_stages is None or stages_run < max_stages):
            if stages_run and not all(
                [await c.should_continue(self.context) for c in self.callbacks]
            ):
                break
            stage = self.state.stage
            await self._call("on_stage_begin", stage)
            try:
                await STAGES[stage](self.context, self.callbacks)  # nip.training.stages
            except BaseException as error:
                await self._call("on_stage_end", stage, error)
                raise
            await self._call("on_stage_end", stage)
            self.state.iteration, self.state.stage = self.plan.after(self.state.iteration, stage)  # type: ignore[assignment]
            self.state.stages_completed += 1
            self.context.save_state()
            await self._call("on_state_saved", stage)
            stages_run += 1
        if self.finished:
            await self._call("on_train_end")
            for group in self.groups.values():
                await group.end_run()
        return self.state

    def train(self, max_stages: int | None = None) -> TrainerState:
        """Sync :meth:`train_async` (works in scripts and inside Jupyter)."""
        return run_sync(self.train_async(max_stages))

    async def _wait_for_servers(self) -> None:
        """Wait until every group's backends can generate (a ``nip serve`` whose vLLM is
        still loading, say), instead of failing the first requests."""
        await self._call("on_engines_wait", done=False)
        timeout_s, training = self.settings.server_ready_timeout_s, self.plan.trained_groups
        try:  # the training groups' fine-tuning backends are built meanwhile
            for name, group in self.groups.items():
                await group.wait_for_ready(timeout_s, will_train=name in training)
        except TimeoutError:
            raise BackendUnavailableError(
                f"the server of group {name!r} was not ready after {timeout_s:g} s "
                "(ExperimentSettings.server_ready_timeout_s)"
            ) from None
        finally:
            await self._call("on_engines_wait", done=True)
        self._servers_ready = True

    def _make_logger(self):  # a seam of the tests
        return make_logger(self.context)

    @property
    def _logger(self) -> Any:
        """The W&B logger of the run under way (None outside ``train``)."""
        wandb = next((c for c in self.callbacks if isinstance(c, WandbCallback)), None)
        return wandb.logger if wandb is not None else None

    # ----------------------------------------------------------------- results
    async def analyse_async(
        self, judge, *, analysers=None, split: str = "train"
    ) -> dict[str, float | None]:
        """Judge every saved dialogue of ``split`` with the ``judge`` model's parameters, store the
        judgements under ``analysis/`` and return the last iteration's share of "yes" per analyser
        and agent; each iteration's summary also goes to the run's W&B logger as ``analysis_*``."""
        from nip.training.analysis import analyse_run_async

        logger = self._logger or self._make_logger()
        try:
            return await analyse_run_async(
                self.context, judge, logger, analysers=analysers, split=split
            )
        finally:
            if logger is not self._logger:
                logger.finish()

    def analyse(self, judge, **kwargs) -> dict[str, float | None]:
        """Sync :meth:`analyse_async`."""
        return run_sync(self.analyse_async(judge, **kwargs))

    def analysis_dataframe(self, split: str = "train"):
        """Every stored judgement of ``split``, one row each."""
        from nip.training.analysis import analysis_dataframe

        return analysis_dataframe(self.context, split)

    def metrics_dataframe(self):
        """The run's metrics so far, one row per (split, iteration)."""
        return self.run_dir.metrics_dataframe()

    def load_trees(self, iteration: int | None = None):
        """The MALT trees of ``iteration`` (default: the current one)."""
        return load_trees(self.run_dir, self.state.iteration if iteration is None else iteration)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(run_dir={str(self.run_dir.path)!r}, "
            f"iteration={self.state.iteration}, stage={self.state.stage!r}, "
            f"groups={list(self.groups)})"
        )


#: The original's name for MALT's trainer: one trainer runs every algorithm, as its plan says.
PureTextMaltTrainer = PureTextEiTrainer


def build_trainer(
    hyper_params: HyperParameters, settings: ExperimentSettings | None = None, **kwargs: Any
) -> PureTextEiTrainer:
    """The trainer of ``hyper_params`` (its algorithm is ``hyper_params.trainer``'s)."""
    return PureTextEiTrainer(hyper_params, settings, **kwargs)
