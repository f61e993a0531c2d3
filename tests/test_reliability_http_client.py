"""The lean HTTP client reads every way a server may frame an answer, and survives the
server closing connections under it.

Each test runs a scripted raw-socket server on loopback (an ``asyncio`` server writing
exactly the bytes under test) and a real ``OpenAIBackend`` with ``http_client="lean"``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from nip.backends import GenerationRequest
from nip.backends.openai_compatible import OpenAIBackend, OpenAIBackendConfig
from nip.errors import BackendUnavailableError

pytestmark = pytest.mark.timeout(20)

REQUEST = GenerationRequest(model="m", messages=({"role": "user", "content": "hi"},))
BODY = json.dumps(
    {
        "model": "m",
        "choices": [{"index": 0, "message": {"content": "hello"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
).encode()

#: How the scripted server answers: (request number on this connection, writer) -> keep open?
Script = Callable[[int, asyncio.StreamWriter], bool]


async def _read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length"))
    await reader.readexactly(length)


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[[Script], Awaitable[str]]]:
    """Start raw servers answering by a script; yields a function giving a base URL."""
    servers: list[asyncio.Server] = []

    async def start(script: Script) -> str:
        async def handle(reader, writer):
            number = 0
            try:
                while True:
                    await _read_request(reader)
                    number += 1
                    keep = script(number, writer)
                    await writer.drain()
                    if not keep:
                        break
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


def lean(base_url: str) -> OpenAIBackend:
    config = OpenAIBackendConfig(
        base_url=base_url, http_client="lean", max_retries=1, initial_backoff_s=0.01
    )
    return OpenAIBackend(config)


def head(extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{extra}\r\n".encode()


async def test_a_chunked_answer_is_reassembled(scripted):
    def chunked(number, writer):
        halves = (BODY[:20], BODY[20:])
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(h), h) for h in halves)
        writer.write(head("transfer-encoding: chunked\r\n") + chunks + b"0\r\n\r\n")
        return True

    backend = lean(await scripted(chunked))

    result = await backend.generate(REQUEST)

    assert result.completions[0].text == "hello"
    await backend.aclose()


async def test_an_answer_without_a_length_ends_when_the_server_closes(scripted):
    def close_delimited(number, writer):
        writer.write(head() + BODY)
        return False

    backend = lean(await scripted(close_delimited))

    first, second = await backend.generate(REQUEST), await backend.generate(REQUEST)

    assert first.completions == second.completions
    assert backend.stats().retries == 0
    await backend.aclose()


async def test_an_interim_100_continue_is_skipped(scripted):
    def with_interim(number, writer):
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(head(f"content-length: {len(BODY)}\r\n") + BODY)
        return True

    backend = lean(await scripted(with_interim))

    assert (await backend.generate(REQUEST)).completions[0].text == "hello"
    await backend.aclose()


async def test_a_keep_alive_connection_the_server_dropped_is_replaced_without_a_retry(scripted):
    # The server answers the first request of each connection and silently closes it on
    # the second: what a server closing idle keep-alive connections looks like in a race.
    def once_per_connection(number, writer):
        if number == 1:
            writer.write(head(f"content-length: {len(BODY)}\r\n") + BODY)
            return True
        return False

    backend = lean(await scripted(once_per_connection))

    results = [await backend.generate(REQUEST) for _ in range(3)]

    assert all(r.completions[0].text == "hello" and r.attempts == 1 for r in results)
    assert backend.stats().retries == 0
    await backend.aclose()


async def test_a_body_cut_short_is_a_counted_connection_retry(scripted):
    answered = []

    def cut_then_whole(number, writer):
        answered.append(number)
        if len(answered) == 1:
            writer.write(head(f"content-length: {len(BODY)}\r\n") + BODY[:10])
            return False
        writer.write(head(f"content-length: {len(BODY)}\r\n") + BODY)
        return True

    backend = lean(await scripted(cut_then_whole))

    result = await backend.generate(REQUEST)

    assert result.attempts == 2
    assert backend.stats().retries_by_cause == {"connection": 1}
    await backend.aclose()


async def test_a_server_that_is_not_there_is_backend_unavailable(unused_tcp_port):
    backend = lean(f"http://127.0.0.1:{unused_tcp_port}/v1")

    with pytest.raises(BackendUnavailableError, match=r"2 attempts.*cannot connect"):
        await backend.generate(REQUEST)

    assert backend.stats().retries_by_cause == {"connection": 1}
    await backend.aclose()
