"""Small helpers for the processes nip starts (vLLM, ``nip serve``): ports and logs."""

from __future__ import annotations

import os
import socket
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
