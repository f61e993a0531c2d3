"""The resumable training loop, and the trainer each ``trainer`` name stands for (``TRAINERS``).

What each algorithm learns from lives in its own module: Expert Iteration's selection and SFT
dataset in :mod:`nip.training.expert_iteration`, MALT's trees and DPO dataset in
:mod:`nip.training.malt`. A trainer here says only which stages they change.

Each iteration goes through explicit stages, and the state is saved after every one::

    sample_rollouts -> log_stats -> test -> create_fine_tune_jobs -> await_fine_tune_jobs
    -> switch_models -> (next iteration)

The last iteration stops after ``test``. Every stage can be repeated safely, so a run killed
at any point (even ``kill -9``) resumes from its directory with :meth:`Trainer.resume`,
without lost or duplicated rollouts: a stage's output is written atomically before the state
moves on, and sampling is deterministic given the seed (and free, with the response cache).
A fine-tuning job is recorded in the state the moment it is submitted, so a run killed
mid-stage never pays for a group's job twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from nip._version import __version__
from nip.backends.providers import provider_for
from nip.errors import BackendUnavailableError, IncompatibleParametersError
from nip.jobs import FineTuneBackend
from nip.parameters import HyperParameters, check_compatibility
from nip.parameters.groups import group_members
from nip.protocols import ProtocolHandler
from nip.rollouts.records import Transcript
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.training.checkpoint_start import apply_starting_models
from nip.training.expert_iteration import select_group_rollouts, sft_dataset
from nip.training.failure_policy import FailurePolicy, settle_fine_tune_job
from nip.training.groups import PureTextSharedModelGroup
from nip.training.malt import build_trees_async, dpo_dataset
from nip.training.malt_tree import ResponseTree
from nip.training.metrics import malt_metrics, rollout_metrics
from nip.training.plan import PlanChangedError, RunPlan, job_name, plan_for_session
from nip.training.progress import RunReporter
from nip.training.run_control import StageProgressWriter, between_stages
from nip.training.run_dir import RunDirectory
from nip.utils.sync import run_sync

Stage = Literal[
    "sample_rollouts",
    "log_stats",
    "test",
    "create_fine_tune_jobs",
    "await_fine_tune_jobs",
    "switch_models",
    "done",
]
_NEXT: dict[str, str] = {
    "sample_rollouts": "log_stats",
    "log_stats": "test",
    "test": "create_fine_tune_jobs",
    "create_fine_tune_jobs": "await_fine_tune_jobs",
    "await_fine_tune_jobs": "switch_models",
    "switch_models": "sample_rollouts",
}


class RunDirectoryError(IncompatibleParametersError):
    """The run directory cannot be used as asked (exists already, or holds another run)."""


@dataclass
class TrainerState:
    """Where a run stands: its iteration, the next stage, and each group's state."""

    iteration: int = 0
    stage: Stage = "sample_rollouts"
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    stages_completed: int = 0
    #: The iteration each group's latest fine-tuning job was submitted in, by group name.
    job_iterations: dict[str, int] = field(default_factory=dict)


class PureTextEiTrainer:
    """Expert Iteration: sample dialogues, keep those each agent won, fine-tune, repeat.

    Args:
        hyper_params: The experiment (``trainer`` is ``pure_text_ei`` or ``pure_text_malt``).
        settings: Runtime settings; ``settings.run_dir`` is where the run is saved.
        fine_tune_backends: Backends to use for given groups (by group name), e.g. a local
            server's; by default chosen from each group's provider.
        overwrite: Start afresh even if ``run_dir`` holds a run.
        protocol: The class of a protocol defined in your own code, which
            ``hyper_params.interaction_protocol`` names (shipped ones are found by name).
    """

    def __init__(
        self,
        hyper_params: HyperParameters,
        settings: ExperimentSettings | None = None,
        *,
        fine_tune_backends: Mapping[str, FineTuneBackend] | None = None,
        overwrite: bool = False,
        protocol: type[ProtocolHandler] | None = None,
        _resuming: bool = False,
    ):
        settings = settings or ExperimentSettings()
        if settings.run_dir is None:
            settings.run_dir = Path("runs") / time.strftime("%Y%m%d-%H%M%S")
        self.hyper_params = hyper_params
        self.settings = settings
        text_rl = hyper_params.text_rl
        self.run_dir = RunDirectory(
            settings.run_dir,
            transcript_format=text_rl.transcript_format if text_rl.save_transcripts else None,
        )
        if not _resuming:
            if self.run_dir.exists("state.json") and not overwrite:
                raise RunDirectoryError(
                    f"{self.run_dir.path} already holds a run; resume it with "
                    "Trainer.resume(run_dir) (nip resume), or pass overwrite=True"
                )
            self.run_dir.write_json("hyper_params.json", hyper_params.to_dict())
            self.run_dir.write_json(
                "meta.json", {"nip_version": __version__, "created": time.time()}
            )
        self.session = Session(hyper_params, settings, protocol=protocol)
        if not _resuming:  # load the data now: a missing dataset fails before any sampling
            self.run_dir.save_dataset_provenance(self._dataset_provenance())
        #: What the run does, iteration by iteration (:mod:`nip.training.plan`).
        self.plan: RunPlan = self.make_plan()
        if not _resuming:
            self.run_dir.write_json("plan.json", self.plan.to_dict())
        backends = dict(fine_tune_backends or {})
        self.groups: dict[str, PureTextSharedModelGroup] = {
            name: PureTextSharedModelGroup(
                hyper_params,
                settings,
                self.session.handler,
                {a: self.session.agents[a] for a in members},
                name,
                fine_tune_backend=backends.get(name),
            )
            for name, members in group_members(hyper_params).items()
        }
        self.state = TrainerState()
        self.poll_interval_s = 2.0
        self._reporter = RunReporter(enabled=settings.show_progress)
        self._logger = None
        self._servers_ready = False
        if not _resuming:  # a resumed run has its starting models in its saved state
            from nip.training.logging import resolve_mode

            online = resolve_mode(settings.wandb_mode) == "online"
            apply_starting_models(self.groups, self.run_dir.path, wandb_online=online)

    def make_plan(self) -> RunPlan:
        """The plan of this run, from its parameters and its dataset's splits."""
        return plan_for_session(self.hyper_params, self.session)

    def _dataset_provenance(self) -> dict[str, dict]:
        """Source, Hub revision and fingerprint of each split the run will use."""
        from nip.data import dataset_provenance

        splits = ["train"]
        if self.hyper_params.text_rl.test_scheme != "none":
            splits.append(self.hyper_params.text_rl.test_dataset_split)
        return {split: dataset_provenance(self.session.dataset(split)) for split in splits}

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
        accept_plan_change: bool = False,
    ) -> PureTextEiTrainer:
        """Continue the run saved in ``run_dir`` from the stage it had reached.

        A run of a protocol defined in your own code needs its class again (``protocol``);
        the saved parameters hold only its name.

        Raises:
            IncompatibleParametersError: The run was saved by an incompatible nip (pass
                ``force=True`` to try anyway).
            PlanChangedError: The plan this nip makes from the saved parameters and data
                differs from the run's ``plan.json`` (pass ``accept_plan_change=True`` to go
                on with the new plan).
        """
        directory = RunDirectory(run_dir)
        saved = directory.read_json("hyper_params.json")
        if "_schema_version" not in saved and not force:
            check_compatibility(saved)  # raises: the file was not written by nip
        # from_dict checks the schema version stamp (an error, or a warning for a minor one).
        hyper_params = HyperParameters.from_dict(saved, ignore_extra_keys=force, force=force)
        settings = settings or ExperimentSettings()
        settings.run_dir = directory.path
        trainer_cls = TRAINERS[hyper_params.trainer]
        trainer = trainer_cls(
            hyper_params,
            settings,
            fine_tune_backends=fine_tune_backends,
            protocol=protocol,
            _resuming=True,
        )
        trainer._check_plan(accept_plan_change)
        if directory.exists("state.json"):
            state = directory.read_json("state.json")
            trainer.state = TrainerState(**state)
            for name, group_state in trainer.state.groups.items():
                trainer.groups[name].set_state(group_state)
        return trainer

    def _check_plan(self, accept: bool) -> None:
        if self.run_dir.exists("plan.json"):
            saved = RunPlan.from_dict(self.run_dir.read_json("plan.json"))
            changes = saved.differences(self.plan)
            if changes and not accept:
                shown = "\n  ".join(changes[:20])
                more = f"\n  ... and {len(changes) - 20} more" if len(changes) > 20 else ""
                raise PlanChangedError(
                    f"{self.run_dir.path} would now run a different plan (saved -> now):\n  "
                    f"{shown}{more}\nA changed configuration, dataset or nip changed the "
                    "schedule; resume with accept_plan_change=True (nip resume "
                    "--accept-plan-change) to go on with the new plan."
                )
        self.run_dir.write_json("plan.json", self.plan.to_dict())

    def _save_state(self) -> None:
        self.state.groups = {n: g.get_state_dict() for n, g in self.groups.items()}
        self.run_dir.write_json("state.json", asdict(self.state))

    # --------------------------------------------------------------------- loop
    @property
    def finished(self) -> bool:
        return self.state.stage == "done"

    async def train_async(self, max_stages: int | None = None) -> TrainerState:
        """Run stages until the run is finished, ``max_stages`` stages were run, or a stop
        was asked for (``nip control RUN_DIR stop``; a pause waits between stages)."""
        stages_run = 0
        if self._logger is None and not self.finished:
            self._logger = self._make_logger()
        if not self.finished and not self._servers_ready:
            await self._wait_for_servers()
        while not self.finished and (max_stages is None or stages_run < max_stages):
            # A pause or stop asked for in control.json (nip.training.run_control) acts here.
            if stages_run and not await between_stages(
                self.run_dir.path, self.state.stages_completed, poll_interval_s=self.poll_interval_s
            ):
                break
            stage = self.state.stage
            async with self._reporter.stage(self, stage):
                await getattr(self, f"_stage_{stage}")()
            self.state.stage = self._next_stage(stage)  # type: ignore[assignment]
            if stage == "switch_models":
                self.state.iteration += 1
            self.state.stages_completed += 1
            self._save_state()
            if stage == "switch_models" and self._logger is not None:
                self._logger.save_run_artifact(self.run_dir.path)
            stages_run += 1
        if self.finished and self._logger is not None:
            self._logger.finish()
            self._logger = None
        return self.state

    async def _wait_for_servers(self) -> None:
        """Wait until every group's backends can generate (a ``nip serve`` whose vLLM is
        still loading, say), instead of failing the first requests."""
        timeout = self.settings.server_ready_timeout_s
        async with self._reporter.waiting_for_engines():
            for name, group in self.groups.items():
                try:
                    await group.wait_for_ready(timeout)
                except TimeoutError:
                    raise BackendUnavailableError(
                        f"the server of group {name!r} was not ready after {timeout:g} s "
                        "(ExperimentSettings.server_ready_timeout_s)"
                    ) from None
        self._servers_ready = True

    def _make_logger(self):
        from nip.training.logging import NullLogger, WandbLogger, resolve_mode

        if resolve_mode(self.settings.wandb_mode) == "disabled":
            return NullLogger()
        return WandbLogger(
            self.run_dir.path,
            self.hyper_params.to_dict(),
            mode=self.settings.wandb_mode,
            project=self.settings.wandb_project,
            run_name=self.run_dir.path.name,
        )

    def _log(self, metrics: dict[str, Any], prefix: str = "") -> None:
        if self._logger is not None:
            self._logger.log({f"{prefix}{k}": v for k, v in metrics.items()}, self._iteration)

    def train(self, max_stages: int | None = None) -> TrainerState:
        """Sync :meth:`train_async` (works in scripts and inside Jupyter)."""
        return run_sync(self.train_async(max_stages))

    def _next_stage(self, stage: str) -> str:
        last = self.state.iteration >= self.hyper_params.rl.num_iterations - 1
        if stage == "test" and last:
            return "done"
        return _NEXT[stage]

    # ------------------------------------------------------------------ stages
    @property
    def _iteration(self) -> int:
        return self.state.iteration

    async def _stage_sample_rollouts(self) -> None:
        if self.run_dir.has_rollouts("train", self._iteration):
            return  # sampled before a restart
        batch = await self.session.rollouts_async(
            n=self.hyper_params.rl.rollouts_per_iteration,
            split="train",
            iteration=self._iteration,
            description=f"iteration {self._iteration}",
            on_progress=StageProgressWriter(self.run_dir.path, "sample_rollouts", self._iteration),
        )
        self.run_dir.save_rollouts("train", self._iteration, batch.transcripts)

    async def _stage_log_stats(self) -> None:
        transcripts = self.run_dir.load_rollouts("train", self._iteration)
        metrics = self._rollout_metrics(transcripts) | self._extra_metrics()
        self.run_dir.save_metrics("train", self._iteration, metrics)
        self._log(metrics)

    def _rollout_metrics(self, transcripts: list[Transcript]) -> dict[str, Any]:
        # Models on this machine or one's own server, and the dummy API, cost nothing per
        # token; API models are priced by name (settings.prices_usd_per_1m over the table).
        free = {
            name
            for name, agent in self.session.agents.items()
            if not provider_for(agent.agent_params).bills_tokens
        }
        prices = self.settings.prices_usd_per_1m
        return rollout_metrics(transcripts, prices=prices, free_agents=free)

    def _extra_metrics(self) -> dict[str, Any]:
        return {}

    async def _stage_test(self) -> None:
        if not self.plan[self._iteration].tests or self.run_dir.has_rollouts(
            "test", self._iteration
        ):
            return
        text_rl, rl = self.hyper_params.text_rl, self.hyper_params.rl
        size = None if text_rl.test_on_whole_dataset else rl.rollouts_per_iteration
        items = self.session.datapoints(size, split=text_rl.test_dataset_split)
        transcripts: list[Transcript] = []
        for repeat in range(rl.num_test_iterations):
            progress = StageProgressWriter(
                self.run_dir.path,
                "test",
                self._iteration,
                total=len(items) * rl.num_test_iterations,
                offset=len(items) * repeat,
            )
            batch = await self.session.rollouts_async(
                items,
                iteration=10_000 + repeat,
                description=f"test {self._iteration}",
                on_progress=progress,
            )
            transcripts += batch.transcripts
        self.run_dir.save_rollouts("test", self._iteration, transcripts)
        metrics = self._rollout_metrics(transcripts)
        self.run_dir.save_metrics("test", self._iteration, metrics)
        self._log(metrics, prefix="test_")

    def _data_iterations(self) -> tuple[int, ...]:
        """The iterations this iteration's jobs learn from (the plan's)."""
        steps = [g for g in self.plan[self._iteration].groups if g.method]
        return steps[0].data_iterations if steps else (self._iteration,)

    def _training_transcripts(self) -> list[Transcript]:
        return [t for i in self._data_iterations() for t in self.run_dir.load_rollouts("train", i)]

    async def _stage_create_fine_tune_jobs(self) -> None:
        data = self._training_data()
        for step in self.plan[self._iteration].groups:
            name, group = step.group, self.groups[step.group]
            if self._job_submitted_this_iteration(name, group):
                continue
            if step.skip is not None:  # configured so: recorded, not warned about
                group.skip(step.skip)  # type: ignore[arg-type]
                continue
            examples = self._fine_tune_dataset(group, data)  # built once: saved, then sent
            self.run_dir.write_jsonl(self._fine_tune_name(name), examples)
            await group.submit_fine_tune_job(step.method, examples, self._job_name(name))
            self._record_submission(name, group)

    def _training_data(self) -> Any:
        """What this iteration's datasets are built from: the dialogues to select from."""
        return self._training_transcripts()

    def _fine_tune_dataset(self, group: PureTextSharedModelGroup, data: Any) -> list[dict]:
        """The lines of ``group``'s job: Expert Iteration's SFT dataset."""
        selected, replaced = select_group_rollouts(
            data, group.agent_wholes, self.hyper_params, self._iteration
        )
        return sft_dataset(group.agent_wholes, selected, replaced)

    def _job_name(self, group: str) -> str:
        return job_name(group, self._iteration)

    def _job_submitted_this_iteration(self, name: str, group: PureTextSharedModelGroup) -> bool:
        """Whether the group's job of this iteration was submitted before a restart."""
        return (
            group.state.last_job_outcome == "submitted"
            and self.state.job_iterations.get(name) == self._iteration
        )

    def _record_submission(self, name: str, group: PureTextSharedModelGroup) -> None:
        """Save the state as soon as a job is submitted: a run killed before the stage ends
        then finds the job on resume instead of paying for a second one."""
        if group.state.last_job_outcome == "submitted":
            self.state.job_iterations[name] = self._iteration
            self._save_state()

    def _submitted(self) -> list[PureTextSharedModelGroup]:
        return [g for g in self.groups.values() if g.state.last_job_outcome == "submitted"]

    async def _stage_await_fine_tune_jobs(self) -> None:
        """Wait for each submitted job; a failed one is handled by
        ``text_rl.on_fine_tune_failure`` (:mod:`nip.training.failure_policy`)."""
        policy = FailurePolicy.from_params(self.hyper_params.text_rl)
        names = [n for n, g in self.groups.items() if g.state.last_job_outcome == "submitted"]
        settled = await asyncio.gather(
            *(
                settle_fine_tune_job(
                    self.groups[name],
                    self._iteration,
                    policy,
                    resubmit=lambda name=name: self._resubmit(name),
                    save=self._save_state,
                    poll_interval_s=self.poll_interval_s,
                )
                for name in names
            ),
            return_exceptions=True,
        )
        for name, outcome in zip(names, settled, strict=True):
            if outcome == "kept_previous":
                failures = len(self.groups[name].failures_in(self._iteration))
                self._add_train_metrics(
                    {f"{name}.fine_tune_failed": 1, f"{name}.fine_tune_failures": failures}
                )
        errors = [e for e in settled if isinstance(e, BaseException)]
        if errors:
            raise errors[0]

    async def _resubmit(self, name: str) -> None:
        """Submit the group's dataset of this iteration again, exactly as it was saved."""
        examples = self.run_dir.read_jsonl(self._fine_tune_name(name))
        group = self.groups[name]
        await group.submit_fine_tune_job(self._fine_tune_method(), examples, self._job_name(name))

    def _fine_tune_name(self, group: str) -> str:
        return f"fine_tune/it{self._iteration:04d}_{group}.jsonl"

    def _fine_tune_method(self) -> str:
        return "dpo" if self._malt_now() else "supervised"

    def _malt_now(self) -> bool:
        return self.plan[self._iteration].algorithm == "malt"

    def _add_train_metrics(self, metrics: dict[str, Any]) -> None:
        """Add ``metrics`` to this iteration's training metrics (file and logger)."""
        name = f"metrics/train_it{self._iteration:04d}.json"
        saved = self.run_dir.read_json(name) if self.run_dir.exists(name) else {}
        self.run_dir.save_metrics("train", self._iteration, saved | metrics)
        self._log(metrics)

    async def _stage_switch_models(self) -> None:
        for group in self._submitted():
            job = await group.fine_tune_job()  # fetched once; the switch takes it as fetched
            # A run killed after switching, before saving, finds the model already in use.
            if job is not None and group.state.model_history[-1:] != [job.fine_tuned_model]:
                await group.switch_to_next_model(job)
            group.end_iteration()

    # ----------------------------------------------------------------- results
    async def analyse_async(
        self, judge, *, analysers=None, split: str = "train"
    ) -> dict[str, float | None]:
        """Judge every saved dialogue of ``split`` with the ``judge`` model's parameters
        (:class:`~nip.parameters.PureTextAgentParameters`), store the judgements under
        ``analysis/`` and return the share of "yes" per analyser and agent.

        Each iteration's summary also goes to the run's logger (W&B), prefixed ``analysis_``
        and plotted against ``analysis_iteration``."""
        from nip.training.analysis import ANALYSERS, analyse_async, summarise

        backend = self.session.backends.backend_for(judge)
        logger = self._logger or self._make_logger()
        summary: dict[str, float | None] = {}
        for iteration in range(self.state.iteration + 1):
            if not self.run_dir.has_rollouts(split, iteration):
                continue
            results = await analyse_async(
                self.run_dir.load_rollouts(split, iteration),
                self.session.handler,
                backend,
                model=judge.model_name,
                analysers=tuple(analysers or ANALYSERS),
                seed=self.hyper_params.seed,
            )
            self.run_dir.write_jsonl(
                f"analysis/{split}_it{iteration:04d}.jsonl", [r.to_dict() for r in results]
            )
            iteration_summary = summarise(results)
            self.run_dir.write_json(
                f"analysis/{split}_it{iteration:04d}_summary.json", iteration_summary
            )
            # No step: a finished run's W&B steps are past these iterations, and W&B drops
            # data logged at an earlier step.
            prefix = "analysis_" if split == "train" else f"analysis_{split}_"
            logged = {f"{prefix}{k}": v for k, v in iteration_summary.items()}
            logger.log({"analysis_iteration": iteration, **logged}, step=None)
            summary = iteration_summary
        if logger is not self._logger:
            logger.finish()
        return summary

    def analyse(self, judge, **kwargs) -> dict[str, float | None]:
        """Sync :meth:`analyse_async`."""
        return run_sync(self.analyse_async(judge, **kwargs))

    def analysis_dataframe(self, split: str = "train"):
        """Every stored judgement, one row each."""
        import pandas as pd

        rows = []
        for path in sorted((self.run_dir.path / "analysis").glob(f"{split}_it*[0-9].jsonl")):
            rows += self.run_dir.read_jsonl(path.relative_to(self.run_dir.path).as_posix())
        return pd.DataFrame(rows)

    def metrics_dataframe(self):
        """The run's metrics so far, one row per (split, iteration)."""
        return self.run_dir.metrics_dataframe()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(run_dir={str(self.run_dir.path)!r}, "
            f"iteration={self.state.iteration}, stage={self.state.stage!r}, "
            f"groups={list(self.groups)})"
        )


class PureTextMaltTrainer(PureTextEiTrainer):
    """MALT: grow response trees, pick sibling preference pairs, fine-tune with DPO.

    The first ``num_initial_ei_iterations`` iterations are Expert Iteration.
    """

    def _frozen_agents(self) -> frozenset[str]:
        return frozenset(self.plan[self._iteration].frozen_agents)

    def _trees_name(self) -> str:
        return f"malt/trees_it{self._iteration:04d}.jsonl"

    async def _stage_sample_rollouts(self) -> None:
        if not self._malt_now():
            await super()._stage_sample_rollouts()
            return
        if self.run_dir.has_rollouts("train", self._iteration):
            return
        hyper_params = self.hyper_params
        datapoints = self.session.datapoints(
            hyper_params.rl.rollouts_per_iteration, split="train", iteration=self._iteration
        )
        trees = await build_trees_async(
            self.session.handler,
            self.session.agents,
            datapoints,
            malt=hyper_params.pure_text_malt,
            seed=hyper_params.seed,
            iteration=self._iteration,
            frozen_agents=self._frozen_agents(),
        )
        self.run_dir.write_jsonl(self._trees_name(), [t.to_dict() for t in trees])
        leaves = [t.transcript_at(leaf.id) for t in trees for leaf in t.leaves()]
        self.run_dir.save_rollouts("train", self._iteration, leaves)

    def load_trees(self, iteration: int | None = None):
        """The MALT trees of ``iteration`` (default: the current one)."""
        if iteration is not None:
            name = f"malt/trees_it{iteration:04d}.jsonl"
        else:
            name = self._trees_name()
        return [ResponseTree.from_dict(row) for row in self.run_dir.read_jsonl(name)]

    def _extra_metrics(self) -> dict[str, Any]:
        if not self._malt_now() or not self.run_dir.exists(self._trees_name()):
            return {}
        return malt_metrics(self.load_trees())

    def _training_data(self) -> Any:
        """The trees of the plan's data iterations: this one's, or with
        ``fine_tune_on_all_previous_rollouts`` every MALT iteration's so far (the compatible
        ones: Expert Iteration's first ``num_initial_ei_iterations`` have no trees). Earlier
        trees are kept even when the agents' models have changed since, as the original
        concatenated them."""
        if not self._malt_now():
            return super()._training_data()
        return [tree for i in self._data_iterations() for tree in self.load_trees(i)]

    def _fine_tune_dataset(self, group: PureTextSharedModelGroup, data: Any) -> list[dict]:
        """The lines of ``group``'s job: MALT's DPO dataset (Expert Iteration's SFT one in
        the first ``num_initial_ei_iterations`` iterations)."""
        if not self._malt_now():
            return super()._fine_tune_dataset(group, data)
        return dpo_dataset(data, group.agent_wholes)


#: The trainer each ``HyperParameters.trainer`` name stands for.
TRAINERS: dict[str, type[PureTextEiTrainer]] = {
    "pure_text_ei": PureTextEiTrainer,
    "pure_text_malt": PureTextMaltTrainer,
}


def build_trainer(
    hyper_params: HyperParameters, settings: ExperimentSettings | None = None, **kwargs: Any
) -> PureTextEiTrainer:
    """The trainer ``hyper_params.trainer`` names (``TRAINERS``)."""
    return TRAINERS[hyper_params.trainer](hyper_params, settings, **kwargs)
