"""Posting chat requests through the OpenAI SDK: HTTPS, proxies, and every provider quirk.

The SDK's own retries are off (nip's are the only ones) and its typed response models are
bypassed: ``client.post`` sends the payload dict as is and returns the raw response, which
:func:`nip.backends._retry.parse_chat_body` reads (``chat.completions.create`` re-walks every
message, about 0.7 ms a request).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nip.backends._retry import error_for_sdk_exception

if TYPE_CHECKING:
    import openai

#: Connections per HTTP client. httpcore's pool scans every pooled connection, with a
#: syscall or two each, for every request, so one pool of 1,000 connections costs O(N^2) CPU;
#: above this many requests in flight the transport spreads them over several smaller pools.
POOL_SIZE = 8


@dataclass
class _Pool:
    """One SDK client (one connection pool) and the requests it is serving now."""

    client: openai.AsyncOpenAI
    in_flight: int = 0


class SdkTransport:
    """Posts chat requests with ``openai.AsyncOpenAI`` clients; belongs to one event loop.

    Args:
        make_client: Builds one SDK client with a pool of ``POOL_SIZE`` connections.
    """

    def __init__(self, make_client: Callable[[], openai.AsyncOpenAI]):
        self._make_client = make_client
        self._pools: list[_Pool] = []

    async def post_chat(
        self, payload: dict[str, Any], redact: Callable[[str], str]
    ) -> tuple[bytes, Mapping[str, str]]:
        """POST ``payload`` to ``/chat/completions``; the body and headers of a 2xx.

        Raises:
            RetryableError: Time-out, connection failure or a retryable status.
            GenerationError: Any other status (see :func:`error_for_sdk_exception`).
        """
        import openai

        pool = min(self._pools, key=lambda p: p.in_flight, default=None)
        if pool is None or pool.in_flight >= POOL_SIZE:
            pool = _Pool(self._make_client())
            self._pools.append(pool)
        pool.in_flight += 1
        try:
            raw = await pool.client.post(
                "/chat/completions", cast_to=sdk_httpx_module().Response, body=payload
            )
        # Not chained: the SDK error's request object carries the key in a header.
        except openai.APIError as error:
            raise error_for_sdk_exception(error, redact) from None
        finally:
            pool.in_flight -= 1
        return raw.content, raw.headers

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.client.close()
        self._pools = []


def make_sdk_client(
    base_url: str,
    api_key: str,
    timeout_s: float,
    headers: Mapping[str, str],
    ssl_context: Any,
) -> openai.AsyncOpenAI:
    """An SDK client with its retries off and a pool of ``POOL_SIZE`` connections."""
    import openai

    httpx_flavour = sdk_httpx_module()
    http_client = openai.DefaultAsyncHttpxClient(
        verify=ssl_context,
        limits=httpx_flavour.Limits(max_connections=POOL_SIZE, max_keepalive_connections=POOL_SIZE),
    )
    return openai.AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        timeout=timeout_s,
        max_retries=0,  # ours are the only retries
        default_headers=dict(headers) or None,
        http_client=http_client,
    )


@functools.cache
def sdk_httpx_module() -> Any:
    """The httpx package the installed OpenAI SDK is built on (``httpx2`` from SDK 3)."""
    import openai

    base = next(c for c in openai.DefaultAsyncHttpxClient.__mro__ if c.__name__ == "AsyncClient")
    return sys.modules[base.__module__.split(".")[0]]
