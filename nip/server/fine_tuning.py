"""OpenAI-compatible ``/v1/files`` and ``/v1/fine_tuning/jobs`` over any fine-tune backend.

The same group code that talks to OpenAI talks to this server by changing the base URL.
Malformed JSONL, unknown models and bad hyper-parameters are refused with a 4xx naming the
problem before anything is queued. Jobs wait in a queue and run ``max_concurrent`` at a time
(one by default: one GPU); the queue picks up where it was after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from nip.jobs import FineTuneBackend, FineTuneSpec
from nip.server.store import JobRow, ServerStore

_SFT_HINT = 'each line must be {"messages": [{"role": ..., "content": ...}, ...]}'
_DPO_HINT = (
    'each line must be {"input": {"messages": [...]}, "preferred_output": [...], '
    '"non_preferred_output": [...]}'
)


class RequestError(ValueError):
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


def parse_training_file(content: bytes, method: str) -> list[dict[str, Any]]:
    """Check a JSONL training file for ``method`` and return its lines.

    Raises:
        RequestError: The file is not UTF-8 JSONL of the method's format (names the line).
    """
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
        if method == "supervised":
            if "messages" not in row:
                raise RequestError(f"training file line {number}: {_SFT_HINT}")
            _check_messages(row["messages"], number, "messages")
            if row["messages"][-1]["role"] != "assistant":
                raise RequestError(
                    f"training file line {number}: the last message must be the assistant's"
                )
        else:
            if not {"input", "preferred_output", "non_preferred_output"} <= set(row):
                raise RequestError(f"training file line {number}: {_DPO_HINT}")
            _check_messages((row["input"] or {}).get("messages"), number, "input.messages")
            _check_messages(row["preferred_output"], number, "preferred_output")
            _check_messages(row["non_preferred_output"], number, "non_preferred_output")
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
        num_epochs=hyper.get("n_epochs") or 1,
        learning_rate=job.extra.get("learning_rate") or 1e-4,
        batch_size=hyper.get("batch_size") or 2,
        dpo_beta=hyper.get("beta"),
        use_lora=lora.get("use_lora", True),
        lora_rank=lora.get("rank", 8),
        lora_alpha=float(lora.get("alpha", 8.0)),
        lora_dropout=lora.get("dropout", 0.05),
        previous_adapter=lora.get("previous_adapter"),
        stack_lora_adapters=lora.get("stack", False),
        seed=job.seed or 0,
    )


def validate_job_request(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check a job-creation body; returns (method, extra).

    Raises:
        RequestError: A field is missing or out of range.
    """
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
        _number(lora.get("rank"), "lora.rank", low=1, high=1024, integer=True)
        _number(lora.get("alpha"), "lora.alpha", low=0.0)
        _number(lora.get("dropout"), "lora.dropout", low=0.0, high=0.99)
        extra["lora"] = lora
    if body.get("learning_rate") is not None:
        extra["learning_rate"] = _number(body["learning_rate"], "learning_rate", low=1e-12)
    return {"type": kind, kind: {"hyperparameters": hyper}}, extra


class FineTuneQueue:
    """Runs queued jobs on a :class:`FineTuneBackend`, ``max_concurrent`` at a time.

    Args:
        store: Where jobs live.
        backend: What trains.
        max_concurrent: Jobs running at once (1: one GPU).
        poll_interval_s: How often running jobs are polled.
        on_succeeded: Called with each job that succeeds (e.g. to load its adapter into vLLM).
    """

    def __init__(
        self,
        store: ServerStore,
        backend: FineTuneBackend,
        *,
        max_concurrent: int = 1,
        poll_interval_s: float = 0.5,
        on_succeeded: Callable[[JobRow], Awaitable[None]] | None = None,
    ):
        self.store = store
        self.backend = backend
        self.max_concurrent = max_concurrent
        self.poll_interval_s = poll_interval_s
        self.on_succeeded = on_succeeded
        self._wake = asyncio.Event()
        self._running: dict[str, asyncio.Task] = {}

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Serve the queue until cancelled (resuming jobs that were running)."""
        for job in self.store.list_jobs("running"):
            self._running[job.id] = asyncio.create_task(self._monitor(job.id))
        try:
            while True:
                self._running = {k: t for k, t in self._running.items() if not t.done()}
                for job in self.store.list_jobs("queued"):
                    if len(self._running) >= self.max_concurrent:
                        break
                    self._running[job.id] = asyncio.create_task(self._start(job))
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_interval_s)
        finally:
            for task in self._running.values():
                task.cancel()

    async def _start(self, job: JobRow) -> None:
        self.store.update_job(job.id, status="running")
        self.store.add_event(job.id, "info", "Training started.")
        try:
            content = self.store.file_content(job.training_file) or b""
            spec = build_spec(job, parse_training_file(content, job.method["type"]))
            backend_id = await self.backend.create_job(spec)
        except Exception as error:
            self._fail(job.id, f"{type(error).__name__}: {error}")
            return
        self.store.update_job(job.id, backend_job_id=backend_id)
        await self._monitor(job.id)

    async def _monitor(self, job_id: str) -> None:
        while True:
            row = self.store.get_job(job_id)
            if row is None or row.status != "running":
                return
            if row.backend_job_id is None:  # the server stopped before training began
                self.store.update_job(job_id, status="queued")
                self.wake()
                return
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
                if self.on_succeeded is not None:
                    await self.on_succeeded(self.store.get_job(job_id))  # type: ignore[arg-type]
                self.wake()
                return
            if state.status in ("failed", "not_found", "cancelled"):
                self._fail(job_id, state.error or f"the training job ended as {state.status}")
                return
            await asyncio.sleep(self.poll_interval_s)

    def _fail(self, job_id: str, error: str) -> None:
        self.store.update_job(job_id, status="failed", error=error)
        self.store.add_event(job_id, "error", f"Job failed: {error}")
        self.wake()

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
