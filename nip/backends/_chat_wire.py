"""OpenAI chat-completions bodies on the server side (``nip serve`` and the test server)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from nip.backends._types import ChatMessage, Completion, GenerationRequest, TokenUsage

#: The most samples one request may ask for.
MAX_N = 128


def request_from_body(body: dict[str, Any]) -> GenerationRequest:
    """The :class:`GenerationRequest` a chat-completions body asks for (text parts of
    multi-part content; ``max_completion_tokens`` over ``max_tokens``).

    Raises:
        ValueError: The model or the messages are missing, or ``n`` is outside 1..128.
    """
    if not isinstance(body.get("model"), str) or not isinstance(body.get("messages"), list):
        raise ValueError("a chat request needs a model and a list of messages")
    messages: list[ChatMessage] = []
    for message in body["messages"]:
        content = message.get("content") or ""
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        entry: ChatMessage = {"role": message["role"], "content": str(content)}
        if message.get("name"):
            entry["name"] = str(message["name"])
        messages.append(entry)
    n = int(body.get("n") or 1)
    if not 1 <= n <= MAX_N:
        raise ValueError(f"n={n} is outside 1..{MAX_N}")
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


def completion_body(
    completion_id: str, model: str, completions: Sequence[Completion], usage: TokenUsage
) -> dict[str, Any]:
    """A ``chat.completion`` reply body: one choice per completion, and the token usage."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": c.text},
                "finish_reason": c.finish_reason,
                "logprobs": None,
            }
            for i, c in enumerate(completions)
        ],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
    }
