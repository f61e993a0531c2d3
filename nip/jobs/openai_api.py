"""Fine-tuning through the OpenAI API, or any server that speaks it (``nip serve``): a JSONL
file uploaded, a job created with ``method={"type": "supervised" | "dpo", ...}``."""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from nip.errors import FineTuneError
from nip.jobs._types import FineTuneEvent, FineTuneJob, FineTuneSpec, JobStatus
from nip.jobs.openai_closing import refused_job_error
from nip.parameters import PureTextAgentParameters

#: OpenAI job statuses and what nip calls them.
STATUS_MAP: dict[str, JobStatus] = {
    "validating_files": "pending",
    "queued": "pending",
    "running": "running",
    "succeeded": "succeeded",
    "failed": "failed",
    "cancelled": "cancelled",
}


def spec_to_jsonl(spec: FineTuneSpec) -> bytes:
    """The training file: one example per line."""
    return "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in spec.examples).encode()


def spec_to_method(spec: FineTuneSpec, *, lora_settings: bool = False) -> dict[str, Any]:
    """The ``method`` argument of ``fine_tuning.jobs.create``: ``"auto"`` for each ``openai_*``
    setting left None, or the LoRA training's epochs and batch size for ``nip serve``."""
    epochs, batch, lr = (
        (spec.num_epochs, spec.batch_size, None)
        if lora_settings
        else (spec.openai_n_epochs, spec.openai_batch_size, spec.openai_learning_rate_multiplier)
    )
    sent = {"n_epochs": epochs, "batch_size": batch, "learning_rate_multiplier": lr}
    if spec.method == "dpo":
        sent["beta"] = spec.dpo_beta
    hyperparameters = {k: "auto" if v is None else v for k, v in sent.items()}
    return {"type": spec.method, spec.method: {"hyperparameters": hyperparameters}}


def job_request(spec: FineTuneSpec, *, lora_settings: bool = False) -> dict[str, Any]:
    """The settings of ``fine_tuning.jobs.create`` for ``spec`` but the training file (what the
    backend sends and the run plan shows)."""
    request: dict[str, Any] = {
        "model": spec.base_model,
        "method": spec_to_method(spec, lora_settings=lora_settings),
        "suffix": (spec.job_name or None) and spec.job_name[:64],
        "seed": spec.seed,
    }
    if lora_settings:
        request["extra_body"] = {
            "lora": {
                "use_lora": spec.use_lora,
                "rank": spec.lora_rank,
                "alpha": spec.lora_alpha,
                "dropout": spec.lora_dropout,
                "stack": spec.stack_lora_adapters,
                "quantization": spec.quantization,
                "previous_adapter": spec.previous_adapter,
            },
            "learning_rate": spec.learning_rate,
        }
    return request


class OpenAIFineTuneBackend:
    """Fine-tuning jobs on the OpenAI API (``base_url`` None) or a compatible server.

    Args:
        api_key: The key (never shown in reprs or errors).
        wandb_project: Report jobs to this W&B project through OpenAI's integration.
        send_lora_settings: Send the LoRA settings and learning rate (``nip serve`` reads them).
    """

    name = "openai-fine-tuning"

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        wandb_project: str | None = None,
        send_lora_settings: bool = False,
    ):
        self.base_url = base_url
        self._api_key = api_key
        self.wandb_project = wandb_project
        self.send_lora_settings = send_lora_settings
        # Shared by every client: building one reads the CA bundle again.
        self._ssl_context: Any = None

    @classmethod
    def from_agent_params(cls, params: PureTextAgentParameters) -> OpenAIFineTuneBackend:
        """OpenAI's fine-tuning API, with ``$OPENAI_API_KEY``."""
        key = os.environ.get("OPENAI_API_KEY")
        if not key:
            raise FineTuneError("fine-tuning with OpenAI needs the OPENAI_API_KEY variable")
        return cls(None, key, wandb_project=os.environ.get("WANDB_OPENAI_FINETUNE_PROJECT"))

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[Any]:
        """A client for one operation, closed on the way out (none outlives its event loop)."""
        import openai

        from nip.backends.openai_compatible import sdk_httpx_module

        if self._ssl_context is None:
            self._ssl_context = sdk_httpx_module().create_ssl_context()
        key = self._api_key or "EMPTY"
        client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=key,
            max_retries=3,
            http_client=openai.DefaultAsyncHttpxClient(verify=self._ssl_context),
        )
        try:
            yield client
        finally:
            await client.close()

    async def create_job(self, spec: FineTuneSpec) -> str:
        import openai

        try:
            async with self._client() as client:
                return await self._create_job(client, spec)
        except openai.APIStatusError as error:
            # OpenAI refused for good (no permission, fine-tuning closed): stop, never retry.
            closed = (
                None
                if self.send_lora_settings
                else refused_job_error(error.status_code, _message(error))
            )
            if closed is not None:
                raise closed from None
            raise FineTuneError(f"the fine-tuning API refused the job: {_message(error)}") from None

    async def _create_job(self, client: Any, spec: FineTuneSpec) -> str:
        upload = await client.files.create(
            file=("train.jsonl", io.BytesIO(spec_to_jsonl(spec))), purpose="fine-tune"
        )
        extra: dict[str, Any] = {}
        if self.wandb_project:
            extra["integrations"] = [{"type": "wandb", "wandb": {"project": self.wandb_project}}]
        request = job_request(spec, lora_settings=self.send_lora_settings)
        job = await client.fine_tuning.jobs.create(training_file=upload.id, **request, **extra)
        return job.id

    async def get_job(self, job_id: str) -> FineTuneJob:
        import openai

        try:
            async with self._client() as client:
                job = await client.fine_tuning.jobs.retrieve(job_id)
        except openai.NotFoundError:
            return FineTuneJob(id=job_id, status="not_found")
        error = None
        if job.error is not None and (job.error.message or job.error.code):
            error = f"{job.error.code}: {job.error.message}" + (
                f" (param {job.error.param})" if job.error.param else ""
            )
        # nip serve reports how long the job ran, by its clock (its GPU time).
        running_s = (job.metadata or {}).get("running_s") if self.send_lora_settings else None
        return FineTuneJob(
            id=job.id,
            status=STATUS_MAP.get(job.status, "pending"),
            fine_tuned_model=job.fine_tuned_model,
            error=error,
            trained_tokens=job.trained_tokens,
            running_s=None if running_s is None else float(running_s),
        )

    async def cancel_job(self, job_id: str) -> None:
        async with self._client() as client:
            await client.fine_tuning.jobs.cancel(job_id)

    async def list_events(self, job_id: str) -> list[FineTuneEvent]:
        async with self._client() as client:
            page = await client.fine_tuning.jobs.list_events(job_id, limit=100)
        events = [
            FineTuneEvent(
                created_at=float(e.created_at or time.time()),
                level=e.level,
                message=e.message,
                data=dict(e.data or {}) if isinstance(e.data, dict) else {},
            )
            for e in page.data
        ]
        return sorted(events, key=lambda e: e.created_at)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_api_key": None, "_ssl_context": None}

    def __repr__(self) -> str:
        return f"OpenAIFineTuneBackend(base_url={self.base_url!r})"


def _message(error: Exception) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(body.get("detail"), str):
            return body["detail"]
    return str(getattr(error, "message", error))
