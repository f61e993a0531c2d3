"""A :class:`~nip.backends.ChatBackend` for OpenAI, OpenRouter and any OpenAI-compatible URL.

One backend per endpoint owns the concurrency limit, one ``openai.AsyncOpenAI`` client per
event loop and the retries (:mod:`nip.backends._retry`; the SDK's are off). The raw body is
read by :func:`~nip.backends._retry.parse_chat_body` (OpenRouter reports errors inside a 200
body). No ``repr``, pickle, copy or error message carries the API key.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import os
import random
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from nip.backends._retry import (
    RetryableError,
    RetryPolicy,
    call_with_retries,
    error_for_sdk_exception,
    parse_chat_body,
)
from nip.backends._types import Completion, GenerationRequest, GenerationResult, TokenUsage
from nip.errors import AuthenticationError, InvalidParameterError
from nip.utils.html import caption_table

if TYPE_CHECKING:
    import openai

OPENAI_BASE_URL = "https://api.openai.com/v1"
OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"


def top_up_seed(seed: int, top_up: int) -> int:
    """The seed of top-up request ``top_up`` (0: the first, which keeps ``seed``), derived so
    that siblings topped up from a provider that ignores ``n`` differ, the same on every run."""
    if top_up == 0:
        return seed
    return random.Random(f"{seed}:top-up:{top_up}").randrange(2**31)


class MissingAPIKeyError(AuthenticationError):
    """The environment variable that should hold the API key is not set."""

    def __init__(self, env_var: str, provider: str):
        self.env_var = env_var
        super().__init__(
            f"{provider} needs an API key: set the environment variable {env_var} "
            f"(for example in a .env file or with os.environ[{env_var!r}] = ...)."
        )


@dataclass(frozen=True)
class OpenAIBackendConfig:
    """Where an :class:`OpenAIBackend` sends requests, and how hard it tries.

    Attributes:
        base_url: The API root, ending in ``/v1`` (e.g. ``http://127.0.0.1:8000/v1``).
        api_key: The key itself (never shown, pickled or copied); prefer ``api_key_env``.
        api_key_env: Environment variable holding the key (neither: ``"EMPTY"``, as vLLM takes).
        name: The backend's name (``ChatBackend.name``), e.g. the provider.
        max_concurrency: Requests in flight at once, per event loop.
        max_retries / initial_backoff_s / max_backoff_s / max_retry_after_s: The
            :class:`~nip.backends._retry.RetryPolicy`.
        request_timeout_s: Time-out of one HTTP attempt.
        max_tokens_field: The request field for the token limit (``max_completion_tokens``
            for OpenAI's reasoning models).
        default_headers: Extra headers on every request (e.g. OpenRouter's ``X-Title``).
    """

    base_url: str
    api_key: str | None = field(default=None, repr=False, compare=False)
    api_key_env: str | None = None
    name: str = "openai"
    max_concurrency: int = 64
    max_retries: int = 8
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    max_retry_after_s: float = 120.0
    request_timeout_s: float = 120.0
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    default_headers: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise InvalidParameterError("base_url", self.base_url, "an http:// or https:// URL")
        if self.max_concurrency < 1:
            raise InvalidParameterError("max_concurrency", self.max_concurrency, "an integer >= 1")
        if self.request_timeout_s <= 0:
            raise InvalidParameterError("request_timeout_s", self.request_timeout_s, "> 0")
        if self.max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise InvalidParameterError(
                "max_tokens_field", self.max_tokens_field, "max_tokens or max_completion_tokens"
            )
        self.retry_policy()  # validates the retry fields

    def retry_policy(self) -> RetryPolicy:
        """The retry policy these settings describe."""
        return RetryPolicy(
            self.max_retries, self.initial_backoff_s, self.max_backoff_s, self.max_retry_after_s
        )

    def resolve_api_key(self) -> str:
        """The key to send: ``api_key``, else ``$api_key_env`` (MissingAPIKeyError if unset),
        else ``"EMPTY"``."""
        if self.api_key:
            return self.api_key
        if self.api_key_env is None:
            return "EMPTY"
        key = os.environ.get(self.api_key_env)
        if not key:
            raise MissingAPIKeyError(self.api_key_env, self.name)
        return key

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain values, without the key."""
        data = dataclasses.asdict(self)
        del data["api_key"]
        return data

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "api_key": None}


@dataclass
class BackendStats:
    """Counters of one :class:`OpenAIBackend` since it was created (or copied): HTTP attempts
    sent and answered, retries by :data:`~nip.backends._retry.RetryCause`, ``generate`` calls
    that raised, attempts in flight (and the most at once), tokens, and back-off time summed."""

    requests_sent: int = 0
    responses_ok: int = 0
    retries_by_cause: dict[str, int] = field(default_factory=dict)
    failures: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retry_wait_s: float = 0.0

    @property
    def retries(self) -> int:
        """All retries, whatever the cause."""
        return sum(self.retries_by_cause.values())

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def _repr_html_(self) -> str:
        return caption_table("BackendStats", self.to_dict())


@dataclass
class _LoopState:
    """What must belong to one event loop: the semaphore and the SDK client (its connections)."""

    loop: asyncio.AbstractEventLoop
    semaphore: asyncio.Semaphore
    client: openai.AsyncOpenAI


class OpenAIBackend:
    """Chat completions from an OpenAI-compatible HTTP API (MissingAPIKeyError at once if
    ``config.api_key_env`` is unset)."""

    def __init__(self, config: OpenAIBackendConfig):
        config.resolve_api_key()  # fail now, naming the variable, not at the first request
        self.config = config
        self.name = config.name
        self._policy = config.retry_policy()
        self._rng = random.Random()  # jitter only; seeding it would re-correlate clients
        self._counters = BackendStats()
        self._loops: dict[int, _LoopState] = {}
        self._ssl_context: Any = None

    # ---------------------------------------------------------------- generation
    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """Generate ``request.n`` completions, retrying transient failures; refusals raise
        :func:`~nip.backends._retry.error_for_status`'s errors, and BackendUnavailableError
        when every attempt failed."""
        started = time.perf_counter()
        state = self._loop_state()
        what = f"request for model {request.model!r} at {self.config.base_url}"
        completions: list[Completion] = []
        prompt_tokens = completion_tokens = attempts = 0
        model: str | None = None
        try:
            # Some providers (OpenRouter) ignore n; top up with follow-up requests, each with
            # its own seed, or a provider honouring seeds would repeat the first answer.
            for top_up in itertools.count():
                if len(completions) >= request.n:
                    break
                payload = self._payload(request, request.n - len(completions), top_up)
                (choices, usage, model), tries = await call_with_retries(
                    lambda payload=payload: self._attempt(state, payload),
                    self._policy,
                    self._rng,
                    what=what,
                    on_retry=self._count_retry,
                )
                completions += choices
                prompt_tokens += usage.prompt_tokens
                completion_tokens += usage.completion_tokens
                attempts += tries
        except Exception:
            self._counters.failures += 1
            raise
        self._counters.prompt_tokens += prompt_tokens
        self._counters.completion_tokens += completion_tokens
        return GenerationResult(
            completions=tuple(completions[: request.n]),
            usage=TokenUsage(prompt_tokens, completion_tokens),
            latency_s=time.perf_counter() - started,
            model=model or request.model,
            attempts=attempts,
        )

    def _payload(self, request: GenerationRequest, n: int, top_up: int = 0) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": request.model, "messages": list(request.messages)}
        if n != 1:
            payload["n"] = n
        if request.max_tokens is not None:
            payload[self.config.max_tokens_field] = request.max_tokens
        for name in ("temperature", "top_p"):
            if getattr(request, name) is not None:
                payload[name] = getattr(request, name)
        if request.seed is not None:
            payload["seed"] = top_up_seed(request.seed, top_up)
        if request.repetition_penalty is not None:  # not OpenAI's; vLLM and OpenRouter take it
            payload["repetition_penalty"] = request.repetition_penalty
        return payload

    def _sdk(self) -> tuple[Any, type]:
        """The SDK whose client and errors this backend uses, and its HTTP response class."""
        import openai

        return openai, sdk_httpx_module().Response

    async def _attempt(
        self, state: _LoopState, payload: dict[str, Any]
    ) -> tuple[list[Completion], TokenUsage, str | None]:
        sdk, response = self._sdk()
        counters = self._counters
        async with state.semaphore:
            counters.requests_sent += 1
            counters.in_flight += 1
            counters.max_in_flight = max(counters.max_in_flight, counters.in_flight)
            try:
                raw = await state.client.post("/chat/completions", cast_to=response, body=payload)
            # Not chained: the SDK error's request object carries the key in a header.
            except sdk.APIError as error:
                raise error_for_sdk_exception(error, self._redact, sdk=sdk) from None
            finally:
                counters.in_flight -= 1
        # Parsed here, not by the SDK: OpenRouter reports errors inside a 200 body.
        parsed = parse_chat_body(raw.content, raw.headers, self._redact)
        counters.responses_ok += 1
        return parsed

    def _count_retry(self, error: RetryableError, delay_s: float) -> None:
        by_cause = self._counters.retries_by_cause
        by_cause[error.cause] = by_cause.get(error.cause, 0) + 1
        self._counters.retry_wait_s += delay_s

    def _redact(self, text: str) -> str:
        key = self.config.api_key or (
            os.environ.get(self.config.api_key_env) if self.config.api_key_env else None
        )
        return text.replace(key, "***") if key and key != "EMPTY" else text

    # ---------------------------------------------------------------- event loops
    def _loop_state(self) -> _LoopState:
        """The semaphore and SDK client of the running loop (they belong to one loop), made
        on first use there."""
        loop = asyncio.get_running_loop()
        state = self._loops.get(id(loop))
        if state is not None and state.loop is loop:
            return state
        for key, old in list(self._loops.items()):
            if old.loop.is_closed():
                del self._loops[key]  # its connections died with the loop
        state = _LoopState(loop, asyncio.Semaphore(self.config.max_concurrency), self._client())
        self._loops[id(loop)] = state
        return state

    def _client(self) -> openai.AsyncOpenAI:
        """An SDK client with its retries off and a pool of ``max_concurrency`` connections."""
        import openai

        config = self.config
        if self._ssl_context is None:  # building one costs ~40 ms; the loops' clients share it
            self._ssl_context = sdk_httpx_module().create_ssl_context()
        connections = config.max_concurrency
        http_client = openai.DefaultAsyncHttpxClient(
            verify=self._ssl_context,
            limits=sdk_httpx_module().Limits(
                max_connections=connections, max_keepalive_connections=connections
            ),
        )
        return openai.AsyncOpenAI(
            api_key=config.resolve_api_key(),
            base_url=config.base_url,
            timeout=config.request_timeout_s,
            max_retries=0,  # ours are the only retries
            default_headers=dict(config.default_headers) or None,
            http_client=http_client,
        )

    async def aclose(self) -> None:
        """Close the running loop's connections and forget every loop's client."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        states, self._loops = self._loops, {}
        for state in states.values():
            if state.loop is loop:
                await state.client.close()

    # ---------------------------------------------------------------- introspection
    def stats(self) -> BackendStats:
        """A snapshot of the request, retry and concurrency counters."""
        counters = self._counters
        return dataclasses.replace(counters, retries_by_cause=dict(counters.retries_by_cause))

    def __getstate__(self) -> dict[str, Any]:
        # A copy gets no client, no explicit key and fresh counters; self is left untouched.
        state = self.__dict__.copy()
        config = dataclasses.replace(self.config, api_key=None)  # api_key_env is kept
        state.update(config=config, _loops={}, _ssl_context=None)
        state["_counters"] = BackendStats()
        return state

    def __repr__(self) -> str:
        c = self.config
        return (
            f"OpenAIBackend(name={c.name!r}, base_url={c.base_url!r}, "
            f"max_concurrency={c.max_concurrency}, max_retries={c.max_retries})"
        )

    def _repr_html_(self) -> str:
        rows = {"name": self.name, "base_url": self.config.base_url}
        rows.update(max_concurrency=self.config.max_concurrency, **self.stats().to_dict())
        return caption_table("OpenAIBackend", rows)


@functools.cache
def sdk_httpx_module() -> Any:
    """The httpx package the installed OpenAI SDK is built on (``httpx2`` from SDK 3)."""
    import openai

    base = next(c for c in openai.DefaultAsyncHttpxClient.__mro__ if c.__name__ == "AsyncClient")
    return sys.modules[base.__module__.split(".")[0]]
