"""Parameters of the code-validation scenario and its dataset, and which of them apply where:
``difficulty`` to ``humaneval_cv``-like (flat) data, ``apps_*`` to APPS-derived data,
``dataset_revision`` to Hub datasets. A field changed for a dataset it does not apply to is
refused (here when the name tells; for a local file when its rows are read).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field

from nip.errors import InvalidParameterError
from nip.parameters._base import BaseParameters

Difficulty = Literal["easy", "hard", "all"]
AppsDifficulty = Literal["introductory", "interview", "competition", "all"]
DatasetKind = Literal["shipped", "hub", "directory", "file"]

#: Datasets that ship with nip, by name, and the splits each has.
SHIPPED_DATASET_SPLITS: dict[str, tuple[str, ...]] = {"humaneval_cv": ("train", "test")}

#: File endings of dataset files (a name with one of them is a path, never a Hub id).
DATA_FILE_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".parquet", ".json")

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class CodeValidationParameters(BaseParameters):
    """Which part of the code-validation dataset a run uses."""

    difficulty: Difficulty = Field(
        "all", description="Difficulty tier of humaneval_cv items (easy, hard or all)."
    )
    apps_difficulty: AppsDifficulty = Field(
        "interview",
        description="APPS difficulty of Buggy-APPS/APPS problems to use (as the original).",
    )
    apps_exclude_flagged: bool = Field(
        True, description="Drop Buggy-APPS problems with moderation flags (as the original)."
    )
    dataset_revision: str | None = Field(
        None, description="Hub revision (commit, tag or branch) of a Hub dataset; None: the newest."
    )
    max_train_size: int | None = Field(
        None, description="Use at most this many training items.", ge=1
    )
    max_test_size: int | None = Field(None, description="Use at most this many test items.", ge=1)

    def validate(self) -> None:
        if self.dataset_revision is not None and not self.dataset_revision.strip():
            raise InvalidParameterError(
                "dataset_revision", self.dataset_revision, "None or a non-empty revision"
            )


def dataset_kind(dataset: str, field: str = "dataset") -> DatasetKind:
    """What ``dataset`` names: a shipped dataset, an existing folder or file, or a Hub id
    (InvalidParameterError, as ``field``, for a missing file or a malformed name)."""
    if dataset in SHIPPED_DATASET_SPLITS:
        return "shipped"
    path = Path(dataset).expanduser()
    if path.is_dir():
        return "directory"
    if path.is_file():
        return "file"
    if not dataset.lower().endswith(DATA_FILE_SUFFIXES) and _HUB_ID.match(dataset):
        return "hub"
    raise InvalidParameterError(
        field,
        dataset,
        f"one of {', '.join(map(repr, SHIPPED_DATASET_SPLITS))}, a Hub dataset id such as "
        "'lrhammond/buggy-apps', or the path of a dataset file or folder",
        reason="no such shipped dataset, file or folder, and not a Hub id",
    )


def refuse_inapplicable(
    options: CodeValidationParameters, family: str, dataset: str, prefix: str = ""
) -> None:
    """Refuse a field of ``options`` changed from its default that ``family`` ignores
    (``"flat"`` rows: ``difficulty`` applies; ``"apps"`` rows: the ``apps_*`` fields)."""
    defaults = CodeValidationParameters()
    unused = ("apps_difficulty", "apps_exclude_flagged") if family == "flat" else ("difficulty",)
    for name in (n for n in unused if getattr(options, n) != getattr(defaults, n)):
        what = "APPS-style rows" if family == "apps" else "flat rows (question, solution, y)"
        raise InvalidParameterError(
            prefix + name,
            getattr(options, name),
            f"its default for {dataset!r}",
            reason=f"{dataset!r} has {what}, which it does not apply to (see docs/dataset.md)",
        )
