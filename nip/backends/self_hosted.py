"""The client side of ``nip serve``: the ``SelfHosted`` chat backend, readiness and version
checks (a different API major version is refused, a minor one warned of). The bearer token is
``$NIP_SERVER_API_KEY``; the server (:mod:`nip.server`) imports its constants from here.
"""

from __future__ import annotations

import asyncio
import os
import time
import warnings
from typing import TYPE_CHECKING, Any

from nip.backends.openai_compatible import OpenAIBackend, OpenAIBackendConfig
from nip.errors import AuthenticationError, BackendUnavailableError, NipError

if TYPE_CHECKING:
    from nip.parameters import PureTextAgentParameters
    from nip.settings import ExperimentSettings

#: The environment variable holding the server's bearer token (on both sides).
API_KEY_ENV = "NIP_SERVER_API_KEY"

#: Version of the HTTP API of ``nip serve``: major changes break clients, minor ones add to it.
API_VERSION = "1.0"


class IncompatibleServerError(NipError):
    """The language-model server speaks an API version this client cannot use."""


class ServerVersionWarning(UserWarning):
    """The server's API minor version differs from the client's: most things should work."""


def check_server_version(info: dict[str, Any], url: str, client: str = API_VERSION) -> None:
    """Check a server's ``/version`` answer against this client's API version: a different
    major (or none) raises IncompatibleServerError, a different minor warns."""
    server = info.get("api_version") if isinstance(info, dict) else None
    if not isinstance(server, str) or "." not in server:
        raise IncompatibleServerError(
            f"the server at {url} reports no API version ({info!r}); is it `nip serve`?"
        )
    server_major, server_minor = server.split(".", 1)
    major, minor = client.split(".", 1)
    nip_version = info.get("version", "?")
    if server_major != major:
        raise IncompatibleServerError(
            f"the server at {url} speaks API {server} (nip {nip_version}), this client speaks "
            f"API {client}: install matching nip versions on both sides"
        )
    if server_minor != minor:
        warnings.warn(
            f"the server at {url} speaks API {server} (nip {nip_version}), this client "
            f"API {client}; features added since the older one may be missing",
            ServerVersionWarning,
            stacklevel=3,
        )


class UnservedModelError(NipError):
    """``ExperimentSettings.serve`` is on but no server was started for an agent's model."""


def served_params(
    params: PureTextAgentParameters, settings: ExperimentSettings
) -> PureTextAgentParameters:
    """A ``SelfHosted`` agent's parameters pointed at the ``nip serve`` its run owns for its
    model (``settings.servers``); any other agent's as given.

    Raises:
        UnservedModelError: ``settings.serve`` is on and no server serves the agent's model.
    """
    if params.served_by != "SelfHosted":
        return params
    url = settings.servers.get(params.model_name)
    if url is None:
        if settings.serve:
            raise UnservedModelError(
                f"serve=True but no nip serve was started for {params.model_name!r}: start the "
                "run with `nip run --serve` or inside `with nip.server.serving(...)`, or set "
                "serve=False and point the agents at a server"
            )
        return params
    scheme_host, _, port = url.rstrip("/").rpartition(":")
    changes = {"language_model_server_scheme_host": scheme_host}
    return params.model_copy(update={**changes, "language_model_server_port": int(port)})


def server_url(params: PureTextAgentParameters) -> str:
    """The root URL of the language-model server an agent's parameters name."""
    host = params.language_model_server_scheme_host.rstrip("/")
    return f"{host}:{params.language_model_server_port}"


async def get_server_json(url: str, path: str, api_key: str | None, timeout_s: float = 10.0):
    """``GET url+path`` as JSON (raises httpx errors; 401 becomes AuthenticationError)."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        reply = await client.get(url + path, headers=headers)
    if reply.status_code == 401:
        raise AuthenticationError(
            f"the language-model server at {url} refused the token: set {API_KEY_ENV} to the "
            "server's --api-key"
        )
    reply.raise_for_status()
    return reply.json()


async def check_server(url: str, api_key: str | None) -> dict[str, Any]:
    """Fetch ``/version`` and check it (see :func:`check_server_version`)."""
    info = await get_server_json(url, "/version", api_key)
    check_server_version(info, url)
    return info


async def wait_for_server(
    url: str, api_key: str | None, timeout_s: float | None = 300.0, poll_interval_s: float = 1.0
) -> dict[str, Any]:
    """Wait until the server answers, speaks a compatible API and its engine is ready, for
    ``timeout_s`` (None: until cancelled); return its ``/health`` answer.

    Raises:
        IncompatibleServerError: The server's API major version differs.
        AuthenticationError: The server refused the token.
        BackendUnavailableError: The engine failed, or ``timeout_s`` passed first.
    """
    import httpx

    deadline = time.monotonic() + (timeout_s if timeout_s is not None else float("inf"))
    checked = False
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            if not checked:
                await check_server(url, api_key)
                checked = True
            health = await get_server_json(url, "/health", api_key)
        except httpx.HTTPError as error:
            last = f"{type(error).__name__}: {error}"
        else:
            engine = health.get("engine", {})
            if engine.get("state") == "ready":
                return health
            if engine.get("state") == "failed":
                raise BackendUnavailableError(
                    f"the inference engine of {url} failed: {engine.get('error')}"
                )
            last = f"engine {engine.get('state')}"
        await asyncio.sleep(poll_interval_s)
    raise BackendUnavailableError(f"the server at {url} was not ready in {timeout_s:g} s ({last})")


class SelfHostedBackend(OpenAIBackend):
    """Chat completions from ``nip serve``, plus waiting for it to be ready."""

    @classmethod
    def from_agent_params(
        cls, params: PureTextAgentParameters, **overrides: Any
    ) -> SelfHostedBackend:
        """The backend for agents with ``model_provider="SelfHosted"``."""
        root = server_url(params)
        settings: dict[str, Any] = {"base_url": f"{root}/v1", "name": "selfhosted"}
        if os.environ.get(API_KEY_ENV):
            settings["api_key_env"] = API_KEY_ENV
        return cls(OpenAIBackendConfig(**{**settings, **overrides}))

    @property
    def server_url(self) -> str:
        return self.config.base_url.removesuffix("/").removesuffix("/v1")

    def _key(self) -> str | None:
        key = self.config.resolve_api_key()
        return None if key == "EMPTY" else key

    async def wait_for_ready(self, timeout_s: float | None = None) -> None:
        """Wait for the server and its engine (:func:`wait_for_server`)."""
        await wait_for_server(self.server_url, self._key(), timeout_s)

    def __repr__(self) -> str:
        return f"SelfHostedBackend(server={self.server_url!r})"
