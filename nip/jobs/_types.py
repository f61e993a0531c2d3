"""The interface of fine-tuning backends, and the records they exchange.

A backend takes a :class:`FineTuneSpec` (base model, method, training examples in the OpenAI
fine-tuning JSONL format, hyper-parameters) and returns a job id whose :class:`FineTuneJob`
status can be polled. Implementations: the OpenAI fine-tuning API (or any server speaking
it, such as ``nip serve``), local LoRA training with TRL + PEFT, and a dummy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

JobStatus = Literal["pending", "running", "succeeded", "failed", "cancelled", "not_found"]
FineTuneMethod = Literal["supervised", "dpo"]

TERMINAL_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "not_found"})


@dataclass(frozen=True)
class FineTuneSpec:
    """What to train.

    Attributes:
        base_model: The model to start from (a base model, or an earlier fine-tune).
        method: "supervised" (SFT) or "dpo".
        examples: Training lines in the OpenAI format: ``{"messages": [...]}`` for SFT,
            ``{"input": {"messages": [...]}, "preferred_output": [...],
            "non_preferred_output": [...]}`` for DPO.
        job_name: A readable name (used as the OpenAI ``suffix`` and in adapter names).
        num_epochs / learning_rate / batch_size: Training hyper-parameters.
        dpo_beta: DPO's beta (None: the backend's default).
        use_lora / lora_rank / lora_alpha / lora_dropout: The adapter (local backends).
        previous_adapter: An adapter to continue from or stack on (local backends).
        stack_lora_adapters: Stack a new adapter on ``previous_adapter`` rather than train it.
        reference_model: The model that sampled a DPO job's pairs, its reference where the
            backend computes one itself (Tinker; None: ``base_model``).
        seed: Training seed.
        quantization: "bitsandbytes" trains on 4-bit base weights (QLoRA; CUDA only).
        openai_n_epochs / openai_batch_size / openai_learning_rate_multiplier: What OpenAI's
            API is sent (None: "auto", OpenAI chooses); ``num_epochs``, ``batch_size`` and
            the LoRA settings go to local training and ``nip serve`` only.
    """

    base_model: str
    method: FineTuneMethod
    examples: tuple[dict[str, Any], ...]
    job_name: str | None = None
    num_epochs: int = 1
    learning_rate: float = 1e-4
    batch_size: int = 2
    dpo_beta: float | None = None
    use_lora: bool = True
    lora_rank: int = 8
    lora_alpha: float = 8.0
    lora_dropout: float = 0.05
    previous_adapter: str | None = None
    stack_lora_adapters: bool = False
    reference_model: str | None = None
    seed: int = 0
    quantization: str = "none"
    openai_n_epochs: int | None = None
    openai_batch_size: int | None = None
    openai_learning_rate_multiplier: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["examples"] = list(self.examples)
        return data


@dataclass(frozen=True)
class FineTuneEvent:
    """One line of a job's log (a status change, a training loss...)."""

    created_at: float
    level: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FineTuneJob:
    """A job as its backend reports it.

    Attributes:
        id: The backend's job id.
        status: pending, running, succeeded, failed, cancelled or not_found.
        fine_tuned_model: The name to generate with once it succeeded.
        adapter_path: Where a local LoRA adapter was written (local backends).
        error: What went wrong, when it failed.
        trained_tokens / training_loss: Progress figures when the backend reports them.
        running_s: How long it trained, once ended, where its backend measures it (``nip
            serve``: its GPU time).
    """

    id: str
    status: JobStatus
    fine_tuned_model: str | None = None
    adapter_path: str | None = None
    error: str | None = None
    trained_tokens: int | None = None
    training_loss: float | None = None
    running_s: float | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL_STATUSES


@runtime_checkable
class FineTuneBackend(Protocol):
    """Creates and tracks fine-tuning jobs."""

    name: str

    async def create_job(self, spec: FineTuneSpec) -> str:
        """Submit a job; returns its id."""
        ...

    async def get_job(self, job_id: str) -> FineTuneJob:
        """The job's current state (``status="not_found"`` if the backend does not know it)."""
        ...

    async def cancel_job(self, job_id: str) -> None:
        """Ask the backend to stop the job."""
        ...

    async def list_events(self, job_id: str) -> list[FineTuneEvent]:
        """The job's log, oldest first."""
        ...


@runtime_checkable
class ChecksJobs(Protocol):
    """A fine-tuning backend that can refuse a job before anything is paid for (when the run
    is built, before its first dialogue)."""

    async def check_job(self, spec: FineTuneSpec) -> None:
        """Raise :class:`~nip.errors.FineTuneError` if the backend would refuse ``spec``
        (only its model and settings are read: it has no examples yet)."""
        ...


@runtime_checkable
class ChecksAgents(Protocol):
    """A fine-tuning backend that refuses, before the first dialogue, agents whose training
    lines it could not take (Together: an assistant turn with no user turn before it)."""

    def check_agents(self, agents: Iterable[Any]) -> None:
        """Raise :class:`~nip.errors.InvalidParameterError` naming the agent's setting."""
        ...


@runtime_checkable
class EndsRuns(Protocol):
    """A fine-tuning backend that cleans up after a run (files it uploaded for its jobs)."""

    async def end_run(self) -> None:
        """Called once when the run has ended (finished all its iterations)."""
        ...
