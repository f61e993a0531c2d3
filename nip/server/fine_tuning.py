"""OpenAI-compatible ``/v1/files`` and ``/v1/fine_tuning/jobs`` over any fine-tune backend.

The group code that talks to OpenAI talks to this server by its base URL. Malformed JSONL,
unknown models and bad hyper-parameters are refused with a 4xx before anything is queued; jobs
run ``max_concurrent`` at a time and the queue picks up where it was after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

from nip.errors import NipError
from nip.jobs import FineTuneBackend, FineTuneSpec
from nip.jobs.local_lora import slug
from nip.server.store import JobRow, ServerStore

log = logging.getLogger(__name__)

_SFT_HINT = 'each line must be {"messages": [{"role": ..., "content": ...}, ...]}'
_DPO_HINT = (
    'each line must be {"input": {"messages": [...]}, "preferred_output": [...], '
    '"non_preferred_output": [...]}'
)


class RequestError(NipError, ValueError):
    """A client error: becomes HTTP ``status`` with ``message``."""

    def __init__(self, message: str, status: int = 400, param: str | None = None):
        self.status = status
        self.param = param
        super().__init__(message)


def _check_messages(messages: Any, line: int, where: str) -> None:
    if not isinstance(messages, list) or not messages:
        raise RequestError(f"training file line {line}: {where} must be a non-empty list")
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise RequestError(f"training file line {line}: every message needs a string content")
        if message.get("role") not in ("system", "user", "assistant"):
            raise RequestError(
                f"training file line {line}: role {message.get('role')!r} is not "
                "system, user or assistant"
            )


_DPO_KEYS = frozenset({"input", "preferred_output", "non_preferred_output"})


def parse_training_file(content: bytes, method: str | None) -> list[dict[str, Any]]:
    """Check a JSONL training file for ``method`` (``"supervised"``, ``"dpo"``; None for an upload:
    its first line's format) and return its lines; a :class:`RequestError` names a bad line."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestError("the training file is not UTF-8 text") from None
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as error:
            raise RequestError(f"training file line {number} is not JSON: {error.msg}") from None
        if not isinstance(row, dict):
            raise RequestError(f"training file line {number} is not a JSON object")
        if method is None:  # an upload: any DPO key makes it DPO, else messages supervised
            method = "supervised" if "messages" in row else None
            method = "dpo" if row.keys() & _DPO_KEYS else method
        if method is None:
            raise RequestError(
                f"training file line {number}: for supervised fine-tuning {_SFT_HINT}; "
                f"for DPO {_DPO_HINT}"
            )
        if method == "supervised":
            if "messages" not in row:
                raise RequestError(f"training file line {number}: {_SFT_HINT}")
            _check_messages(row["messages"], number, "messages")
            if row["messages"][-1]["role"] != "assistant":
                raise RequestError(
                    f"training file line {number}: the last message must be the assistant's"
                )
        else:
            if not row.keys() >= _DPO_KEYS:
                raise RequestError(f"training file line {number}: {_DPO_HINT}")
            _check_messages((row["input"] or {}).get("messages"), number, "input.messages")
            for key in ("preferred_output", "non_preferred_output"):
                _check_messages(row[key], number, key)
        lines.append(row)
    if not lines:
        raise RequestError("the training file has no examples")
    return lines


def _number(value: Any, name: str, *, low: float, high: float | None = None, integer=False):
    if value in (None, "auto"):
        return None
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or value < low or (high is not None and value > high):
        bound = f" and at most {high}" if high is not None else ""
        kind = "an integer" if integer else "a number"
        raise RequestError(f"{name}={value!r}: must be {kind} of at least {low}{bound}", param=name)
    return value


def build_spec(job: JobRow, examples: list[dict[str, Any]]) -> FineTuneSpec:
    """The backend's job description from a stored request."""
    method = job.method["type"]
    hyper = job.method.get(method, {}).get("hyperparameters", {})
    lora = job.extra.get("lora", {})
    return FineTuneSpec(
        base_model=job.model,
        method=method,
        examples=tuple(examples),
        job_name=job.suffix,
        num_epochs=_number(hyper.get("n_epochs"), "n_epochs", low=1, integer=True) or 1,
        learning_rate=job.extra.get("learning_rate") or 1e-4,
        batch_size=_number(hyper.get("batch_size"), "batch_size", low=1, integer=True) or 2,
        dpo_beta=_number(hyper.get("beta"), "beta", low=0.0),  # OpenAI's "auto": our default
        use_lora=lora.get("use_lora", True),
        lora_rank=lora.get("rank", 8),
        lora_alpha=float(lora.get("alpha", 8.0)),
        lora_dropout=lora.get("dropout", 0.05),
        previous_adapter=lora.get("previous_adapter"),
        stack_lora_adapters=lora.get("stack", False),
        seed=job.seed or 0,
        quantization=lora.get("quantization") or "none",
    )


def validate_job_request(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check a job-creation body; returns (method, extra), or raises :class:`RequestError`."""
    for name in ("model", "training_file"):
        if not isinstance(body.get(name), str) or not body[name]:
            raise RequestError(f"{name} is required", param=name)
    method = body.get("method") or {"type": "supervised", "supervised": {}}
    kind = method.get("type")
    if kind not in ("supervised", "dpo"):
        raise RequestError(f"method.type={kind!r}: must be 'supervised' or 'dpo'", param="method")
    hyper = dict((method.get(kind) or {}).get("hyperparameters") or {})
    hyper.update(body.get("hyperparameters") or {})
    _number(hyper.get("n_epochs"), "n_epochs", low=1, high=100, integer=True)
    _number(hyper.get("batch_size"), "batch_size", low=1, high=4096, integer=True)
    if kind == "dpo":
        beta = _number(hyper.get("beta"), "beta", low=0.0, high=2.0)
        if beta is not None and beta <= 0:
            raise RequestError(f"beta={beta!r}: must be above 0", param="beta")
    extra: dict[str, Any] = {}
    lora = body.get("lora") or {}
    if lora:
        for key, low, high in (("rank", 1, 1024), ("alpha", 0.0, None), ("dropout", 0.0, 0.99)):
            _number(lora.get(key), f"lora.{key}", low=low, high=high, integer=key == "rank")
        if lora.get("quantization", "none") not in ("none", "bitsandbytes"):
            raise RequestError(
                f"lora.quantization={lora['quantization']!r}: must be 'none' or 'bitsandbytes'",
                param="lora.quantization",
            )
        if lora.get("use_lora", True) is not True:
            raise RequestError(
                "lora.use_lora must be true: this server trains LoRA adapters only",
                param="lora.use_lora",
            )
        extra["lora"] = lora
    if body.get("learning_rate") is not None:
        extra["learning_rate"] = _number(body["learning_rate"], "learning_rate", low=1e-12)
    return {"type": kind, kind: {"hyperparameters": hyper}}, extra


@dataclass(eq=False)
class FineTuneQueue:
    """Runs queued jobs from ``store`` on ``backend``, ``max_concurrent`` at a time (1: one GPU).

    Each job gets a fresh model name, its suffix (``verifier-it3``) with a number added when taken;
    a restarted server reuses it.

    Args:
        poll_interval_s: How often running jobs are polled.
        on_succeeded: Called with each job that succeeds, after ``after_training`` (e.g. to
            load its adapter into the engine).
        resolve_model: Maps a job's ``model`` to (base model, adapter to continue from); None
            trains the name as given.
        reserved_names: Names no job may take (the base model's).
        before_training / after_training: Called when the first job starts training and when
            the last one ends (to pause and resume inference).
    """

    store: ServerStore
    backend: FineTuneBackend
    _: KW_ONLY
    max_concurrent: int = 1
    poll_interval_s: float = 0.5
    on_succeeded: Callable[[JobRow], Awaitable[None]] | None = None
    resolve_model: Callable[[str], tuple[str, str | None]] | None = None
    reserved_names: Collection[str] = ()
    before_training: Callable[[], Awaitable[None]] | None = None
    after_training: Callable[[], Awaitable[None]] | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _running: dict[str, asyncio.Task] = field(default_factory=dict, init=False)
    _training_jobs: int = field(default=0, init=False)
    _hook_lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Serve the queue until cancelled (resuming jobs that were running)."""
        for job in self.store.list_jobs("running"):
            self._running[job.id] = asyncio.create_task(self._run(job.id, start=False))
        try:
            while True:
                self._running = {k: t for k, t in self._running.items() if not t.done()}
                for job in self.store.list_jobs("queued"):
                    if len(self._running) >= self.max_concurrent:
                        break
                    self.store.update_job(job.id, status="running")
                    self._running[job.id] = asyncio.create_task(self._run(job.id, start=True))
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_interval_s)
        finally:
            for task in self._running.values():
                task.cancel()

    async def _run(self, job_id: str, *, start: bool) -> None:
        async with self._training():
            row = await (self._start(job_id) if start else self._monitor(job_id))
        if row is not None and self.on_succeeded is not None:
            try:
                await self.on_succeeded(row)
            except Exception as error:
                message = f"The model could not be loaded for inference: {error}"
                self.store.add_event(job_id, "error", message)
        self.wake()

    @contextlib.asynccontextmanager
    async def _training(self):
        """Call the hooks when training begins and when the last training job ends."""
        self._training_jobs += 1
        try:
            if self._training_jobs == 1:
                await self._hook(self.before_training)
            else:
                async with self._hook_lock:  # let a pause in progress finish first
                    pass
            yield
        finally:
            self._training_jobs -= 1
            if self._training_jobs == 0:
                await self._hook(self.after_training)

    async def _hook(self, hook: Callable[[], Awaitable[None]] | None) -> None:
        if hook is None:
            return
        async with self._hook_lock:
            try:
                await hook()
            except Exception:
                log.exception("a training hook failed; training goes on")

    def _model_name(self, job: JobRow) -> str:
        """The job's fresh model name, chosen once and kept in the job's record."""
        if job.extra.get("name"):
            return job.extra["name"]
        base = slug(job.suffix or f"{job.model}-ft", 64, "model")
        taken = set(self.reserved_names)
        taken |= {j.extra.get("name") for j in self.store.list_jobs() if j.id != job.id}
        name, number = base, 1
        while name in taken:
            number += 1
            name = f"{base}-{number}"
        self.store.update_job(job.id, extra=json.dumps({**job.extra, "name": name}))
        return name

    async def _start(self, job_id: str) -> JobRow | None:
        job = self.store.get_job(job_id)
        if job is None or job.status != "running":
            return None
        self.store.add_event(job.id, "info", "Training started.")
        job.extra["started_at"] = time.time()  # its running time, the job's GPU time, from here
        self.store.update_job(job.id, extra=json.dumps(job.extra))
        try:
            content = self.store.file_content(job.training_file) or b""
            spec = build_spec(job, parse_training_file(content, job.method["type"]))
            spec = replace(spec, job_name=self._model_name(job))
            if self.resolve_model is not None:
                base, previous = self.resolve_model(job.model)
                spec = replace(spec, base_model=base, previous_adapter=previous)
            backend_id = await self.backend.create_job(spec)
        except Exception as error:
            self._fail(job.id, f"{type(error).__name__}: {error}")
            return None
        self.store.update_job(job.id, backend_job_id=backend_id)
        return await self._monitor(job.id)

    async def _monitor(self, job_id: str) -> JobRow | None:
        """Poll the job until it ends; returns its row if it succeeded."""
        while True:
            row = self.store.get_job(job_id)
            if row is None or row.status != "running":
                return None
            if row.backend_job_id is None:  # the server stopped before training began
                self.store.update_job(job_id, status="queued")
                return None
            state = await self.backend.get_job(row.backend_job_id)
            if state.status == "succeeded":
                self.store.update_job(
                    job_id,
                    status="succeeded",
                    fine_tuned_model=state.fine_tuned_model,
                    adapter_path=state.adapter_path,
                    trained_tokens=state.trained_tokens,
                )
                self.store.add_event(job_id, "info", f"Job succeeded: {state.fine_tuned_model}.")
                return self.store.get_job(job_id)
            if state.status in ("failed", "not_found", "cancelled"):
                self._fail(job_id, state.error or f"the training job ended as {state.status}")
                return None
            await asyncio.sleep(self.poll_interval_s)

    def _fail(self, job_id: str, error: str) -> None:
        self.store.update_job(job_id, status="failed", error=error)
        self.store.add_event(job_id, "error", f"Job failed: {error}")

    async def cancel(self, job_id: str) -> JobRow:
        row = self.store.get_job(job_id)
        if row is None:
            raise RequestError(f"no fine-tuning job {job_id}", status=404)
        if row.status in ("succeeded", "failed", "cancelled"):
            raise RequestError(f"job {job_id} has already {row.status}", status=409)
        if row.backend_job_id:
            await self.backend.cancel_job(row.backend_job_id)
        task = self._running.pop(job_id, None)
        if task is not None:
            task.cancel()
        self.store.update_job(job_id, status="cancelled")
        self.store.add_event(job_id, "info", "Job cancelled.")
        self.wake()
        return self.store.get_job(job_id)  # type: ignore[return-value]
