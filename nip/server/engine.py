"""The inference engine behind the server: one small Protocol, two implementations.

:class:`~nip.server.vllm_engine.VllmEngine` supervises a vLLM process (the GPU path);
:class:`~nip.server.local_engine.TransformersEngine` generates in-process (the CPU fallback).
The server calls :meth:`InferenceEngine.load_adapter` when a job succeeds, and
:meth:`~InferenceEngine.pause` / :meth:`~InferenceEngine.resume` around training.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from nip.errors import NipError

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
