"""The project's OpenAI-compatible test server in a subprocess, for the benchmarks."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def test_server(*options: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``python -m nip.testing.server`` on a free port with ``options``: yields the process
    and its base URL, and stops it on the way out."""
    command = [sys.executable, "-m", "nip.testing.server", "--port", "0", *options]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"the test server did not start: {line!r}")
        yield process, line.split()[-1]
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
