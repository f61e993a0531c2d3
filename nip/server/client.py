"""The client side of ``nip serve``, kept under its old address: it lives in
:mod:`nip.backends.self_hosted` (chat clients belong to the backends layer)."""

from nip.backends.self_hosted import (
    SelfHostedBackend,
    check_server,
    get_server_json,
    server_url,
    wait_for_server,
)

__all__ = ["SelfHostedBackend", "check_server", "get_server_json", "server_url", "wait_for_server"]
