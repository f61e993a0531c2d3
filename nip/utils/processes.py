"""Small helpers for the processes nip starts (vLLM, ``nip serve``): ports, logs, stopping."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def end_of_file(path: Path, size: int = 2000) -> str:
    """The last ``size`` bytes of a (possibly large) log file as text; "" if it is missing."""
    try:
        with path.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - size))
            return file.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def stop_process_group(
    process: subprocess.Popen, grace_s: float, *, terminate_group: bool = False
) -> None:
    """Stop a process started with ``start_new_session=True``, and everything it started.

    SIGTERM goes to the process (``nip serve`` stops vLLM itself), or its group with
    ``terminate_group``; after ``grace_s``, and after any exit, the group is killed.
    """
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            if terminate_group:
                os.killpg(process.pid, signal.SIGTERM)
            else:
                process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):  # workers left behind
        os.killpg(process.pid, signal.SIGKILL)
