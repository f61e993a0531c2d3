"""Together AI: open-weight models through its OpenAI-compatible chat endpoint, LoRA (or full)
fine-tuning through its fine-tuning API, and its published prices.

What the API takes and answers, from Together's OpenAPI description (github.com/
togethercomputer/openapi, ``openapi.yaml`` of 2026-04-28) and its documentation
(docs.together.ai: fine-tuning data preparation, LoRA vs. full fine-tuning, pricing):

* ``POST /files/upload`` (multipart: ``file``, ``file_name``, ``purpose=fine-tune``,
  ``file_type=jsonl``) answers a ``FileResponse`` whose ``id`` is the ``training_file``.
  Supervised lines hold ``messages``; preference (DPO) lines ``input.messages``,
  ``preferred_output`` and ``non_preferred_output``: the OpenAI format nip writes.
* ``POST /fine-tunes`` with ``model``, ``training_file``, ``n_epochs``, ``learning_rate``,
  ``batch_size`` (``"max"``: Together chooses, with sequence packing), ``random_seed``,
  ``suffix``, ``training_method`` (``{"method": "sft"}`` or ``{"method": "dpo",
  "dpo_beta"}``, default beta 0.1) and ``training_type`` (``{"type": "Lora", "lora_r",
  "lora_alpha", "lora_dropout", "lora_trainable_modules"}`` or ``{"type": "Full"}``; LoRA
  when omitted). A 4xx answer is a refusal: the job is never created, and nip does not retry
  it (a 429 or 5xx is retried).
* ``GET /fine-tunes/{id}``: ``status`` (pending, queued, running, compressing, uploading,
  cancel_requested, cancelled, error, completed), ``model_output_name`` (the name to
  generate with), ``token_count``, ``epochs_completed``; ``/events`` its log (a failed job's
  reason is its ``job_error`` event); ``/metrics`` the training loss by step
  (``train/loss``, ``train/global_step``); ``POST /fine-tunes/{id}/cancel``.
* The fine-tuned model answers chat requests under ``model_output_name``: serverless for the
  base models Together serves LoRA adapters of (its "LoRA inference" list, e.g.
  ``meta-llama/Meta-Llama-3.1-8B-Instruct-Reference``), otherwise once a dedicated endpoint
  (or an endpoint the adapter is attached to) serves it; requests to a name nothing serves
  fail with a ``ModelNotFoundError`` naming it.

``TOGETHER_API_KEY`` holds the key; ``TOGETHER_BASE_URL`` replaces the API's address (a local
fake: :mod:`nip.testing.together`).
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any

from nip.errors import FineTuneError
from nip.jobs._types import FineTuneEvent, FineTuneJob, FineTuneSpec, JobStatus
from nip.jobs.openai_api import spec_to_jsonl
from nip.parameters import PROVIDER_FACTS
from nip.providers._provider import Prices, Provider, openai_compatible

#: The API's address (Together's OpenAPI description, ``servers``).
TOGETHER_BASE_URL = "https://api.together.ai/v1"
API_KEY_ENV = "TOGETHER_API_KEY"
BASE_URL_ENV = "TOGETHER_BASE_URL"

#: Together's job statuses and what nip calls them.
STATUS_MAP: Mapping[str, JobStatus] = MappingProxyType(
    {
        "pending": "pending",
        "queued": "pending",
        "running": "running",
        "compressing": "running",
        "uploading": "running",
        "cancel_requested": "running",
        "cancelled": "cancelled",
        "error": "failed",
        "completed": "succeeded",
    }
)


# ------------------------------------------------------------------------- job settings
def job_request(spec: FineTuneSpec) -> dict[str, Any]:
    """The body of ``POST /fine-tunes`` for ``spec``, all but ``training_file``: what the
    backend sends and the run plan shows."""
    method: dict[str, Any] = {"method": "sft", "train_on_inputs": "auto"}
    if spec.method == "dpo":
        method = {"method": "dpo"}
        if spec.dpo_beta is not None:  # else Together's default (0.1)
            method["dpo_beta"] = spec.dpo_beta
    training_type: dict[str, Any] = {"type": "Full"}
    if spec.use_lora:
        training_type = {
            "type": "Lora",
            "lora_r": spec.lora_rank,
            "lora_alpha": round(spec.lora_alpha),
            "lora_dropout": spec.lora_dropout,
            "lora_trainable_modules": "all-linear",
        }
    request: dict[str, Any] = {
        "model": spec.base_model,
        "n_epochs": spec.num_epochs,
        "learning_rate": spec.learning_rate,
        "batch_size": "max",
        "random_seed": spec.seed,
        "training_method": method,
        "training_type": training_type,
    }
    if spec.job_name:
        request["suffix"] = spec.job_name[:64]
    return request


# ---------------------------------------------------------------------- fine-tuning jobs
class TogetherFineTuneBackend:
    """Fine-tuning jobs through Together AI's fine-tuning API.

    Args:
        base_url: The API root (default: ``$TOGETHER_BASE_URL`` or Together's).
        api_key: The key (never shown in reprs or errors).
        retries: Tries after the first on a 429, a 5xx or a lost connection.
        backoff_s: The first wait between tries (doubled each time).
    """

    name = "together-fine-tuning"

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        retries: int = 3,
        backoff_s: float = 1.0,
    ):
        self.base_url = (base_url or TOGETHER_BASE_URL).rstrip("/")
        self._api_key = api_key
        self.retries = retries
        self.backoff_s = backoff_s

    @classmethod
    def from_environment(cls) -> TogetherFineTuneBackend:
        """Together's API with ``$TOGETHER_API_KEY`` (and ``$TOGETHER_BASE_URL`` if set)."""
        key = os.environ.get(API_KEY_ENV)
        if not key:
            raise FineTuneError(f"fine-tuning with Together AI needs the {API_KEY_ENV} variable")
        return cls(os.environ.get(BASE_URL_ENV), key)

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One API call, retried when the failure may pass; None for a 404.

        Raises:
            FineTuneError: A refusal (any other 4xx), or every try failed.
        """
        import httpx

        headers = {"Authorization": f"Bearer {self._api_key or ''}"}
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                async with httpx.AsyncClient(timeout=60.0) as client:
                    reply = await client.request(
                        method, f"{self.base_url}{path}", headers=headers, **kwargs
                    )
            except httpx.TransportError as error:
                last = f"{type(error).__name__}: {error}"
                continue
            if reply.status_code == 404 and method == "GET":
                return None
            if reply.status_code == 429 or reply.status_code >= 500:
                last = f"HTTP {reply.status_code}: {_message(reply)}"
                continue
            if reply.status_code >= 400:
                raise FineTuneError(f"Together AI refused the request: {_message(reply)}")
            return reply.json()
        raise FineTuneError(f"Together AI did not answer {method} {path} ({last})")

    async def create_job(self, spec: FineTuneSpec) -> str:
        """Upload the training file and create the job; a refusal raises at once."""
        data = spec_to_jsonl(spec)
        name = f"{spec.job_name or 'nip'}.jsonl"
        upload = await self._call(
            "POST",
            "/files/upload",
            files={"file": (name, data, "application/jsonl")},
            data={"purpose": "fine-tune", "file_name": name, "file_type": "jsonl"},
        )
        job = await self._call(
            "POST", "/fine-tunes", json={"training_file": upload["id"], **job_request(spec)}
        )
        return str(job["id"])

    async def get_job(self, job_id: str) -> FineTuneJob:
        job = await self._call("GET", f"/fine-tunes/{job_id}")
        if job is None:
            return FineTuneJob(id=job_id, status="not_found")
        status = STATUS_MAP.get(job.get("status", ""), "pending")
        error = loss = None
        if status == "failed":
            error = await self._error(job_id, job)
        if status == "succeeded":
            losses = [m["train/loss"] for m in await self._metrics(job_id) if "train/loss" in m]
            loss = float(losses[-1]) if losses else None
        return FineTuneJob(
            id=job_id,
            status=status,
            fine_tuned_model=job.get("model_output_name") if status == "succeeded" else None,
            error=error,
            trained_tokens=job.get("token_count"),
            training_loss=loss,
        )

    async def _error(self, job_id: str, job: Mapping[str, Any]) -> str:
        events = [*(job.get("events") or []), *await self._raw_events(job_id)]
        errors = [
            e["message"]
            for e in events
            if e.get("type") == "job_error" or e.get("level") == "error"
        ]
        return errors[-1] if errors else "the job ended with status 'error'"

    async def _raw_events(self, job_id: str) -> list[dict[str, Any]]:
        page = await self._call("GET", f"/fine-tunes/{job_id}/events")
        return list((page or {}).get("data") or [])

    async def _metrics(self, job_id: str) -> list[dict[str, Any]]:
        page = await self._call("GET", f"/fine-tunes/{job_id}/metrics")
        return list((page or {}).get("metrics") or [])

    async def cancel_job(self, job_id: str) -> None:
        await self._call("POST", f"/fine-tunes/{job_id}/cancel")

    async def list_events(self, job_id: str) -> list[FineTuneEvent]:
        """The job's events, and its loss at each logged step (``data``: step, loss,
        total_steps), oldest first."""
        events = [
            FineTuneEvent(
                created_at=_timestamp(e.get("created_at")),
                level=str(e.get("level") or "info"),
                message=str(e.get("message", "")),
                data={k: e[k] for k in ("type", "step", "total_steps", "token_count") if k in e},
            )
            for e in await self._raw_events(job_id)
        ]
        total = max((e.data.get("total_steps") or 0 for e in events), default=0)
        for metric in await self._metrics(job_id):
            if "train/loss" in metric and "train/global_step" in metric:
                step, loss = int(metric["train/global_step"]), float(metric["train/loss"])
                data = {"step": step, "loss": loss, **({"total_steps": total} if total else {})}
                when = _timestamp(metric.get("logged_at"))
                events.append(FineTuneEvent(when, "info", f"step {step}: loss {loss:.4f}", data))
        return sorted(events, key=lambda e: e.created_at)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_api_key": None}

    def __repr__(self) -> str:
        return f"TogetherFineTuneBackend(base_url={self.base_url!r})"


def _message(reply: Any) -> str:
    try:
        body = reply.json()
    except ValueError:
        return reply.text[:300] or f"HTTP {reply.status_code}"
    inner = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(inner, dict) and inner.get("message"):
        return str(inner["message"])
    return str(body)[:300]


def _timestamp(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return time.time()


# ------------------------------------------------------------------------------ prices
#: The day these prices were recorded. Together's pages read then (docs.together.ai,
#: fine-tuning pricing) give the formula, training tokens = n_epochs x the file's tokens
#: (plus n_evals x the validation file's, none here), and the size brackets; the rates are
#: the figures of together.ai/pricing as nip records them, which the stored copies this was
#: written from did not show: check them there before a paid run, and correct them with
#: ``ExperimentSettings(prices_usd_per_1m=...)`` and ``estimate_cost(fine_tuning_prices=...)``.
PRICES_READ_ON = "2026-11-27"
PRICES_SOURCE = "together.ai/pricing; docs.together.ai/docs/fine-tuning/pricing"

#: Serverless inference in USD per 1M ``(input, output)`` tokens, by model. A fine-tuned LoRA
#: adapter served serverless is priced as its base model. The ``-Reference`` models (the base
#: models of serverless LoRA) are at Together's per-size rates for models without a price of
#: their own (4.1-8B: $0.20, 41.1-80B: $0.90).
INFERENCE_USD_PER_1M: Mapping[str, tuple[float, float]] = MappingProxyType(
    {
        "meta-llama/Meta-Llama-3.1-8B-Instruct-Reference": (0.20, 0.20),
        "meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo": (0.18, 0.18),
        "meta-llama/Meta-Llama-3.1-70B-Instruct-Reference": (0.90, 0.90),
        "meta-llama/Llama-3.3-70B-Instruct-Turbo": (0.88, 0.88),
        "Qwen/Qwen2.5-72B-Instruct": (1.20, 1.20),
    }
)

#: Fine-tuning in USD per 1M training tokens, by model-size bracket (upper bound in billions
#: of parameters), then (method, LoRA) -> rate.
FINE_TUNING_USD_PER_1M: tuple[tuple[float, str, Mapping[tuple[str, bool], float]], ...] = (
    (16, "up to 16B", {("supervised", True): 0.48, ("supervised", False): 0.54,
                       ("dpo", True): 1.20, ("dpo", False): 1.35}),
    (69, "16.1-69B", {("supervised", True): 1.50, ("supervised", False): 1.65,
                      ("dpo", True): 3.75, ("dpo", False): 4.12}),
    (100, "69.1-100B", {("supervised", True): 2.90, ("supervised", False): 3.20,
                        ("dpo", True): 7.25, ("dpo", False): 8.00}),
)  # fmt: skip

_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])")


def model_size_b(model: str) -> float | None:
    """Billions of parameters, read from a model's name (``...-8B-...`` -> 8; a mixture of
    experts' total, ``235B-A22B`` -> 235); None when the name does not say."""
    found = _SIZE.search(model.removeprefix("ft:"))
    return float(found.group(1)) if found else None


def _bracket(model: str) -> tuple[str, Mapping[tuple[str, bool], float]] | None:
    size = model_size_b(model)
    if size is None:
        return None
    return next(((name, rates) for top, name, rates in FINE_TUNING_USD_PER_1M if size <= top), None)


def _inference(model: str) -> tuple[float, float] | None:
    return INFERENCE_USD_PER_1M.get(model.removeprefix("ft:"))


def _priced_as(model: str) -> str | None:
    """The base model a fine-tuned model is billed as (its adapter served serverless), read
    from its ``model_output_name``: ``<account>/<base model>-<suffix>-<id>``, where the base
    model is written with or without its organisation (``meta-llama/``) as Together's
    examples show both; None for a model of the price table or one of no base it knows."""
    if model in INFERENCE_USD_PER_1M or "/" not in model:
        return None
    name = model.split("/", 1)[1]
    bases = [
        base
        for base in INFERENCE_USD_PER_1M
        if name.startswith((f"{base}-", f"{base.rsplit('/', 1)[-1]}-"))
    ]
    return max(bases, key=len, default=None)


def _training(model: str, method: str, lora: bool) -> float | None:
    bracket = _bracket(model)
    return None if bracket is None else bracket[1].get((method, lora))


def _notes(model: str) -> list[str]:
    bracket = _bracket(model)
    size = (
        f"{model!r} is priced in the {bracket[0]} size bracket (its size read from its name)"
        if bracket
        else f"{model!r} has no size in its name, so its fine-tuning is not priced"
    )
    return [
        f"Together AI: prices recorded {PRICES_READ_ON} from {PRICES_SOURCE}; {size}; a job's "
        "training tokens are its file's tokens times n_epochs (no validation file); a "
        "fine-tuned adapter is priced as its base model, served serverless (a dedicated "
        "endpoint, billed by the minute, is not counted)"
    ]


PRICES = Prices(
    source=PRICES_SOURCE,
    read_on=PRICES_READ_ON,
    inference=_inference,
    training=_training,
    notes=_notes,
    priced_as=_priced_as,
)

PROVIDER = Provider(
    "TogetherAI",
    PROVIDER_FACTS["TogetherAI"],
    endpoint_key=lambda params: "together",
    chat=openai_compatible("together", TOGETHER_BASE_URL, API_KEY_ENV, base_url_env=BASE_URL_ENV),
    fine_tune=lambda params, settings, chat: TogetherFineTuneBackend.from_environment(),
    job_settings=job_request,
    prices=PRICES,
)
