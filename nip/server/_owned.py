"""The child side of :func:`nip.server.background.serve_in_background`: ``nip serve`` that ends
when the process that owns it is gone.

``python -m nip.server._owned CONFIG --parent-pid PID`` serves ``CONFIG`` as ``nip serve
--config CONFIG`` does, and a watchdog thread sends it SIGTERM (uvicorn's graceful shutdown,
which ends vLLM) once ``PID`` is no longer its parent (exited, or killed with SIGKILL).
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time

#: How often the watchdog checks that its owner is still there.
WATCH_INTERVAL_S = 0.5
#: After SIGTERM, how long the server may take to shut down before it is ended at once.
SHUTDOWN_GRACE_S = 60.0


def watch_owner(parent_pid: int, interval_s: float = WATCH_INTERVAL_S) -> threading.Thread:
    """Start a daemon thread that ends this process once ``parent_pid`` is not its parent."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's handler: a graceful shutdown
        time.sleep(SHUTDOWN_GRACE_S)
        os._exit(1)  # the shutdown hung: leave anyway rather than run ownerless

    thread = threading.Thread(target=watch, name="nip-owner-watchdog", daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> int:
    from nip.backends.self_hosted import API_KEY_ENV
    from nip.server.app import run_server
    from nip.server.config import ServerConfig

    parser = argparse.ArgumentParser(prog="python -m nip.server._owned")
    parser.add_argument("config", help="A ServerConfig file (YAML or JSON).")
    parser.add_argument("--parent-pid", type=int, required=True, help="The owning process.")
    args = parser.parse_args(argv)
    if os.getppid() != args.parent_pid:  # the owner died before we got here
        return 1
    watch_owner(args.parent_pid)
    run_server(ServerConfig.load(args.config), api_key=os.environ.get(API_KEY_ENV))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
