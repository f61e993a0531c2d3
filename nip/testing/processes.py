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
