"""Errors raised when a dataset cannot be read."""

from __future__ import annotations

from pathlib import Path

from nip.errors import NipError


class DatasetFormatError(NipError, ValueError):
    """A dataset file is malformed.

    Attributes:
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


class DatasetUnavailableError(NipError, OSError):
    """A Hub dataset (``dataset``) can be read neither from the Hub nor from the cache."""

    def __init__(self, dataset: str, reason: str):
        self.dataset = dataset
        folder = dataset.split("/")[-1]
        super().__init__(
            f"cannot load dataset {dataset!r}: {reason}. To use it without a network, load it "
            "once with a network (it is then cached; HF_DATASETS_OFFLINE=1 reads the cache), "
            "or point nip at a local copy: dataset: /path/to/folder (a Hub download such as "
            f"`hf download {dataset} --repo-type dataset --local-dir {folder}`, with "
            "data/train.parquet and data/test.parquet), or dataset: /path/to/file.parquet"
        )


class DatasetSplitError(NipError, ValueError):
    """``dataset`` has no ``split`` (it has ``available``)."""

    def __init__(self, dataset: str, split: str, available: tuple[str, ...]):
        self.dataset = dataset
        self.split = split
        self.available = available
        super().__init__(
            f"dataset {dataset!r} has no {split!r} split (it has {', '.join(available)}); "
            "choose another with text_rl.test_dataset_split"
        )
