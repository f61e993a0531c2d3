"""Parameters of the code-validation scenario and its dataset, and which of them apply where.

Two families of dataset take different filters:

- the shipped ``humaneval_cv`` (and flat files like it) is filtered by ``difficulty``
  (``easy`` / ``hard`` / ``all``);
- APPS-derived data (``lrhammond/buggy-apps``, ``codeparrot/apps``, local copies of them)
  is filtered by the original's ``apps_difficulty`` and ``apps_exclude_flagged``, and a
  Hub dataset can be pinned with ``dataset_revision``.

A field that does not apply to the chosen dataset must keep its default: a changed value
would otherwise be silently ignored. :func:`dataset_kind` and :func:`inapplicable_fields`
decide this at configuration time where the name alone tells; a local file or folder is
checked when its rows are read (the layout of the rows tells the family).
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
    """Which part of the code-validation dataset a run uses.

    ``difficulty`` applies to ``humaneval_cv`` and other flat datasets; ``apps_difficulty``,
    ``apps_exclude_flagged`` to APPS-derived data; ``dataset_revision`` to Hub datasets.
    Setting a field away from its default for a dataset it does not apply to is refused.
    """

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


def dataset_kind(dataset: str) -> DatasetKind | None:
    """What ``dataset`` names: a shipped dataset, an existing folder or file, or a Hub id.

    Returns None when it is none of these (a missing file, or a malformed name).
    """
    if dataset in SHIPPED_DATASET_SPLITS:
        return "shipped"
    path = Path(dataset).expanduser()
    if path.is_dir():
        return "directory"
    if path.is_file():
        return "file"
    if dataset.lower().endswith(DATA_FILE_SUFFIXES) or not _HUB_ID.match(dataset):
        return None
    return "hub"


def inapplicable_fields(options: CodeValidationParameters, family: str) -> dict[str, object]:
    """The fields of ``options`` changed from their defaults that ``family`` does not use.

    Args:
        options: The code-validation parameters.
        family: ``"flat"`` (humaneval_cv-like rows: ``difficulty`` applies) or ``"apps"``
            (Buggy-APPS-like rows: the ``apps_*`` fields apply).

    Returns:
        Field name -> value, for each field that would be ignored.
    """
    defaults = CodeValidationParameters()
    unused = ("apps_difficulty", "apps_exclude_flagged") if family == "flat" else ("difficulty",)
    return {
        name: getattr(options, name)
        for name in unused
        if getattr(options, name) != getattr(defaults, name)
    }
