"""Shared model groups (seed: ``PureTextSharedModelGroup`` / ``OpenAiSharedModelGroup``).

Agents with the same ``shared_model_group`` share one model, fine-tuned on the union of their
examples. The group owns the job and, once it succeeds, switches its agents to the new model. It
is the only writer of its job state: trainers and the failure policy go through its methods.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

from nip.agents import PureTextWholeAgent
from nip.backends import AdapterHost, ReportsReadiness, capability
from nip.errors import (
    FineTuneError,
    FineTuneJobFailed,
    SharedModelGroupError,
)
from nip.jobs import FineTuneBackend, FineTuneJob, FineTuneSpec, JobStatus
from nip.jobs._types import ChecksAgents, ChecksJobs, EndsRuns
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.parameters.groups import check_group_agreement
from nip.protocols import ProtocolHandler
from nip.rollouts.records import Transcript
from nip.settings import ExperimentSettings
from nip.training.algorithms.expert_iteration import sft_dataset
from nip.training.plan import continues_from_latest, fine_tune_spec, job_epochs
from nip.utils import counted
from nip.utils.notices import warn

JobOutcome = Literal["none", "submitted", "frozen", "insufficient_data", "not_scheduled", "failed"]
#: The outcomes a trainer records for a group it did not submit a job for.
Skipped = Literal["frozen", "not_scheduled"]

#: What each reason a group is not trained means, in the words every reader shows.
SKIP_REASONS: Mapping[str, str] = MappingProxyType(
    {
        "frozen": "frozen (freeze_agent=True): never fine-tuned",
        "not_scheduled": "not scheduled: its update_schedule skips this iteration",
        "insufficient_data": "too few examples (text_rl.min_fine_tune_examples)",
    }
)


def too_few_examples(group: str, count: int, method: str, minimum: int) -> str:
    """The one sentence for a group with fewer examples than ``min_fine_tune_examples``."""
    return (
        f"group {group!r}: too few examples to fine-tune ({counted(count, method + ' example')}, "
        f"fewer than text_rl.min_fine_tune_examples={minimum}); the model is not fine-tuned"
    )


@dataclass
class PureTextSharedModelGroupState:
    """What a group must remember across a restart.

    Attributes:
        fine_tune_job_id: The latest job (None when none was submitted).
        fine_tuned_model_name: The model the group generates with (None: the base model).
        adapter_path: The latest local LoRA adapter, if any.
        last_job_outcome: What happened at the last fine-tuning step: "submitted", "frozen",
            "insufficient_data", "not_scheduled" (:data:`SKIP_REASONS`), "failed" (it keeps its
            previous model: :mod:`nip.training.failure_policy`), or "none".
        model_history: Every model the group has generated with, oldest first.
        fine_tune_failures: Every failed job: ``{"iteration", "job_id", "error"}``.
        start_model / start_adapter_path: An earlier run's model the group started from
            (``load_checkpoint_and_parameters``), replacing the base model.
    """

    fine_tune_job_id: str | None = None
    fine_tuned_model_name: str | None = None
    adapter_path: str | None = None
    last_job_outcome: JobOutcome = "none"
    model_history: list[str] = field(default_factory=list)
    fine_tune_failures: list[dict[str, Any]] = field(default_factory=list)
    start_model: str | None = None
    start_adapter_path: str | None = None


class PureTextSharedModelGroup:
    """A group of agents sharing one model, and that model's fine-tuning (``fine_tune_backend``:
    where jobs run; chosen from the members' provider when omitted)."""

    def __init__(
        self,
        hyper_params: HyperParameters,
        settings: ExperimentSettings | None,
        protocol_handler: ProtocolHandler,
        agent_wholes: Mapping[str, PureTextWholeAgent] | Iterable[PureTextWholeAgent],
        group_name: str,
        *,
        fine_tune_backend: FineTuneBackend | None = None,
    ):
        if not isinstance(agent_wholes, Mapping):
            agent_wholes = {a.agent_name: a for a in agent_wholes}
        if not agent_wholes:
            raise SharedModelGroupError(f"group {group_name!r} has no agents")
        self.hyper_params = hyper_params
        self.settings = settings or ExperimentSettings()
        self.protocol_handler = protocol_handler
        self.agent_wholes: dict[str, PureTextWholeAgent] = dict(agent_wholes)
        self.group_name = group_name
        check_group_agreement(hyper_params)
        self.params: PureTextAgentParameters = next(iter(self.agent_wholes.values())).agent_params
        self._fine_tune_backend = fine_tune_backend
        self.state = PureTextSharedModelGroupState()

    @property
    def fine_tune_backend(self) -> FineTuneBackend:
        """Where the group's jobs run: chosen from the members' provider when first used, so a
        group that never trains (``nip analyse``) starts no training machinery (the embedded
        model's imports TRL, PEFT and accelerate in a worker thread)."""
        if self._fine_tune_backend is None:
            from nip.providers import fine_tune_backend_for

            chat_backend = next(iter(self.agent_wholes.values())).backend
            self._fine_tune_backend = fine_tune_backend_for(
                self.params, self.settings, chat_backend
            )
        return self._fine_tune_backend

    @fine_tune_backend.setter
    def fine_tune_backend(self, backend: FineTuneBackend) -> None:
        self._fine_tune_backend = backend

    # ---------------------------------------------------------------- attributes
    def agent_ids_and_names(self) -> Iterator[tuple[int, str]]:
        """(agent id, agent name) for each member."""
        for name, agent in self.agent_wholes.items():
            yield agent.agent_id, name

    @property
    def is_trainable(self) -> bool:
        return not self.params.freeze_agent

    @property
    def lora_alpha(self) -> float:
        """The computed LoRA alpha value for the group."""
        return self.params.computed_lora_alpha

    @property
    def max_message_rounds(self) -> int:
        return self.protocol_handler.num_rounds()

    @property
    def base_model_name(self) -> str:
        """The model fine-tuning starts from: an earlier run's model, or ``model_name``."""
        return self.state.start_model or self.params.model_name

    @property
    def model_name(self) -> str:
        """The model generating now: the latest fine-tune, or the base model."""
        return self.state.fine_tuned_model_name or self.base_model_name

    @property
    def num_epochs(self) -> int:
        """The epochs its next job trains (as the run plan counts them)."""
        return job_epochs(self.params, self._spec("supervised", [], None))

    @property
    def rl_learning_rate(self) -> float:
        return self.hyper_params.rl.lr

    @property
    def submitted_job_id(self) -> str | None:
        """The job submitted this iteration and not yet switched to (None: none)."""
        return self.state.fine_tune_job_id if self.state.last_job_outcome == "submitted" else None

    # ------------------------------------------------------------- fine-tuning
    def _spec(
        self,
        method: str,
        examples: list[dict[str, Any]],
        job_name: str | None,
        continues: bool | None = None,
    ) -> FineTuneSpec:
        """The job, from the run plan's decision to continue from the group's latest model
        (default: :func:`~nip.training.plan.continues_from_latest`) and what the group's
        models are called by now."""
        if continues is None:
            continues = continues_from_latest(self.params)
        # A local adapter continues as base model + previous adapter; an API fine-tune
        # continues from the fine-tuned model's name. Starting afresh starts again from the
        # run's starting point: the base model, or the adapter of an earlier run.
        by_name = continues and self.state.adapter_path is None
        base = self.params.model_name if self.state.start_adapter_path else self.base_model_name
        spec = fine_tune_spec(
            self.hyper_params,
            self.params,
            method,
            examples,
            job_name,
            base_model=self.model_name if by_name else base,
            previous_adapter=self.state.adapter_path
            if continues
            else self.state.start_adapter_path,
        )
        # DPO's pairs were sampled by the model generating now: a hosted trainer's reference.
        return replace(spec, reference_model=self.model_name) if method == "dpo" else spec

    def supervised_examples(
        self,
        rollouts_per_agent: Mapping[str, Sequence[Transcript]],
        guess_replaced_rollouts: Mapping[str, Sequence[Transcript]] | None = None,
    ) -> list[dict[str, Any]]:
        """The SFT lines the group would train on (Expert Iteration's :func:`sft_dataset`)."""
        return sft_dataset(self.agent_wholes, rollouts_per_agent, guess_replaced_rollouts)

    async def submit_fine_tune_job(
        self,
        method: str,
        examples: list[dict[str, Any]],
        job_name: str | None = None,
        *,
        continues: bool | None = None,
    ) -> str | None:
        """Submit a job on ``examples`` (``method``: "supervised" or "dpo"; ``continues``: from the
        group's latest model, as the run plan says); the job id, or None when the group is frozen or
        has too few examples (``state.last_job_outcome`` and a warning say why)."""
        if not self.is_trainable:
            warn(
                f"group {self.group_name!r} is frozen (freeze_agent=True); its model is "
                f"not fine-tuned and the {method} job is not submitted"
            )
            self.state.last_job_outcome = "frozen"
            return None
        minimum = self.hyper_params.text_rl.min_fine_tune_examples
        if len(examples) < minimum:
            warn(too_few_examples(self.group_name, len(examples), method, minimum))
            self.state.last_job_outcome = "insufficient_data"
            return None
        spec = self._spec(method, examples, job_name, continues)
        job_id = await self.fine_tune_backend.create_job(spec)
        self.state.fine_tune_job_id = job_id
        self.state.last_job_outcome = "submitted"
        return job_id

    async def create_supervised_fine_tune_job(
        self,
        rollouts_per_agent: Mapping[str, Sequence[Transcript]],
        guess_replaced_rollouts: Mapping[str, Sequence[Transcript]] | None = None,
        job_name: str | None = None,
    ) -> str | None:
        """Submit an SFT job on the members' selected dialogues (``rollouts_per_agent``, and the
        verifier dialogues whose decision becomes the true label); the job id, or None when the
        group is frozen or has too few examples."""
        examples = sft_dataset(self.agent_wholes, rollouts_per_agent, guess_replaced_rollouts)
        return await self.submit_fine_tune_job("supervised", examples, job_name)

    async def create_dpo_fine_tune_job(
        self,
        positive_examples_per_agent: Mapping[str, Sequence[Any]],
        negative_examples_per_agent: Mapping[str, Sequence[Any]] | None = None,
        job_name: str | None = None,
    ) -> str | None:
        """Submit a DPO job on the members' :class:`~nip.training.algorithms.malt.DpoExample` pairs
        by agent name (``negative_examples_per_agent``: the original's signature only; leave it
        None)."""
        if negative_examples_per_agent:
            raise FineTuneError(
                "pass DpoExample pairs in positive_examples_per_agent; each holds both sides"
            )
        lines = [
            example.to_openai()
            for name in self.agent_wholes
            for example in positive_examples_per_agent.get(name, ())
        ]
        return await self.submit_fine_tune_job("dpo", lines, job_name)

    def skip(self, outcome: Skipped) -> None:
        """Record that no job is submitted this iteration: the group is ``"frozen"`` or its
        update schedule skips the iteration (``"not_scheduled"``)."""
        self.state.last_job_outcome = outcome

    def keep_previous_model(self) -> None:
        """Record that this iteration's job failed for good: the group keeps its model."""
        self.state.last_job_outcome = "failed"

    def end_iteration(self) -> None:
        """Forget this iteration's outcome once its models are switched."""
        self.state.last_job_outcome = "none"

    def record_failure(self, iteration: int, job_id: str, error: str) -> None:
        """Keep a failed job in the group's history (once per job)."""
        if not self.known_failed(job_id):
            self.state.fine_tune_failures.append(
                {"iteration": iteration, "job_id": job_id, "error": error}
            )

    def known_failed(self, job_id: str) -> bool:
        """Whether ``job_id`` is recorded as failed (so nobody waits on it again)."""
        return any(f["job_id"] == job_id for f in self.state.fine_tune_failures)

    def failures_in(self, iteration: int) -> list[dict[str, Any]]:
        """The failed jobs of ``iteration``, oldest first."""
        return [f for f in self.state.fine_tune_failures if f["iteration"] == iteration]

    def start_from(self, model: str, adapter_path: str | None = None) -> None:
        """Start from an earlier run's model (before the first iteration)."""
        self.state.start_model = model
        self.state.start_adapter_path = adapter_path
        self.state.fine_tuned_model_name = model
        self.state.adapter_path = adapter_path
        self.state.model_history = [model]
        self.set_state(self.state)

    async def fine_tune_job(self) -> FineTuneJob | None:
        """The latest job as the backend reports it now (None when none was submitted)."""
        if self.state.fine_tune_job_id is None:
            return None
        return await self.fine_tune_backend.get_job(self.state.fine_tune_job_id)

    async def get_fine_tune_job_status(self) -> JobStatus:
        """pending, running, succeeded, failed, cancelled or not_found."""
        job = await self.fine_tune_job()
        return "not_found" if job is None else job.status

    async def fine_tune_job_failed(self) -> bool:
        return await self.get_fine_tune_job_status() == "failed"

    async def get_fine_tune_job_error_repr(self) -> str:
        job = await self.fine_tune_job()
        if job is None:
            return "no fine-tuning job"
        return job.error or f"no error (status {job.status})"

    async def wait_for_fine_tune_job(
        self, poll_interval_s: float = 2.0, timeout_s: float | None = None
    ) -> FineTuneJob:
        """Poll until the job ends, without blocking the loop; :class:`FineTuneJobFailed` when it
        failed, was cancelled or lost, TimeoutError after ``timeout_s``."""
        started = time.monotonic()
        while True:
            job = await self.fine_tune_job()
            if job is None:
                raise FineTuneError(f"group {self.group_name!r} has no fine-tuning job")
            if job.status == "succeeded":
                return job
            if job.done:
                raise FineTuneJobFailed(job.id, job.error or job.status)
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise TimeoutError(f"fine-tuning job {job.id} still {job.status}")
            await asyncio.sleep(poll_interval_s)

    async def switch_to_next_model(self, job: FineTuneJob | None = None) -> str:
        """Generate with the model the succeeded job (``job``: else fetched) produced; its name."""
        if job is None:
            job = await self.fine_tune_job()
        if job is None or job.status != "succeeded" or not job.fine_tuned_model:
            status = "no job" if job is None else job.status
            raise FineTuneError(f"group {self.group_name!r}: cannot switch models ({status})")
        if job.adapter_path:
            self._register_adapter(job.fine_tuned_model, job.adapter_path)
        self.state.fine_tuned_model_name = job.fine_tuned_model
        self.state.adapter_path = job.adapter_path
        self.state.model_history.append(job.fine_tuned_model)
        self._apply_model_name()
        return job.fine_tuned_model

    def _register_adapter(self, model: str, adapter_path: str) -> None:
        for agent in self.agent_wholes.values():
            host = capability(agent.backend, AdapterHost)
            if host is not None:
                host.register_adapter(model, adapter_path)

    def _apply_model_name(self) -> None:
        for agent in self.agent_wholes.values():
            agent.model_name = self.model_name

    async def wait_for_ready(self, timeout: float = 300.0, *, will_train: bool = False) -> None:
        """Wait until the members' backends can generate (TimeoutError after ``timeout`` s), and
        build the fine-tuning backend of a group that ``will_train`` (MissingExtraError for an
        extra)."""
        # Built now: a missing extra is refused before the first dialogue, and the embedded
        # model's imports the training libraries while dialogues are sampled. A backend that
        # can check the job (Together: its model's limits) does so before any dialogue is paid.
        if will_train and isinstance(backend := self.fine_tune_backend, ChecksAgents):
            backend.check_agents(self.agent_wholes.values())
        if will_train and isinstance(backend := self.fine_tune_backend, ChecksJobs):
            await backend.check_job(self._spec("supervised", [], None))
        backends = {id(a.backend): a.backend for a in self.agent_wholes.values() if a.backend}
        for backend in backends.values():
            starting = capability(backend, ReportsReadiness)
            if starting is not None:
                await asyncio.wait_for(starting.wait_for_ready(), timeout)

    async def end_run(self) -> None:
        """The run has ended: let the fine-tuning backend clean up (Together deletes the
        training files it uploaded)."""
        if isinstance(self._fine_tune_backend, EndsRuns):
            await self._fine_tune_backend.end_run()

    async def eval(self) -> None:
        """Switch to evaluation mode (nothing to do for API and embedded models)."""

    async def train(self) -> None:
        """Switch to training mode (nothing to do for API and embedded models)."""

    # ------------------------------------------------------------------- state
    def get_state(self) -> PureTextSharedModelGroupState:
        return self.state

    def get_state_dict(self) -> dict[str, Any]:
        return asdict(self.state)

    def set_state(self, checkpoint: PureTextSharedModelGroupState | Mapping[str, Any]) -> None:
        """Restore from :meth:`get_state` or :meth:`get_state_dict` (re-registering the
        latest adapter with the local backend)."""
        if isinstance(checkpoint, Mapping):
            checkpoint = PureTextSharedModelGroupState(**checkpoint)
        self.state = checkpoint
        if checkpoint.adapter_path and checkpoint.fine_tuned_model_name:
            self._register_adapter(checkpoint.fine_tuned_model_name, checkpoint.adapter_path)
        self._apply_model_name()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.group_name!r}, agents={list(self.agent_wholes)}, "
            f"model={self.model_name!r}, trainable={self.is_trainable}, "
            f"fine_tune_backend={self.fine_tune_backend!r})"
        )


class OpenAiSharedModelGroup(PureTextSharedModelGroup):
    """The original's name for a shared model group; the fine-tuning backend is chosen by
    ``model_provider`` (OpenAI API, a self-hosted server, local LoRA or dummy)."""
