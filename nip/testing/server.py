"""A local OpenAI-compatible chat server for tests, benchmarks and tutorials.

The completions come from any :class:`~nip.backends.ChatBackend` (by default the offline
:class:`~nip.backends.DummyBackend`), so code that speaks HTTP to OpenAI, OpenRouter or vLLM can
be exercised for real, on loopback, with simulated latency and injected faults
(:class:`~nip.testing.faults.FaultPlan`).

Examples:
    In Python (a notebook or a test)::

        with serve(create_app(latency_s=0.2)) as server:
            backend = OpenAIBackend(OpenAIBackendConfig(base_url=server.base_url))
            ...

    From a shell::

        python -m nip.testing.server --latency 0.2 --port 8123 --fault-rate 0.1
"""

from __future__ import annotations

import argparse
import asyncio
import html
import logging
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from nip.backends._types import ChatBackend, ChatMessage, GenerationRequest, GenerationResult
from nip.errors import GenerationError, InsufficientCreditsError, ModelNotFoundError
from nip.testing.faults import (
    MALFORMED_BODY,
    FaultKind,
    FaultPlan,
    apply_to_completions,
    error_response,
)

_DROP_MESSAGE = "ASGI callable returned without completing response."


@dataclass
class ServerStats:
    """What the test server has seen since it started or was reset (``GET /stats``).

    Attributes:
        requests: Chat requests received (every ``POST /v1/chat/completions``).
        completed: Chat requests answered with completions.
        in_flight: Chat requests being handled now.
        max_in_flight: The most chat requests ever handled at once.
        faults: Injected faults, by kind.
    """

    requests: int = 0
    completed: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    faults: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><th>{k}</th><td>{html.escape(str(v))}</td></tr>" for k, v in asdict(self).items()
        )
        return f"<table><caption>ServerStats</caption>{rows}</table>"


@dataclass
class _State:
    """Everything one app needs at request time; lives on ``app.state.nip``."""

    backend: ChatBackend
    latency_s: float
    faults: FaultPlan | None
    model_names: tuple[str, ...] | None
    api_key: str | None
    stats: ServerStats = field(default_factory=ServerStats)

    def snapshot(self) -> ServerStats:
        return replace(self.stats, faults=dict(self.stats.faults))

    def reset(self) -> None:
        self.stats = ServerStats(in_flight=self.stats.in_flight, max_in_flight=self.stats.in_flight)


def create_app(
    backend: ChatBackend | None = None,
    *,
    latency_s: float = 0.0,
    faults: FaultPlan | None = None,
    model_names: Sequence[str] | None = None,
    api_key: str | None = None,
) -> FastAPI:
    """The FastAPI app of an OpenAI-compatible chat server.

    Routes: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /stats``,
    ``POST /stats/reset`` and ``GET /health``.

    Args:
        backend: Produces the completions (default: ``DummyBackend()``).
        latency_s: Added to every chat request (``asyncio.sleep``; requests overlap).
        faults: Which requests fail, and how (default: none).
        model_names: The models served; others get a 404 ``model_not_found``. None serves
            any model name (and lists the backend's name).
        api_key: If set, requests must send ``Authorization: Bearer <api_key>``; others get a
            401 whose message repeats the key they sent, unmasked, so tests can check that
            clients keep it out of their own errors.
    """
    if backend is None:
        from nip.backends.dummy import DummyBackend

        backend = DummyBackend()
    names = tuple(model_names) if model_names is not None else None
    app = FastAPI(title="nip test server", docs_url=None, redoc_url=None)
    app.state.nip = _State(backend, latency_s, faults, names, api_key)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        state: _State = request.app.state.nip
        stats = state.stats
        stats.requests += 1
        number = stats.requests
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            return await _chat(state, number, request)
        finally:
            state.stats.in_flight -= 1  # state.stats, not stats: a reset may have replaced it

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        state: _State = app.state.nip
        listed = state.model_names if state.model_names is not None else (state.backend.name,)
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "nip"} for m in listed]
        return {"object": "list", "data": data}

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return app.state.nip.snapshot().to_dict()

    @app.post("/stats/reset")
    async def reset_stats() -> dict[str, Any]:
        app.state.nip.reset()
        return app.state.nip.snapshot().to_dict()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


async def _chat(state: _State, number: int, request: Request) -> Response:
    """Handle chat request ``number``: check it, inject its fault, or answer it."""
    if state.api_key is not None:
        sent = request.headers.get("authorization", "")
        if sent != f"Bearer {state.api_key}":
            return _error(401, f"Incorrect API key provided: {sent.removeprefix('Bearer ')}")
    try:
        body = await request.json()
        generation_request = _generation_request(body)
    except (ValueError, KeyError, TypeError) as error:
        return _error(400, f"invalid request: {type(error).__name__}: {error}")
    if state.model_names is not None and generation_request.model not in state.model_names:
        message = f"The model `{generation_request.model}` does not exist"
        return _error(404, message, code="model_not_found")
    plan = state.faults
    fault = plan.fault_for(number) if plan is not None else None
    if plan is not None and fault is not None:
        state.stats.faults[fault] = state.stats.faults.get(fault, 0) + 1
        early = await _inject(fault, plan, request)
        if early is not None:
            return early
    if state.latency_s > 0:
        await asyncio.sleep(state.latency_s)
    try:
        result = await state.backend.generate(generation_request)
    except ModelNotFoundError as error:
        return _error(404, str(error), code="model_not_found")
    except InsufficientCreditsError as error:
        return _error(402, str(error))
    except GenerationError as error:
        return _error(500, f"backend failed: {error}")
    state.stats.completed += 1
    return JSONResponse(_completion_json(number, generation_request, result, fault))


async def _inject(fault: FaultKind, plan: FaultPlan, request: Request) -> Response | None:
    """The response of an injected fault, or None to carry on and answer normally."""
    error = error_response(fault, plan)
    if error is not None:
        status, body, headers = error
        return JSONResponse(body, status_code=status, headers=headers)
    if fault == "malformed":
        return Response(MALFORMED_BODY, media_type="application/json")
    if fault == "drop":
        return _DroppedConnection()
    if fault == "timeout":
        # Hold until the client gives up (then the answer goes nowhere) or the hold ends.
        deadline = time.monotonic() + plan.timeout_hold_s
        while time.monotonic() < deadline and not await request.is_disconnected():
            await asyncio.sleep(0.05)
    return None  # timeout (late), content_filter and length still produce completions


class _DroppedConnection(Response):
    """Sends the status line and headers, then returns: uvicorn closes the connection."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", b"4096")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})


def _generation_request(body: dict[str, Any]) -> GenerationRequest:
    messages: list[ChatMessage] = []
    for message in body["messages"]:
        content = message.get("content") or ""
        if isinstance(content, list):  # multi-part content: keep the text parts
            content = "".join(part.get("text", "") for part in content)
        entry: ChatMessage = {"role": message["role"], "content": str(content)}
        if message.get("name"):
            entry["name"] = str(message["name"])
        messages.append(entry)
    n = int(body.get("n") or 1)
    if not 1 <= n <= 128:
        raise ValueError(f"n={n} is outside 1..128")
    return GenerationRequest(
        model=str(body["model"]),
        messages=tuple(messages),
        max_tokens=body.get("max_completion_tokens", body.get("max_tokens")),
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        repetition_penalty=body.get("repetition_penalty"),
        n=n,
        seed=body.get("seed"),
    )


def _completion_json(
    number: int, request: GenerationRequest, result: GenerationResult, fault: FaultKind | None
) -> dict[str, Any]:
    completions = apply_to_completions(fault, list(result.completions))
    usage = result.usage
    return {
        "id": f"chatcmpl-nip-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": result.model or request.model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": c.text},
                "finish_reason": c.finish_reason,
                "logprobs": None,
            }
            for i, c in enumerate(completions)
        ],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
    }


def _error(status: int, message: str, *, code: str | None = None) -> JSONResponse:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    body = {"error": {"message": message, "type": kind, "code": code or status}}
    return JSONResponse(body, status_code=status)


# ------------------------------------------------------------------------- running it
class _QuietDroppedConnections(logging.Filter):
    """Hides uvicorn's error line for the connections the ``drop`` fault closes on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != _DROP_MESSAGE


_QUIET = _QuietDroppedConnections()


class RunningServer:
    """A test server running in a background thread (see :func:`serve`).

    Attributes:
        app: The served app.
        host / port: Where it listens (the real port, also when 0 was asked for).
    """

    def __init__(self, app: FastAPI, host: str, port: int, server: Any, thread: threading.Thread):
        self.app = app
        self.host = host
        self.port = port
        self._server = server
        self._thread = thread

    @property
    def url(self) -> str:
        """The server root, e.g. ``http://127.0.0.1:8123``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI API root to give a client: ``{url}/v1``."""
        return f"{self.url}/v1"

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stats(self) -> ServerStats:
        """The server's counters (the same as ``GET /stats``)."""
        return self.app.state.nip.snapshot()

    def wait(self) -> None:
        """Block until the server stops (used by the command line)."""
        while self._thread.is_alive():
            self._thread.join(0.5)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving and join the thread: gracefully, then forcibly after ``timeout_s``.

        Raises:
            TimeoutError: The thread still runs after the forced stop.
        """
        self._server.should_exit = True
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"the test server at {self.url} did not stop in {2 * timeout_s} s")

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RunningServer(url={self.url!r}, running={self.running})"

    def _repr_html_(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<b>nip test server</b> at <code>{html.escape(self.base_url)}</code> ({state})"


def serve(
    app: FastAPI,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    graceful_shutdown_s: float = 1.0,
    startup_timeout_s: float = 10.0,
) -> RunningServer:
    """Serve ``app`` over HTTP with uvicorn in a background thread with its own event loop.

    Args:
        app: The app (from :func:`create_app`).
        host: Interface to listen on (loopback by default).
        port: Port; 0 picks a free one (read it back from ``.port`` / ``.url``).
        graceful_shutdown_s: On stop, requests still running after this are cancelled.
        startup_timeout_s: Give up if the server has not started by then.

    Returns:
        The running server; stop it with ``.stop()`` or use it as a context manager.
    """
    import uvicorn

    logging.getLogger("uvicorn.error").addFilter(_QUIET)  # adding the same filter is a no-op
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP (not 0): asyncio only sets TCP_NODELAY on sockets that say they are TCP;
    # without it every keep-alive response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    config = uvicorn.Config(
        app,
        log_config=None,  # leave the host process's logging alone
        access_log=False,
        backlog=4096,
        limit_concurrency=None,
        timeout_graceful_shutdown=graceful_shutdown_s,  # type: ignore[arg-type]
        lifespan="auto",  # apps with a lifespan (the fine-tuning queue) need it
        ws="none",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[sock])),
        name="nip-test-server",
        daemon=True,
    )
    thread.start()
    running = RunningServer(app, host, sock.getsockname()[1], server, thread)
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(startup_timeout_s)
            sock.close()
            raise RuntimeError(f"the test server on {host}:{port} did not start")
        time.sleep(0.005)  # sync start-up, not a coroutine: the caller's loop is not running it
    return running


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: ``python -m nip.testing.server [--latency S] [--port P] [--fault-rate R]``."""
    parser = argparse.ArgumentParser(description="Run nip's OpenAI-compatible test server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8123, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added per request")
    parser.add_argument("--fault-rate", type=float, default=0.0, help="share of failing requests")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault draws")
    parser.add_argument("--model", action="append", help="serve only these model names")
    parser.add_argument(
        "--decide-on-turn",
        type=int,
        default=None,
        help="the dummy verifier decides on exactly this turn (fixed dialogue lengths)",
    )
    args = parser.parse_args(argv)
    faults = FaultPlan.random(args.fault_rate, seed=args.seed) if args.fault_rate > 0 else None
    from nip.backends.dummy import DummyBackend, DummyPolicy

    backend = DummyBackend(DummyPolicy(decide_on_turn=args.decide_on_turn))
    app = create_app(backend, latency_s=args.latency, faults=faults, model_names=args.model)
    running = serve(app, args.host, args.port)
    print(f"nip test server listening on {running.base_url}", flush=True)
    try:
        running.wait()
    except KeyboardInterrupt:
        pass
    finally:
        running.stop()


if __name__ == "__main__":
    main()
