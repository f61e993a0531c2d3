"""Which failures are retried, and the retry loop: transient ones (rate limits, 5xx,
time-outs, lost connections, malformed bodies) become :class:`RetryableError`, retried with
jittered exponential back-off (``asyncio.sleep``) and at least the server's ``Retry-After``;
everything else maps to a final :mod:`nip.errors` type.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from nip.backends._types import Completion, TokenUsage
from nip.errors import (
    AuthenticationError,
    BackendUnavailableError,
    GenerationError,
    InsufficientCreditsError,
    InvalidParameterError,
    ModelNotFoundError,
)

if TYPE_CHECKING:
    import openai

T = TypeVar("T")

RetryCause = Literal["rate_limit", "server_error", "timeout", "connection", "malformed"]
"""Why an attempt failed in a way worth retrying (the keys of the retry counters)."""

#: HTTP statuses a later attempt may succeed on, and the cause each is counted under.
_RETRYABLE_STATUS: dict[int, RetryCause] = {408: "timeout", 409: "server_error", 429: "rate_limit"}


class RetryableError(GenerationError):
    """An attempt failed for a transient reason (``cause``, for the counters); the same request
    may succeed next time, after ``retry_after_s`` if the server said."""

    def __init__(self, message: str, *, cause: RetryCause, retry_after_s: float | None = None):
        self.cause = cause
        self.retry_after_s = retry_after_s
        super().__init__(message)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential back-off with full jitter.

    Attributes:
        max_retries: Retries after the first attempt (so at most ``max_retries + 1`` attempts).
        initial_backoff_s: Upper bound of the first back-off.
        max_backoff_s: The back-off bound stops doubling here.
        max_retry_after_s: A longer ``Retry-After`` fails at once
            (:class:`~nip.errors.BackendUnavailableError`) instead of waiting.
    """

    max_retries: int = 8
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    max_retry_after_s: float = 120.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise InvalidParameterError("max_retries", self.max_retries, "an integer >= 0")
        for name in ("initial_backoff_s", "max_backoff_s", "max_retry_after_s"):
            if getattr(self, name) < 0:
                raise InvalidParameterError(name, getattr(self, name), "a number >= 0")

    def backoff_s(self, retry: int, rng: random.Random) -> float:
        """The jittered back-off before retry number ``retry`` (1-based)."""
        bound = min(self.max_backoff_s, self.initial_backoff_s * 2 ** (retry - 1))
        return rng.uniform(0.0, bound)

    def delay_s(self, retry: int, error: RetryableError, rng: random.Random) -> float:
        """How long to wait before retry ``retry``: the back-off, or longer if the server asked
        (BackendUnavailableError above ``max_retry_after_s``)."""
        delay = self.backoff_s(retry, rng)
        if error.retry_after_s is None:
            return delay
        if error.retry_after_s > self.max_retry_after_s:
            raise BackendUnavailableError(
                f"{error} The server asked to retry after {error.retry_after_s:.0f} s, more than "
                f"max_retry_after_s={self.max_retry_after_s:g}; giving up.",
                attempts=retry,
            )
        return max(delay, error.retry_after_s)


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait according to ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP
    date, against ``now``); None when no usable header is present."""
    for name, per_s in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        with contextlib.suppress(ValueError):  # absent, or not a number
            return max(0.0, float(headers.get(name, "")) / per_s)
    try:
        moment = email.utils.parsedate_to_datetime(headers.get("retry-after", ""))
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - (time.time() if now is None else now))


def error_for_status(
    status: int, message: str, *, retry_after_s: float | None = None
) -> GenerationError:
    """The nip error for an HTTP error status or in-body ``error.code``: 408, 409, 429 and 5xx
    retryable; 402, 401/403 and 404 their own types; any other a final GenerationError."""
    text = f"HTTP {status}: {message}"
    if status in _RETRYABLE_STATUS:
        return RetryableError(text, cause=_RETRYABLE_STATUS[status], retry_after_s=retry_after_s)
    if status >= 500:
        return RetryableError(text, cause="server_error", retry_after_s=retry_after_s)
    if status == 402:
        return InsufficientCreditsError(f"{text} (add credits to the provider account)")
    if status in (401, 403):
        return AuthenticationError(f"{text} (check the API key)")
    if status == 404:
        return ModelNotFoundError(text)
    return GenerationError(text)


def error_for_sdk_exception(
    error: openai.APIError, redact: Callable[[str], str] = str, *, sdk: Any = None
) -> GenerationError:
    """The nip error for an exception of the OpenAI SDK, or of ``sdk`` (one of the same make,
    such as ``together``); ``redact`` removes the API key from quoted messages."""
    if sdk is None:
        import openai as sdk

    if isinstance(error, sdk.APIStatusError):
        body = error.body  # openai: the error object; together: the whole {"error": {...}}
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            body = body["error"]
        message = body.get("message", error.message) if isinstance(body, dict) else error.message
        retry_after = parse_retry_after(error.response.headers)
        return error_for_status(error.status_code, redact(str(message)), retry_after_s=retry_after)
    if isinstance(error, sdk.APITimeoutError):
        return RetryableError("no response before the request time-out", cause="timeout")
    if isinstance(error, sdk.APIConnectionError):
        detail = f"{error} {error.__cause__ or ''}".strip()
        return RetryableError(redact(detail), cause="connection")
    return RetryableError(redact(f"unusable response: {error}"), cause="malformed")


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    rng: random.Random,
    *,
    what: str,
    on_retry: Callable[[RetryableError, float], None] | None = None,
) -> tuple[T, int]:
    """Await ``attempt()`` until it succeeds, retrying on :class:`RetryableError`.

    ``rng`` draws the jitter; ``what`` names the request in the final error; ``on_retry`` is
    called with the error and the delay before each wait. Returns the result and the attempts.

    Raises:
        BackendUnavailableError: Every attempt failed; ``attempts`` says how many were made.
    """
    attempts = 0
    while True:
        attempts += 1
        try:
            return await attempt(), attempts
        except RetryableError as error:
            if attempts > policy.max_retries:
                raise BackendUnavailableError(
                    f"{what} failed after {attempts} attempts; last error: {error}",
                    attempts=attempts,
                ) from error
            delay = policy.delay_s(attempts, error, rng)
            if on_retry is not None:
                on_retry(error, delay)
            await asyncio.sleep(delay)


def parse_chat_body(
    content: bytes, headers: Mapping[str, str], redact: Callable[[str], str] = str
) -> tuple[list[Completion], TokenUsage, str | None]:
    """The completions, usage and model name of a chat-completion body with HTTP status 200
    (``headers`` for an in-body error's ``Retry-After``; ``redact`` removes the key).

    Raises:
        RetryableError: The body is malformed, or reports a transient in-body error.
        GenerationError: The body reports a final in-body error (e.g. code 402).
    """
    try:
        data = json.loads(content)
    except ValueError:
        snippet = content[:80].decode("utf-8", "replace")
        raise RetryableError(f"malformed JSON body: {snippet!r}", cause="malformed") from None
    if not isinstance(data, dict):
        raise RetryableError("response body is not a JSON object", cause="malformed")
    if isinstance(data.get("error"), dict):  # OpenRouter: an error inside a 200 response
        error = data["error"]
        try:
            status = int(error.get("code"))
        except (TypeError, ValueError):
            status = 500
        message = redact(str(error.get("message", error)))
        raise error_for_status(status, message, retry_after_s=parse_retry_after(headers))
    try:
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
        completions = [
            Completion(text=c["message"].get("content"), finish_reason=c["finish_reason"])
            for c in choices
        ]
        usage = data.get("usage") or {}
        tokens = TokenUsage(usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0)
    except (KeyError, TypeError, AttributeError) as error:
        message = f"response has no usable choices ({type(error).__name__}: {error})"
        raise RetryableError(message, cause="malformed") from None
    if not completions:
        raise RetryableError("response has no choices", cause="malformed")
    return completions, tokens, data.get("model")
