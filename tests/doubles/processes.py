"""Which processes of a process group are still alive (Linux ``/proc``), for tests that check
nothing nip started outlives its stop."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path


def live_group_members(group: int, wait_s: float = 10.0) -> list[int]:
    """Processes of ``group`` that are not zombies, after up to ``wait_s`` for them to end."""
    deadline = time.monotonic() + wait_s
    while True:
        live = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == group and fields[0] != "Z":
                    live.append(int(stat.parent.name))
        if not live or time.monotonic() > deadline:
            return live
        time.sleep(0.2)


def processes_with(*parts: str) -> list[int]:
    """Live processes (not zombies) whose command line contains every one of ``parts``
    (``processes_with("--owner-pid", str(sweep_dir))``: the servers of one sweep)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z" and all(part in command for part in parts):
                found.append(int(entry.name))
    return found


def wait_until(condition, what: str, timeout_s: float) -> None:
    """Poll ``condition()`` every 0.2 s until it is true.

    Raises:
        AssertionError: Still false after ``timeout_s`` (the message says ``what``).
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout_s:g} s")
        time.sleep(0.2)
