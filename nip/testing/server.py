"""A local OpenAI-compatible chat server for tests, benchmarks and tutorials: completions
from any :class:`~nip.backends.ChatBackend` (the dummy by default), with simulated latency and
injected faults (:class:`~nip.testing.faults.FaultPlan`), FastAPI on uvicorn in a background
thread (:func:`serve`) or its own process.

Examples::

    with serve(create_app(latency_s=0.2)) as server:
        backend = OpenAIBackend(OpenAIBackendConfig(base_url=server.base_url))

    python -m nip.testing.server --latency 0.2 --port 8123 --fault-rate 0.1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import html
import logging
import socket
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nip.backends._types import ChatBackend
from nip.testing._chat import ChatState, Reply, ServerStats, respond
from nip.testing.faults import TRANSIENT_FAULTS, FaultPlan

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["RunningServer", "ServerStats", "create_app", "serve"]

_DROP_MESSAGE = "ASGI callable returned without completing response."


def create_app(
    backend: ChatBackend | None = None,
    *,
    latency_s: float = 0.0,
    faults: FaultPlan | None = None,
    model_names: Sequence[str] | None = None,
    api_key: str | None = None,
    ignore_n: bool = False,
    fine_tuning_closed: bool = False,
) -> FastAPI:
    """The FastAPI app of an OpenAI-compatible chat server (routes: :mod:`nip.testing._chat`).

    Args:
        backend: Produces the completions (default: ``DummyBackend()``).
        latency_s: Added to every chat request (``asyncio.sleep``; requests overlap).
        faults: Which requests fail, and how (default: none).
        model_names: The models served (others: 404); None serves any.
        api_key: Required as a bearer token; a 401 repeats the key sent, unmasked, so tests
            can check that clients keep it out of their errors.
        ignore_n: One choice whatever ``n``, as OpenRouter answers.
        fine_tuning_closed: Accept training files, refuse every job with HTTP 403.
    """
    from fastapi import FastAPI

    if backend is None:
        from nip.backends.dummy import DummyBackend

        backend = DummyBackend()
    names = tuple(model_names) if model_names is not None else None
    app = FastAPI(title="nip test server", docs_url=None, redoc_url=None)
    app.state.nip = ChatState(
        backend, latency_s, faults, names, api_key, ignore_n, fine_tuning_closed
    )

    async def route(request: Any) -> Any:  # a plain Starlette endpoint: no injection
        async def wait_for_disconnect(timeout_s: float) -> None:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if await request.is_disconnected():
                    raise _ClientGone  # its answer would go nowhere: stop, uncounted
                await asyncio.sleep(0.05)

        headers = {k.lower(): v for k, v in request.headers.items()}
        body = await request.body()
        path = request.url.path
        try:
            reply = await respond(
                app.state.nip, request.method, path, headers, body, wait_for_disconnect
            )
        except _ClientGone:
            return _fastapi_response(Reply(499))
        return _fastapi_response(reply)

    # Every path: respond() routes, and answers 404/405 as an OpenAI-style error.
    app.add_route("/{path:path}", route, methods=["GET", "POST"], include_in_schema=False)
    return app


class _ClientGone(Exception):
    """The client hung up while its request was held."""


def _fastapi_response(reply: Reply) -> Any:
    from fastapi.responses import Response

    if not reply.drop:
        headers = dict(reply.headers)
        return Response(reply.body, reply.status, headers, media_type=reply.content_type)

    class DroppedConnection(Response):
        """Sends the status line and headers, then returns: uvicorn closes the connection."""

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            headers = [(b"content-type", b"application/json"), (b"content-length", b"4096")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})

    return DroppedConnection()


# ------------------------------------------------------------------------- running it
def _not_a_drop(record: logging.LogRecord) -> bool:
    """Hides uvicorn's error line for the connections the ``drop`` fault closes on purpose."""
    return record.msg != _DROP_MESSAGE


class RunningServer:
    """A test server running in a background thread (see :func:`serve`); ``port`` is the real
    one, also when 0 was asked for."""

    def __init__(self, app: Any, host: str, port: int, server: Any, thread: threading.Thread):
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

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving and join the thread: gracefully, then forcibly after ``timeout_s``
        (TimeoutError if it still runs)."""
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
    app: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    graceful_shutdown_s: float = 1.0,
    startup_timeout_s: float = 10.0,
) -> RunningServer:
    """Serve ``app`` (any ASGI app) with uvicorn in a background thread with its own event
    loop; port 0 picks a free one. Stop it with ``.stop()`` or use it as a context manager."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP (not 0): asyncio only sets TCP_NODELAY on sockets that say they are TCP;
    # without it every keep-alive response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    logging.getLogger("uvicorn.error").addFilter(_not_a_drop)  # adding it again: a no-op
    config = uvicorn.Config(
        app,
        log_config=None,  # leave the host process's logging alone
        access_log=False,
        backlog=4096,
        limit_concurrency=None,
        timeout_graceful_shutdown=graceful_shutdown_s,  # type: ignore[arg-type]
        # Idle connections stay open: a retry on one uvicorn closes after 5 s would race.
        timeout_keep_alive=300,
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
    """Command line: ``python -m nip.testing.server [--latency S] [--port P] [--fault-rate R]``
    (``--help`` lists the rest)."""
    parser = argparse.ArgumentParser(description="Run nip's OpenAI-compatible test server.")
    add = parser.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=8123, help="0 picks a free port")
    add("--latency", type=float, default=0.0, help="seconds added per request")
    add("--fault-rate", type=float, default=0.0, help="share of failing requests")
    add(
        "--fault-kinds",
        default=",".join(TRANSIENT_FAULTS),
        help="comma-separated kinds the fault rate is spread over (see nip.testing.faults)",
    )
    add("--retry-after", type=float, default=1.0, help="Retry-After of a 429")
    add("--timeout-hold", type=float, default=30.0, help="longest a timeout fault holds a request")
    add("--seed", type=int, default=0, help="seed of the fault draws")
    add("--model", action="append", help="serve only these model names")
    add("--decide-on-turn", type=int, help="the dummy verifier decides on exactly this turn")
    args = parser.parse_args(argv)
    faults = None
    if args.fault_rate > 0:
        faults = FaultPlan.random(
            args.fault_rate,
            tuple(args.fault_kinds.split(",")),
            seed=args.seed,
            retry_after_s=args.retry_after,
            timeout_hold_s=args.timeout_hold,
        )
    from nip.backends.dummy import DummyBackend, DummyPolicy

    backend = DummyBackend(DummyPolicy(decide_on_turn=args.decide_on_turn))
    app = create_app(backend, latency_s=args.latency, faults=faults, model_names=args.model)
    running = serve(app, args.host, args.port)
    print(f"nip test server listening on {running.base_url}", flush=True)
    with running, contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: stop it
        while running.running:  # until it stops (join with a timeout: Ctrl-C gets through)
            running._thread.join(0.5)


if __name__ == "__main__":
    main()
