"""The CPU fallback engine: the project's transformers backend, in the server's process.

It serves chat completions (not streamed) for the base model and every adapter loaded with
:meth:`TransformersEngine.load_adapter`, batching concurrent requests like the ``Local``
provider does. It has nothing to free for training, so pause and resume do nothing.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import replace
from typing import Any

from nip.backends._types import ChatMessage, GenerationRequest, GenerationResult
from nip.errors import GenerationError, ModelNotFoundError
from nip.server.engine import Endpoint, EngineError, EngineReply, EngineState, EngineStatus

log = logging.getLogger(__name__)


def request_from_body(body: dict[str, Any]) -> GenerationRequest:
    """The :class:`GenerationRequest` a chat-completions body asks for.

    Raises:
        ValueError: A required field is missing or out of range.
    """
    if not isinstance(body.get("model"), str) or not isinstance(body.get("messages"), list):
        raise ValueError("a chat request needs a model and a list of messages")
    messages: list[ChatMessage] = []
    for message in body["messages"]:
        content = message.get("content") or ""
        if isinstance(content, list):  # multi-part content: keep the text parts
            content = "".join(part.get("text", "") for part in content)
        entry: ChatMessage = {"role": message["role"], "content": str(content)}
        if message.get("name"):
            entry["name"] = str(message["name"])
        messages.append(entry)
    n = int(body.get("n") or 1)
    if not 1 <= n <= 128:
        raise ValueError(f"n={n} is outside 1..128")
    return GenerationRequest(
        model=body["model"],
        messages=tuple(messages),
        max_tokens=body.get("max_completion_tokens", body.get("max_tokens")),
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        repetition_penalty=body.get("repetition_penalty"),
        n=n,
        seed=body.get("seed"),
    )


def body_from_result(model: str, result: GenerationResult) -> dict[str, Any]:
    """The ``chat.completion`` body of a result."""
    usage = result.usage
    return {
        "id": f"chatcmpl-{secrets.token_hex(8)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": c.text},
                "finish_reason": c.finish_reason,
                "logprobs": None,
            }
            for i, c in enumerate(result.completions)
        ],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
    }


class TransformersEngine:
    """Inference with :class:`~nip.backends.local.LocalBackend` (the model loads on first use).

    Args:
        model: The base model's folder (or an embedded model's name).
        base_model: The name clients use for it.
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``.
    """

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

    async def pause(self) -> None:
        return None

    async def resume(self) -> None:
        return None

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
        return EngineReply.json(200, body_from_result(body["model"], result))

    def __repr__(self) -> str:
        return f"TransformersEngine(model={self.model!r}, adapters={sorted(self._adapters)})"
