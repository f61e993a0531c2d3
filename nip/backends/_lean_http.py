"""A lean HTTP/1.1 client on plain asyncio: JSON POSTs over pooled keep-alive connections.

The OpenAI SDK's stack (httpx, httpcore, anyio, h11) costs 1.5-2 ms of CPU per request; at
hundreds of requests in flight on one core that, not the server, bounds a batch. This
client costs about 0.15 ms, the kernel's send and receive included (``bench/README.md``).
It serves plain ``http://`` endpoints with no proxy in between (vLLM, nip's own servers,
the test server); HTTPS, proxies and everything else go through the SDK
(:mod:`nip.backends._sdk_transport`).

It speaks what such servers answer: ``Content-Length`` or chunked bodies, or a body that
ends when the server closes; keep-alive unless ``Connection: close``. It asks for no
compression.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from nip.backends._http_chunks import dechunk, parse_head
from nip.backends._retry import RetryableError, error_for_status, parse_retry_after

#: Status, headers (lower-case names) and body of a response.
Response = tuple[int, dict[str, str], bytes]


def lean_client_can_serve(base_url: str) -> bool:
    """Whether ``base_url`` is plain HTTP reached directly (no proxy from the environment)."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    proxies = urllib.request.getproxies()
    return "http" not in proxies or bool(urllib.request.proxy_bypass(parts.hostname))


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request on it at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[Response] | None = None
        self.closed = False
        self.keep_alive = True
        self.used = False  # has answered a request before (so it may have gone stale)
        self.got_bytes = False  # something came back for the request in flight

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.got_bytes = True
        if self.waiter is not None and not self.waiter.done():
            try:
                response = self._parse(at_eof=False)
            except RetryableError as error:
                self.waiter.set_exception(error)
                self.close()
                return
            if response is not None:
                self.waiter.set_result(response)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        try:
            response = self._parse(at_eof=True)
        except RetryableError as error:
            waiter.set_exception(error)
            return
        if response is not None:
            waiter.set_result(response)
        else:
            detail = f" ({exc})" if exc else ""
            waiter.set_exception(
                RetryableError(f"the server closed the connection{detail}", cause="connection")
            )

    def _parse(self, *, at_eof: bool) -> Response | None:
        """The complete response in the buffer, or None while it is incomplete."""
        buffer = self.buffer
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        first, headers = parse_head(bytes(buffer[:end]))
        try:
            status = int(first.split(" ", 2)[1])
        except (IndexError, ValueError):
            raise RetryableError(f"bad status line {first[:80]!r}", cause="malformed") from None
        if 100 <= status < 200:  # an interim response (100 Continue): skip it
            del buffer[: end + 4]
            return self._parse(at_eof=at_eof)
        start = end + 4
        if "chunked" in headers.get("transfer-encoding", "").lower():
            try:
                parsed = dechunk(buffer, start)
            except ValueError as error:
                raise RetryableError(f"bad chunked body: {error}", cause="malformed") from None
            if parsed is None:
                if at_eof:
                    raise RetryableError("the chunked body was cut short", cause="connection")
                return None
            body, consumed = parsed
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise RetryableError("content-length is not a number", cause="malformed") from None
            if len(buffer) - start < length:
                if at_eof:
                    raise RetryableError(
                        f"the connection closed after {len(buffer) - start} of {length} body bytes",
                        cause="connection",
                    )
                return None
            body, consumed = bytes(buffer[start : start + length]), start + length
        elif at_eof:  # no length: the body ends with the connection
            body, consumed = bytes(buffer[start:]), len(buffer)
            self.keep_alive = False
        else:
            return None
        del buffer[:consumed]
        if headers.get("connection", "").lower() == "close":
            self.keep_alive = False
        return status, headers, body

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class LeanTransport:
    """Posts chat requests to one ``http://`` endpoint; belongs to one event loop.

    Args:
        base_url: The API root (``http://host:port/v1``).
        headers: Sent with every request (``Authorization``, extra headers).
        timeout_s: Time-out of one attempt, connecting included.
    """

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout_s: float):
        parts = urllib.parse.urlsplit(base_url)
        self._host = parts.hostname or "localhost"
        self._port = parts.port or 80
        self._prefix = parts.path.rstrip("/")
        host_header = parts.netloc.rpartition("@")[2]
        fixed = {"Host": host_header, "Accept": "application/json", "User-Agent": "nip"}
        fixed.update(headers)
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._timeout_s = timeout_s
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()

    async def post_chat(
        self, payload: dict[str, Any], redact: Callable[[str], str]
    ) -> tuple[bytes, Mapping[str, str]]:
        """POST ``payload`` to ``/chat/completions``; the body and headers of a 200.

        Raises:
            RetryableError: Time-out, connection failure or a retryable status.
            GenerationError: Any other status (typed as :func:`error_for_status` says).
        """
        body = json.dumps(payload).encode()  # all defaults: the C encoder, built once
        request = (
            f"POST {self._prefix}/chat/completions HTTP/1.1\r\n{self._head}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1") + body
        status, headers, content = await self._send(request)
        if status == 200:
            return content, headers
        raise error_for_status(
            status, redact(_error_message(content)), retry_after_s=parse_retry_after(headers)
        )

    async def _send(self, request: bytes) -> Response:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        while True:
            connection = await self._acquire(deadline)
            reused = connection.used
            try:
                response = await self._exchange(connection, request, deadline)
            except RetryableError as error:
                connection.close()
                self._all.discard(connection)
                # A keep-alive connection the server closed while idle fails before any
                # byte comes back: try again at once on another one, as httpcore does.
                stale = reused and not connection.got_bytes and error.cause == "connection"
                if stale and loop.time() < deadline:
                    continue
                raise
            except BaseException:  # cancelled: the connection is mid-request, drop it
                connection.close()
                self._all.discard(connection)
                raise
            connection.used = True
            if connection.keep_alive and not connection.closed:
                self._idle.append(connection)
            else:
                connection.close()
                self._all.discard(connection)
            return response

    async def _acquire(self, deadline: float) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection
            self._all.discard(connection)
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(_Connection, self._host, self._port),
                max(0.0, deadline - loop.time()),
            )
        except TimeoutError:
            raise RetryableError(
                "no connection before the request time-out", cause="timeout"
            ) from None
        except OSError as error:
            message = f"cannot connect to {self._host}:{self._port}: {error}"
            raise RetryableError(message, cause="connection") from None
        self._all.add(connection)
        return connection

    async def _exchange(self, connection: _Connection, request: bytes, deadline: float) -> Response:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Response] = loop.create_future()
        connection.waiter = waiter
        connection.got_bytes = False
        connection.buffer.clear()
        assert connection.transport is not None
        connection.transport.write(request)
        timer = loop.call_at(deadline, _expire, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            connection.waiter = None

    async def aclose(self) -> None:
        """Close every connection."""
        for connection in self._all:
            connection.close()
        self._all.clear()
        self._idle.clear()


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(
            RetryableError("no response before the request time-out", cause="timeout")
        )


def _error_message(content: bytes) -> str:
    """The message of an OpenAI-style error body, or the start of the body."""
    try:
        data = json.loads(content)
    except ValueError:
        return content[:200].decode("utf-8", "replace")
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict) and "message" in error:
        return str(error["message"])
    return str(error)[:200]
