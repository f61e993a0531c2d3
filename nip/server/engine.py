"""The inference engine behind the server: one small Protocol, three implementations.

:class:`~nip.server.vllm_engine.VllmEngine` supervises a vLLM process (the GPU path);
:class:`TransformersEngine` generates in-process (the CPU fallback); :class:`NoEngine` serves
nothing.
The server calls :meth:`InferenceEngine.load_adapter` when a job succeeds, and
:meth:`~InferenceEngine.pause` / :meth:`~InferenceEngine.resume` around training.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from nip.backends._chat_wire import completion_body, request_from_body
from nip.errors import GenerationError, ModelNotFoundError, NipError

log = logging.getLogger(__name__)

EngineState = Literal["stopped", "starting", "ready", "paused", "crashed", "failed"]
Endpoint = Literal["chat/completions", "completions"]


class EngineError(NipError):
    """The inference engine could not do what was asked (start, load an adapter...)."""


@dataclass
class EngineStatus:
    """What ``GET /health`` reports about the engine.

    Attributes:
        kind: "vllm", "transformers" or "none".
        state: stopped, starting, ready, paused (training holds the GPU), crashed (being
            restarted) or failed (given up; ``error`` says why).
        adapters: Adapter names the engine serves (loaded or loading).
        restarts: How often the engine was restarted after a crash.
        error: The last failure, with the end of the engine's log.
    """

    kind: str
    state: EngineState
    base_model: str
    adapters: list[str] = field(default_factory=list)
    restarts: int = 0
    error: str | None = None


@dataclass
class EngineReply:
    """An OpenAI-compatible HTTP answer: a whole body, or a stream of server-sent events."""

    status: int
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None
    media_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, content: Any, **headers: str) -> EngineReply:
        return cls(status, json.dumps(content).encode(), headers=dict(headers))

    @classmethod
    def error(
        cls, status: int, message: str, code: str | None = None, param: str | None = None, **headers
    ) -> EngineReply:
        """An error in the OpenAI shape (``{"error": {"message": ...}}``)."""
        kind = "invalid_request_error" if status < 500 else "server_error"
        body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
        return cls.json(status, body, **headers)


@runtime_checkable
class InferenceEngine(Protocol):
    """Serves the base model and its LoRA adapters behind the OpenAI API."""

    kind: str

    def status(self) -> EngineStatus:
        """The engine's state now (cheap; never waits)."""
        ...

    async def start(self) -> None:
        """Begin starting (returns at once; :meth:`status` says when it is ready)."""
        ...

    async def stop(self) -> None:
        """Stop and release memory and processes."""
        ...

    async def load_adapter(self, name: str, path: str) -> None:
        """Serve the PEFT adapter in ``path`` as model ``name``, without a restart (an engine not
        ready yet loads it once it is).

        Raises:
            EngineError: The engine refused the adapter.
        """
        ...

    async def pause(self) -> None:
        """Free accelerator memory for training (by default a no-op: nothing to free)."""
        return None

    async def resume(self) -> None:
        """Undo :meth:`pause`."""
        return None

    async def forward(self, endpoint: Endpoint, body: dict[str, Any]) -> EngineReply:
        """Answer an OpenAI request (``chat/completions`` or ``completions``)."""
        ...


class NoEngine(InferenceEngine):
    """An engine that serves nothing: the server only trains (``--engine none``)."""

    kind = "none"

    def __init__(self, base_model: str):
        self.base_model = base_model
        self._adapters: dict[str, str] = {}

    def status(self) -> EngineStatus:
        return EngineStatus("none", "ready", self.base_model, sorted(self._adapters))

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def load_adapter(self, name: str, path: str) -> None:
        self._adapters[name] = path

    async def forward(self, endpoint: Endpoint, body: dict[str, Any]) -> EngineReply:
        return EngineReply.error(501, "this server runs no inference engine (--engine none)")


class TransformersEngine(InferenceEngine):
    """The CPU fallback: :class:`~nip.backends.local.LocalBackend` on ``device`` (loaded on first
    use), batched like the ``Local`` provider, serving chat completions (not streamed) for the base
    model and every loaded adapter; pause and resume do nothing. ``model`` is the folder or
    embedded model, ``base_model`` the name clients use."""

    kind = "transformers"

    def __init__(self, model: str, base_model: str, device: str = "auto"):
        self.model = model
        self.base_model = base_model
        self.device = device
        self._backend: Any = None
        self._adapters: dict[str, str] = {}
        self._state: EngineState = "stopped"

    def status(self) -> EngineStatus:
        return EngineStatus(self.kind, self._state, self.base_model, sorted(self._adapters))

    async def start(self) -> None:
        from nip.backends.local import LocalBackend

        self._backend = LocalBackend(self.model, device=self.device)
        for name, path in list(self._adapters.items()):
            try:
                self._backend.register_adapter(name, path)
            except (ModelNotFoundError, ValueError) as error:  # e.g. its folder was deleted
                log.warning("not serving adapter %r: %s", name, error)
                del self._adapters[name]
        self._state = "ready"

    async def stop(self) -> None:
        if self._backend is not None:
            await self._backend.aclose()
            self._backend = None
        self._state = "stopped"

    async def load_adapter(self, name: str, path: str) -> None:
        if self._backend is not None:
            try:
                self._backend.register_adapter(name, path)
            except (ModelNotFoundError, ValueError) as error:
                raise EngineError(f"cannot serve adapter {name!r}: {error}") from None
        self._adapters[name] = path

    async def forward(self, endpoint: Endpoint, body: dict[str, Any]) -> EngineReply:
        if endpoint != "chat/completions":
            return EngineReply.error(400, f"the transformers engine does not serve /v1/{endpoint}")
        if body.get("stream"):
            return EngineReply.error(400, "the transformers engine does not stream")
        if self._backend is None:
            return EngineReply.error(503, "the engine is not running", **{"retry-after": "5"})
        try:
            request = request_from_body(body)
        except (KeyError, TypeError, ValueError) as error:
            return EngineReply.error(400, f"bad chat request: {error}")
        if request.model == self.base_model:  # the backend knows the base model by its folder
            request = replace(request, model=self.model)
        try:
            result = await self._backend.generate(request)
        except ModelNotFoundError as error:
            return EngineReply.error(404, str(error), code="model_not_found")
        except GenerationError as error:
            return EngineReply.error(500, str(error))
        reply = completion_body(
            f"chatcmpl-{secrets.token_hex(8)}", body["model"], result.completions, result.usage
        )
        return EngineReply.json(200, reply)

    def __repr__(self) -> str:
        return f"TransformersEngine(model={self.model!r}, adapters={sorted(self._adapters)})"
