"""Together AI through its own SDK (``together`` 3.x, ``pip install 'nip[together]'``):
chat completions, LoRA (or full) fine-tuning jobs, and its published prices.

One ``AsyncTogether`` per endpoint and event loop, its own retries off: transient errors are
retried by :mod:`nip.backends._retry`, the rest become :mod:`nip.errors` types with the key
redacted. A job is checked against ``fine_tuning.model_limits`` when the run is built; its file
is put in Together's format (:func:`together_lines`), checked (:func:`check_lines` and the SDK's
``check_file``), uploaded once per content (the ids kept in the run's ``jobs/together_files.json``,
so a resumed process knows them) and deleted when the run ends. Every SDK status maps
to nip's in :data:`STATUS_MAP` (any other stops the wait); a failed job's reason is its error
event, in any spelling. ``TOGETHER_API_KEY`` holds the key; ``TOGETHER_BASE_URL`` replaces the
API's root (``https://api.together.ai``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import random
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from nip.agents.prompt_builder import supervisor_enabled
from nip.backends._retry import (
    RetryPolicy,
    call_with_retries,
    error_for_sdk_exception,
)
from nip.backends.openai_compatible import OpenAIBackend, OpenAIBackendConfig
from nip.errors import (
    BackendUnavailableError,
    FineTuneError,
    GenerationError,
    InvalidParameterError,
    ModelNotFoundError,
)
from nip.jobs._types import TERMINAL_STATUSES, FineTuneEvent, FineTuneJob, FineTuneSpec
from nip.jobs.openai_api import spec_to_jsonl
from nip.parameters import PROVIDER_FACTS, PureTextAgentParameters
from nip.protocols import build_protocol_handler
from nip.providers._provider import Provider
from nip.providers._together_api import (
    API_KEY_ENV,
    BASE_URL_ENV,
    FAILURE_EVENTS,
    STATUS_MAP,
    TOGETHER_BASE_URL,
    _sdk,
    check_lines,
    job_request,
    limit_problems,
    together_lines,
)
from nip.providers._together_prices import INFERENCE_USD_PER_1M as INFERENCE_USD_PER_1M
from nip.providers._together_prices import PRICES
from nip.providers._together_prices import PRICES_READ_ON as PRICES_READ_ON
from nip.settings import ExperimentSettings
from nip.utils.files import atomic_write_text

T = TypeVar("T")


# ------------------------------------------------------------------------------- chat
class TogetherChatBackend(OpenAIBackend):
    """Chat completions through the Together SDK, with OpenAIBackend's concurrency limit,
    counters, ``n`` top-ups and retries; the SDK's errors become nip's."""

    def _client(self) -> Any:
        return _sdk().AsyncTogether(
            api_key=self.config.resolve_api_key(),
            base_url=self.config.base_url,
            timeout=self.config.request_timeout_s,
            max_retries=0,  # nip's are the only retries
        )

    def _sdk(self) -> tuple[Any, type]:
        import httpx

        return _sdk(), httpx.Response


def _chat(params: PureTextAgentParameters, settings: ExperimentSettings) -> TogetherChatBackend:
    _sdk()  # a missing extra is said now, in one line
    root = os.environ.get(BASE_URL_ENV) or TOGETHER_BASE_URL
    config: dict[str, Any] = {
        "name": "together",
        "base_url": f"{root.rstrip('/')}/v1",  # the OpenAI-compatible root
        "api_key_env": API_KEY_ENV,
    }
    if settings.max_concurrency is not None:
        config["max_concurrency"] = settings.max_concurrency
    return TogetherChatBackend(OpenAIBackendConfig(**config))


#: The seeds tried for a protocol whose order of speakers depends on the seed (MAC's prover).
_ORDER_SEEDS = range(8)


def _speaks_unprompted(handler: Any, name: str) -> bool:
    """Whether, for some seed, ``name``'s first turn comes before any message it can read
    (it speaks first, or every earlier message went to channels it cannot see)."""
    visible = set(handler.visible_channels(name))
    for seed in _ORDER_SEEDS:
        for round_id in range(handler.max_message_rounds):
            speakers = handler.speakers(round_id, seed)
            if name in speakers:
                return True
            if any(visible & set(channels) for channels in speakers.values()):
                break  # it reads a message before its first turn
    return False


def first_turn_problem(handler: Any, name: str, mode: str) -> InvalidParameterError | None:
    """Why a fine-tuned agent whose first turn comes before any message it can read, prompted
    by its system message alone, is refused (None: it is not): its lines would have an
    assistant turn with no user turn before it, which Together's format refuses; a supervisor
    message is that turn."""
    if supervisor_enabled(mode, 0) or not _speaks_unprompted(handler, name):
        return None
    return InvalidParameterError(
        f"agents.{name}.use_supervisor_message",
        mode,
        "'first' or 'all' for a Together AI agent that is fine-tuned and speaks first",
        reason=f"under {handler.name} its first turn comes before any message it can read, "
        "prompted by its system message alone, and Together AI's format wants a user turn "
        "before each assistant turn: the supervisor message is one, kept in its training lines",
    )


def first_turn_problems(hyper_params: Any, trained: Iterable[str]) -> list[str]:
    """What the run will refuse, before its first dialogue, of these trained agents on
    Together AI (:func:`first_turn_problem`), one line per agent, for the dry run."""
    names = [n for n in sorted(trained) if hyper_params.agents[n].served_by == "TogetherAI"]
    handler = build_protocol_handler(hyper_params) if names else None
    found = (
        first_turn_problem(handler, n, hyper_params.agents[n].use_supervisor_message) for n in names
    )
    return [str(problem) for problem in found if problem]


# ---------------------------------------------------------------------- fine-tuning jobs
class TogetherFineTuneBackend:
    """Fine-tuning jobs through Together AI's SDK (the key is never shown or pickled)."""

    name = "together-fine-tuning"

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        record: str | Path | None = None,
    ):
        self.base_url = (base_url or TOGETHER_BASE_URL).rstrip("/")
        self._api_key = api_key
        self.retry = retry or RetryPolicy(max_retries=4, initial_backoff_s=1.0)
        self._rng = random.Random()  # jitter only
        self._clients: dict[int, tuple[asyncio.AbstractEventLoop, Any]] = {}
        self._limits: dict[str, Any] = {}
        # The files uploaded, sha256 of their bytes -> file id; in ``record`` too, where the
        # run's later processes (a resume) find them to reuse and delete.
        self.record = Path(record) if record else None
        self.uploaded: dict[str, str] = self._recorded()
        self._ended: dict[str, list[FineTuneEvent] | None] = {}  # last events of ended jobs

    @classmethod
    def from_environment(cls, run_dir: str | Path | None = None) -> TogetherFineTuneBackend:
        """Together's API with ``$TOGETHER_API_KEY`` (and ``$TOGETHER_BASE_URL`` if set), its
        uploads recorded in ``run_dir``."""
        key = os.environ.get(API_KEY_ENV)
        if not key:
            raise FineTuneError(f"fine-tuning with Together AI needs the {API_KEY_ENV} variable")
        record = Path(run_dir) / "jobs" / "together_files.json" if run_dir else None
        return cls(os.environ.get(BASE_URL_ENV), key, record=record)

    def _recorded(self) -> dict[str, str]:
        return json.loads(self.record.read_text()) if self.record and self.record.exists() else {}

    def _remember(self, digest: str, file_id: str | None) -> None:
        """Record an upload (None: its deletion), merged with the run's other groups'."""
        files = {**self._recorded(), **self.uploaded, digest: file_id}
        self.uploaded = {d: f for d, f in {**self.uploaded, digest: file_id}.items() if f}
        if self.record is not None:  # atomic: a kill -9 leaves the old record or the new
            self.record.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.record, json.dumps({d: f for d, f in files.items() if f}))

    # ----------------------------------------------------------------- calls
    def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        entry = self._clients.get(id(loop))
        if entry is None or entry[0] is not loop:
            self._clients = {k: v for k, v in self._clients.items() if not v[0].is_closed()}
            client = _sdk().AsyncTogether(
                api_key=self._api_key or "EMPTY", base_url=self.base_url, max_retries=0
            )
            entry = self._clients[id(loop)] = (loop, client)
        return entry[1]

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    async def _call(
        self, what: str, call: Callable[[Any], Awaitable[T]], *, missing_ok: bool = False
    ) -> T | None:
        """One SDK call, transient failures retried; None for a 404 when ``missing_ok``, else
        FineTuneError for a refusal or when every try failed."""
        together = _sdk()

        async def attempt() -> T:
            try:
                return await call(self._client())
            except together.APIError as error:  # not chained: its request carries the key
                raise error_for_sdk_exception(error, self._redact, sdk=together) from None

        try:
            result, _ = await call_with_retries(attempt, self.retry, self._rng, what=what)
        except ModelNotFoundError as error:
            if missing_ok:
                return None
            raise FineTuneError(f"Together AI refused {what} ({error})") from None
        except BackendUnavailableError as error:
            raise FineTuneError(f"Together AI did not answer {what} ({error})") from None
        except (GenerationError, ValueError) as error:
            raise FineTuneError(
                f"Together AI refused {what} ({self._redact(str(error))})"
            ) from None
        return result

    # ------------------------------------------------------------- the checks
    async def model_limits(self, model: str) -> Any:
        """Together's fine-tuning limits of ``model`` (asked once; FineTuneError if none)."""
        if model not in self._limits:
            limits = await self._call(
                f"the fine-tuning limits of {model}",
                lambda c: c.fine_tuning.model_limits(model_name=model),
                missing_ok=True,
            )
            if limits is None:
                raise FineTuneError(f"Together AI does not fine-tune {model}")
            self._limits[model] = limits
        return self._limits[model]

    async def check_job(self, spec: FineTuneSpec) -> None:
        """Refuse (FineTuneError), before anything is paid for, a job its model's limits refuse."""
        limits = await self.model_limits(spec.base_model)
        if problems := limit_problems(spec, limits):
            raise FineTuneError(f"Together AI cannot train this job: {'; '.join(problems)}")

    def check_agents(self, agents: Iterable[Any]) -> None:
        """Refuse a trained agent that speaks first prompted by its system message alone
        (:func:`first_turn_problem`)."""
        for agent in agents:
            mode = agent.agent_params.use_supervisor_message
            if problem := first_turn_problem(agent.protocol_handler, agent.agent_name, mode):
                raise problem

    # ---------------------------------------------------------------- jobs
    async def create_job(self, spec: FineTuneSpec) -> str:
        """Check the job and its file, upload the file (once per content), create the job."""
        await self.check_job(spec)
        spec = dataclasses.replace(spec, examples=together_lines(spec))
        check_lines(spec)
        file_id = await self._upload(spec_to_jsonl(spec))
        limits = self._limits[spec.base_model]
        job = await self._call(
            "the job",
            lambda c: c.fine_tuning.create(
                training_file=file_id, model_limits=limits, **job_request(spec)
            ),
        )
        return str(job.id)

    async def _upload(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        if digest in self.uploaded:
            return self.uploaded[digest]
        from together.lib import check_file

        with tempfile.TemporaryDirectory(prefix="nip-together-") as folder:
            path = Path(folder) / f"nip-{digest[:16]}.jsonl"
            path.write_bytes(data)
            report = check_file(path, purpose="fine-tune")
            if not report["is_check_passed"]:
                raise FineTuneError(
                    f"the together SDK's file check refused the training file: "
                    f"{report['message']}; nothing was uploaded"
                )
            upload = await self._call(
                "the training file's upload",
                lambda c: c.files.upload(path, purpose="fine-tune", check=False),
            )
        self._remember(digest, str(upload.id))
        return self.uploaded[digest]

    async def get_job(self, job_id: str) -> FineTuneJob:
        if not job_id:
            return FineTuneJob(id=job_id, status="not_found")
        job = await self._call(
            f"job {job_id}", lambda c: c.fine_tuning.retrieve(job_id), missing_ok=True
        )
        if job is None:
            return FineTuneJob(id=job_id, status="not_found")
        status = STATUS_MAP.get(str(job.status))
        if status is None:
            raise FineTuneError(
                f"Together AI reports job {job_id} as {job.status!r}, a status nip does not "
                f"know (it knows {', '.join(STATUS_MAP)}); the run stopped rather than wait "
                "on it: see the job in Together's dashboard, then `nip resume`"
            )
        if status in TERMINAL_STATUSES:
            self._ended.setdefault(job_id, None)
        error = loss = None
        if status == "failed":
            error = await self._error(job_id, job)
        if status == "succeeded":
            losses = [m["train/loss"] for m in await self._metrics(job_id) if "train/loss" in m]
            loss = float(losses[-1]) if losses else None
        return FineTuneJob(
            id=job_id,
            status=status,
            fine_tuned_model=job.x_model_output_name if status == "succeeded" else None,
            error=error,
            trained_tokens=job.token_count,
            training_loss=loss,
        )

    async def _error(self, job_id: str, job: Any) -> str:
        events = [*(job.events or []), *await self._raw_events(job_id)]
        errors = [
            str(e.message)
            for e in events
            if _lower(e.type) in FAILURE_EVENTS or _lower(e.level) == "error"
        ]
        return errors[-1] if errors else f"the job ended with status {str(job.status)!r}"

    async def _raw_events(self, job_id: str) -> list[Any]:
        page = await self._call(
            f"the events of job {job_id}", lambda c: c.fine_tuning.list_events(job_id)
        )
        return list(page.data or [])

    async def _metrics(self, job_id: str) -> list[dict[str, float]]:
        page = await self._call(
            f"the metrics of job {job_id}", lambda c: c.fine_tuning.list_metrics(job_id)
        )
        return list(page.metrics or [])

    async def cancel_job(self, job_id: str) -> None:
        await self._call(f"cancelling job {job_id}", lambda c: c.fine_tuning.cancel(job_id))

    async def list_events(self, job_id: str) -> list[FineTuneEvent]:
        """The job's events and its loss at each logged step, oldest first (kept once ended)."""
        if not job_id:
            return []
        if (kept := self._ended.get(job_id)) is not None:
            return kept
        events = [
            FineTuneEvent(
                created_at=_timestamp(e.created_at),
                level=_lower(e.level) or "info",
                message=str(e.message or ""),
                data={
                    "type": _lower(e.type),
                    **{k: getattr(e, k) for k in ("step", "total_steps") if getattr(e, k, None)},
                },
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
        events.sort(key=lambda e: e.created_at)
        if job_id in self._ended:
            self._ended[job_id] = events
        return events

    async def end_run(self) -> None:
        """Delete the training files the run uploaded (this process or an earlier one) and
        close the clients."""
        for digest, file_id in {**self._recorded(), **self.uploaded}.items():
            await self._call(
                f"deleting file {file_id}", lambda c, i=file_id: c.files.delete(i), missing_ok=True
            )
            self._remember(digest, None)
        for loop, client in self._clients.values():
            if loop is asyncio.get_running_loop():
                await client.close()
        self._clients = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_api_key": None, "_clients": {}}

    def __repr__(self) -> str:
        return f"TogetherFineTuneBackend(base_url={self.base_url!r})"


def _lower(value: Any) -> str:
    """An SDK enum's or string's value, lower-cased (``JOB_ERROR``, ``Error``)."""
    return str(getattr(value, "value", value) or "").lower()


def _timestamp(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return time.time()


PROVIDER = Provider(
    "TogetherAI",
    PROVIDER_FACTS["TogetherAI"],
    endpoint_key=lambda params: "together",
    chat=_chat,
    fine_tune=lambda params, settings, chat: TogetherFineTuneBackend.from_environment(
        settings.run_dir
    ),
    job_settings=job_request,
    prices=PRICES,
)
