"""The server's API version: ``GET /version`` answers ``{"version": <nip version>,
"api_version": "MAJOR.MINOR"}``. The client-side check lives with the client,
in :mod:`nip.backends.self_hosted`; it is re-exported here under its old address.
"""

from __future__ import annotations

from nip._version import __version__
from nip.backends.self_hosted import (
    API_VERSION,
    IncompatibleServerError,
    ServerVersionWarning,
    check_server_version,
)

__all__ = [
    "API_VERSION",
    "IncompatibleServerError",
    "ServerVersionWarning",
    "check_server_version",
    "version_info",
]


def version_info() -> dict[str, str]:
    """The body of ``GET /version``."""
    return {"version": __version__, "api_version": API_VERSION}
