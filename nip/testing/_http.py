"""A lean HTTP/1.1 server on plain asyncio, for the test server's hot path.

uvicorn with its pure-Python ``h11`` parser and FastAPI cost about 1 ms of CPU per chat
request; this server a fifth of that (most of what is left is the dummy model's answer), so
a benchmark measures the client, not the server. It speaks just enough HTTP/1.1 for API
clients: keep-alive, ``Content-Length`` and chunked request bodies, ``Expect:
100-continue``, ``Connection: close``. Requests on one connection are answered in order.

It has the small part of ``uvicorn.Server``'s interface that :func:`nip.testing.server.serve`
uses (``serve(sockets)``, ``started``, ``should_exit``, ``force_exit``), so either can run a
server thread.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus

from nip.backends._http_chunks import dechunk, parse_head
from nip.errors import NipError
from nip.testing._chat import Reply, WaitForDisconnect, error_reply

#: ``handler(method, path, headers, body, wait_for_disconnect) -> Reply``.
Handler = Callable[[str, str, Mapping[str, str], bytes, WaitForDisconnect], Awaitable[Reply]]

_MAX_HEAD = 64 * 1024
_MAX_BODY = 64 * 1024 * 1024


class _BadRequest(NipError):
    pass


class _Connection(asyncio.Protocol):
    """One client connection: parses requests and writes their replies in order."""

    def __init__(self, server: LeanHTTPServer):
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._queue: deque[tuple[str, str, dict[str, str], bytes]] = deque()
        self._task: asyncio.Task | None = None
        self._closing = False
        self._continued = False  # "100 Continue" sent for the request being read

    # ------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._queue.clear()
        if self._task is not None:
            self._task.cancel()  # nobody waits for the answer: an overloaded server stops early

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        try:
            while not self._closing and self._parse_one():
                pass
        except _BadRequest as error:
            self._send(error_reply(400, f"bad request: {error}"), close=True)
            return
        if self._task is None and self._queue:
            self._task = asyncio.get_running_loop().create_task(self._serve_queue())

    # ------------------------------------------------------------------- parsing
    def _parse_one(self) -> bool:
        """Move one complete request from the buffer to the queue; False if incomplete."""
        buffer = self._buffer
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > _MAX_HEAD:
                raise _BadRequest("request head too large")
            return False
        request_line, headers = parse_head(bytes(buffer[:end]))
        try:
            method, target, _version = request_line.split(" ", 2)
        except ValueError:
            raise _BadRequest(f"request line {request_line[:80]!r}") from None
        start = end + 4
        if "chunked" in headers.get("transfer-encoding", "").lower():
            try:
                parsed = dechunk(buffer, start, _MAX_BODY)
            except ValueError as error:
                raise _BadRequest(str(error)) from None
            if parsed is None:
                self._continue_if_asked(headers)
                return False
            body, consumed = parsed
        else:
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                raise _BadRequest("content-length is not a number") from None
            if not 0 <= length <= _MAX_BODY:
                raise _BadRequest(f"content-length {length}")
            if len(buffer) - start < length:
                self._continue_if_asked(headers)
                return False
            body, consumed = bytes(buffer[start : start + length]), start + length
        del buffer[:consumed]
        self._continued = False
        self._queue.append((method, target, headers, body))
        return True

    def _continue_if_asked(self, headers: dict[str, str]) -> None:
        if self._continued or headers.get("expect", "").lower() != "100-continue":
            return
        if self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self._continued = True

    # ------------------------------------------------------------------- serving
    async def _serve_queue(self) -> None:
        try:
            while self._queue and not self._closing:
                method, target, headers, body = self._queue.popleft()
                reply = await self._server.handler(
                    method, target, headers, body, self._wait_for_disconnect
                )
                close = headers.get("connection", "").lower() == "close"
                self._send(reply, close=close or reply.drop)
        except Exception as error:  # a bug in a handler must not kill the server silently
            self._send(error_reply(500, f"test server error: {error!r}"), close=True)
        finally:
            self._task = None

    @staticmethod
    async def _wait_for_disconnect(timeout_s: float) -> None:
        await asyncio.sleep(timeout_s)  # a disconnect cancels the whole request

    def _send(self, reply: Reply, *, close: bool) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        length = 4096 if reply.drop else len(reply.body)
        head = [f"HTTP/1.1 {reply.status} {_reason(reply.status)}"]
        head.append(f"content-type: {reply.content_type}")
        head.append(f"content-length: {length}")
        head += [f"{name}: {value}" for name, value in reply.headers]
        if close:
            head.append("connection: close")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        transport.write(data if reply.drop else data + reply.body)
        if close:
            self._closing = True
            transport.close()

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._transport is not None:
            self._transport.close()


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


class LeanHTTPServer:
    """Serves ``handler`` on given sockets until ``should_exit`` is set.

    Args:
        handler: Produces the reply of each request.
        graceful_shutdown_s: On exit, requests still running after this are cancelled.

    A request whose client disconnects is cancelled (its answer would go nowhere).
    """

    def __init__(self, handler: Handler, *, graceful_shutdown_s: float = 1.0):
        self.handler = handler
        self.graceful_shutdown_s = graceful_shutdown_s
        self.connections: set[_Connection] = set()
        self.started = False
        self.should_exit = False
        self.force_exit = False

    async def serve(self, sockets: list) -> None:
        """Accept connections on ``sockets`` until asked to exit, then close them all."""
        loop = asyncio.get_running_loop()
        servers = [
            await loop.create_server(lambda: _Connection(self), sock=sock, backlog=4096)
            for sock in sockets
        ]
        self.started = True
        while not self.should_exit:
            await asyncio.sleep(0.05)  # the flag is set from another thread
        for server in servers:
            server.close()
        deadline = loop.time() + self.graceful_shutdown_s
        while self._busy() and loop.time() < deadline and not self.force_exit:
            await asyncio.sleep(0.02)
        for connection in list(self.connections):
            connection.cancel()
        for server in servers:
            await server.wait_closed()

    def _busy(self) -> bool:
        return any(c._task is not None for c in self.connections)
