"""Bearer-token authentication for every request to the server (a pure ASGI middleware)."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from nip.server.engine import EngineReply

_UNAUTHORIZED = EngineReply.error(
    401, "missing or wrong bearer token (send 'Authorization: Bearer <key>')", "invalid_api_key"
).body


class BearerTokenMiddleware:
    """Answers 401 to any HTTP request to ``app`` without ``Authorization: Bearer <token>``
    (compared in constant time, as digests)."""

    def __init__(self, app: Any, token: str):
        if not token:
            raise ValueError("BearerTokenMiddleware needs a non-empty token")
        self.app = app
        self._digest = hashlib.sha256(token.encode()).digest()

    def _authorized(self, scope: dict[str, Any]) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = value.decode("latin-1").partition(" ")
                digest = hashlib.sha256(given.strip().encode()).digest()
                return scheme.lower() == "bearer" and secrets.compare_digest(digest, self._digest)
        return False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="nip"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": _UNAUTHORIZED})
