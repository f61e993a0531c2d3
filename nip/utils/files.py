"""Writing files so that a process killed at any moment leaves the old file or the new one,
and reading a JSON file another process replaces, or a JSON-lines file it appends to."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never a part.

    ``durable``: fsync before the replace, so it survives a machine crash too (a file
    rewritten every moment for a display does without: the fsync costs more than the write).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            if durable:
                os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_growing_jsonl(path: Path) -> list[Any]:
    """The records of a JSON-lines file another process may be appending to: none when it does
    not exist yet, and a line being written (not yet valid JSON) left out."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        with contextlib.suppress(ValueError):  # the line being appended
            records.append(json.loads(line))
    return records


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; empty when the file is absent, not an object, or being
    replaced on a file system without an atomic rename."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
