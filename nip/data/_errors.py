"""Errors raised when a dataset cannot be read."""

from __future__ import annotations

from pathlib import Path

from nip.errors import NipError


class DatasetFormatError(NipError, ValueError):
    """A dataset file is malformed.

    Attributes:
        path: The file.
        row: 1-based row (line of a JSONL file, row of a table); ``None`` for the whole file.
        field: The offending field, when one is to blame.
    """

    def __init__(
        self, path: str | Path, message: str, *, row: int | None = None, field: str | None = None
    ):
        self.path = Path(path)
        self.row = row
        self.field = field
        where = str(self.path) + (f", row {row}" if row is not None else "")
        what = f"field {field!r}: " if field else ""
        super().__init__(f"{where}: {what}{message}")
