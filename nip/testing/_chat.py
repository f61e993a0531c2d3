"""What the test server answers (:func:`respond`), apart from the web framework: ``POST
/v1/chat/completions``, ``GET /v1/models``, ``GET /stats``, ``POST /stats/reset``, ``GET
/health``; with ``fine_tuning_closed``, ``POST /v1/files`` and a 403 for every job.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from nip.backends._chat_wire import completion_body, request_from_body
from nip.backends._types import ChatBackend, Completion
from nip.errors import GenerationError, InsufficientCreditsError, ModelNotFoundError
from nip.testing.faults import ERROR_CODES, MALFORMED_BODY, FaultKind, FaultPlan
from nip.utils.html import fields_table

#: The refusal of a job creation with ``fine_tuning_closed`` (the wording is nip's).
FINE_TUNING_CLOSED_MESSAGE = (
    "Fine-tuning is no longer available to this organization: the self-serve fine-tuning "
    "platform is winding down."
)

#: Waits until the client disconnects or ``timeout_s`` passes, whichever comes first.
WaitForDisconnect = Callable[[float], Awaitable[None]]


@dataclass
class ServerStats:
    """What the test server has seen since it started or was reset (``GET /stats``): chat
    requests received, completed, in flight (and the most at once), faults by kind, jobs."""

    requests: int = 0
    completed: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    fine_tuning_jobs: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    _repr_html_ = fields_table


@dataclass
class ChatState:
    """Everything the server needs at request time (``app.state.nip``)."""

    backend: ChatBackend
    latency_s: float
    faults: FaultPlan | None
    model_names: tuple[str, ...] | None
    api_key: str | None
    ignore_n: bool = False
    fine_tuning_closed: bool = False
    stats: ServerStats = field(default_factory=ServerStats)

    def snapshot(self) -> ServerStats:
        return replace(self.stats, faults=dict(self.stats.faults))

    def reset(self) -> None:
        self.stats = ServerStats(in_flight=self.stats.in_flight, max_in_flight=self.stats.in_flight)


@dataclass(frozen=True)
class Reply:
    """An HTTP response to send; ``drop`` sends headers promising a body, then hangs up."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    drop: bool = False
    content_type: str = "application/json"


def json_reply(data: Any, status: int = 200, headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    return Reply(status, json.dumps(data, separators=(",", ":")).encode(), headers)


def error_reply(status: int, message: str, *, code: str | int | None = None) -> Reply:
    """An OpenAI-style error body."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return json_reply({"error": {"message": message, "type": kind, "code": code or status}}, status)


async def respond(
    state: ChatState,
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    wait_for_disconnect: WaitForDisconnect,
) -> Reply:
    """Route one request (header names lower-case) and produce its reply."""
    path = path.split("?", 1)[0].rstrip("/") or "/"
    route = (method, path)
    if route == ("POST", "/v1/chat/completions"):
        stats = state.stats
        stats.requests += 1
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            return await chat(state, stats.requests, headers, body, wait_for_disconnect)
        finally:
            state.stats.in_flight -= 1  # state.stats, not stats: a reset may have replaced it
    if route == ("GET", "/v1/models"):
        listed = state.model_names if state.model_names is not None else (state.backend.name,)
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "nip"} for m in listed]
        return json_reply({"object": "list", "data": data})
    if route == ("POST", "/stats/reset"):
        state.reset()
    if route in (("GET", "/stats"), ("POST", "/stats/reset")):
        return json_reply(state.snapshot().to_dict())
    if route == ("GET", "/health"):
        return json_reply({"status": "ok"})
    if state.fine_tuning_closed and route == ("POST", "/v1/files"):
        file = {"id": "file-0", "object": "file", "bytes": len(body), "created_at": 0}
        return json_reply(
            {**file, "filename": "train.jsonl", "purpose": "fine-tune", "status": "processed"}
        )
    if state.fine_tuning_closed and route == ("POST", "/v1/fine_tuning/jobs"):
        state.stats.fine_tuning_jobs += 1
        error = {"message": FINE_TUNING_CLOSED_MESSAGE, "type": "invalid_request_error"}
        return json_reply({"error": {**error, "param": None, "code": None}}, 403)
    if path in ("/v1/chat/completions", "/v1/models", "/stats", "/stats/reset", "/health"):
        return error_reply(405, f"method {method} not allowed on {path}")
    return error_reply(404, f"no route {path}")


async def chat(
    state: ChatState,
    number: int,
    headers: Mapping[str, str],
    body: bytes,
    wait_for_disconnect: WaitForDisconnect,
) -> Reply:
    """``POST /v1/chat/completions``, request ``number``: check it, inject its fault, or
    answer it."""
    if state.api_key is not None:
        sent = headers.get("authorization", "")
        if sent != f"Bearer {state.api_key}":
            # Repeats the key, unmasked (as OpenAI does): clients must keep it out of errors.
            return error_reply(401, f"Incorrect API key provided: {sent.removeprefix('Bearer ')}")
    try:
        generation_request = request_from_body(json.loads(body))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        return error_reply(400, f"invalid request: {type(error).__name__}: {error}")
    if state.model_names is not None and generation_request.model not in state.model_names:
        message = f"The model `{generation_request.model}` does not exist"
        return error_reply(404, message, code="model_not_found")
    plan = state.faults
    fault = plan.fault_for(number) if plan is not None else None
    if plan is not None and fault is not None:
        state.stats.faults[fault] = state.stats.faults.get(fault, 0) + 1
        early = await _inject(fault, plan, wait_for_disconnect)
        if early is not None:
            return early
    if state.latency_s > 0:
        await asyncio.sleep(state.latency_s)
    if state.ignore_n:  # one choice whatever n asked for, as OpenRouter answers
        generation_request = replace(generation_request, n=1)
    try:
        result = await state.backend.generate(generation_request)
    except ModelNotFoundError as error:
        return error_reply(404, str(error), code="model_not_found")
    except InsufficientCreditsError as error:
        return error_reply(402, str(error))
    except GenerationError as error:
        return error_reply(500, f"backend failed: {error}")
    state.stats.completed += 1
    completions = list(result.completions)
    if fault == "content_filter":  # no content
        completions = [Completion(text=None, finish_reason="content_filter") for _ in completions]
    if fault == "length":  # cut short
        cut = [(c.text or "").split() for c in completions]
        completions = [Completion(" ".join(w[: max(1, len(w) // 2)]), "length") for w in cut]
    model = result.model or generation_request.model
    return json_reply(completion_body(f"chatcmpl-nip-{number}", model, completions, result.usage))


async def _inject(
    fault: FaultKind, plan: FaultPlan, wait_for_disconnect: WaitForDisconnect
) -> Reply | None:
    """The reply of an injected fault, or None to carry on and answer normally."""
    if fault in ERROR_CODES and (fault != "timeout" or plan.in_body_errors):
        code, wait = ERROR_CODES[fault], plan.retry_after_s
        retry_after = str(int(wait)) if float(wait).is_integer() else f"{wait:g}"
        headers = (("retry-after", retry_after),) if fault == "rate_limit" else ()
        error = {"message": f"injected fault: {fault}", "code": code}
        if plan.in_body_errors:  # as OpenRouter reports errors: HTTP 200, an error object
            return json_reply({"error": {**error, "metadata": {}}}, 200, headers)
        kind = {429: "rate_limit_error", 402: "billing_error"}.get(code, "server_error")
        return json_reply({"error": {**error, "type": kind}}, code, headers)
    if fault == "malformed":
        return Reply(200, MALFORMED_BODY)
    if fault == "drop":
        return Reply(200, drop=True)
    if fault == "timeout":
        # Hold until the client gives up (then the answer goes nowhere) or the hold ends.
        await wait_for_disconnect(plan.timeout_hold_s)
    return None  # timeout (late), content_filter and length still produce completions
