"""The server's API version, and the client-side check that a server speaks a compatible one.

``GET /version`` returns ``{"version": <nip version>, "api_version": "MAJOR.MINOR"}``. A client
refuses a server whose API major version differs from its own (a typed error), and warns when
only the minor version differs. No FastAPI here: clients import this module.
"""

from __future__ import annotations

import warnings
from typing import Any

from nip._version import __version__
from nip.errors import NipError

#: Version of the HTTP API of ``nip serve``: major changes break clients, minor ones add to it.
API_VERSION = "1.0"


class IncompatibleServerError(NipError):
    """The language-model server speaks an API version this client cannot use."""


class ServerVersionWarning(UserWarning):
    """The server's API minor version differs from the client's: most things should work."""


def version_info() -> dict[str, str]:
    """The body of ``GET /version``."""
    return {"version": __version__, "api_version": API_VERSION}


def check_server_version(info: dict[str, Any], url: str, client: str = API_VERSION) -> None:
    """Check a server's ``/version`` answer against this client's API version.

    Raises:
        IncompatibleServerError: The major versions differ, or the server names none.

    Warns:
        ServerVersionWarning: Only the minor versions differ.
    """
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
