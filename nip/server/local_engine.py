"""The CPU fallback engine: the transformers backend in the server's process, serving chat
completions (not streamed) for the base model and every loaded adapter, batched like the
``Local`` provider; pause and resume do nothing."""

from __future__ import annotations

import logging
import secrets
from dataclasses import replace
from typing import Any

from nip.backends._chat_wire import completion_body, request_from_body
from nip.errors import GenerationError, ModelNotFoundError
from nip.server.engine import (
    Endpoint,
    EngineError,
    EngineReply,
    EngineState,
    EngineStatus,
    InferenceEngine,
)

log = logging.getLogger(__name__)


class TransformersEngine(InferenceEngine):
    """Inference with :class:`~nip.backends.local.LocalBackend` on ``device`` (loaded on first use):
    ``model`` is the folder or embedded model, ``base_model`` the name clients use."""

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
