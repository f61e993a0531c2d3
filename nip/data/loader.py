"""Load a code-validation dataset: the shipped one by name, or a user's file by path."""

from __future__ import annotations

import random
from pathlib import Path
from typing import get_args

from nip.data._dataset import CodeValidationDataset
from nip.data._readers import SPLITS, read_items
from nip.data._records import CodeValidationItem
from nip.errors import InvalidParameterError
from nip.parameters.scenario import Difficulty

SHIPPED_DIR = Path(__file__).with_name("code_validation")
SHIPPED_DATASETS = {"humaneval_cv": SHIPPED_DIR / "humaneval_cv.jsonl"}
"""Datasets that ship with nip, by name."""

_SPLIT_CHOICES = (*SPLITS, "all")


def load_code_validation_dataset(
    name_or_path: str | Path = "humaneval_cv",
    split: str = "train",
    difficulty: Difficulty = "all",
    max_size: int | None = None,
    seed: int = 0,
) -> CodeValidationDataset:
    """Load question-solution pairs labelled correct (``y=1``) or incorrect (``y=0``).

    Args:
        name_or_path: A shipped dataset's name (``"humaneval_cv"``), or the path of a
            ``.jsonl``, ``.jsonl.gz`` or ``.parquet`` file with ``question``, ``solution`` and
            ``y`` per row (or Buggy-APPS rows with ``solutions`` and ``buggy_solutions``).
        split: ``"train"``, ``"test"`` or ``"all"``. Problems never straddle splits.
        difficulty: ``"easy"``, ``"hard"`` or ``"all"`` (see ``docs/dataset.md``).
        max_size: Keep at most this many items, drawn with ``seed``, half of each label
            where the data allow.
        seed: Seed of the subsample.

    Returns:
        The items, in file order.

    Raises:
        InvalidParameterError: An argument has a value that is not allowed.
        DatasetFormatError: The file is malformed (the message names the row and field).

    Example:
        >>> dataset = load_code_validation_dataset(split="test", difficulty="hard")
        >>> {item.split for item in dataset}, {item.difficulty for item in dataset}
        ({'test'}, {'hard'})
    """
    if split not in _SPLIT_CHOICES:
        raise InvalidParameterError("split", split, ", ".join(map(repr, _SPLIT_CHOICES)))
    if difficulty not in get_args(Difficulty):
        raise InvalidParameterError(
            "difficulty", difficulty, ", ".join(map(repr, get_args(Difficulty)))
        )
    if max_size is not None and (
        isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1
    ):
        raise InvalidParameterError("max_size", max_size, "a positive integer or None")
    path = _resolve(name_or_path)
    items = [
        item
        for item in read_items(path)
        if split in ("all", item.split) and difficulty in ("all", item.difficulty)
    ]
    if max_size is not None and max_size < len(items):
        items = balanced_subsample(items, max_size, seed)
    name = (
        name_or_path
        if isinstance(name_or_path, str) and name_or_path in SHIPPED_DATASETS
        else str(path)
    )
    return CodeValidationDataset(items, name=name, split=split, difficulty=difficulty)


def balanced_subsample(
    items: list[CodeValidationItem], size: int, seed: int
) -> list[CodeValidationItem]:
    """Draw ``size`` items, half of each label where possible, keeping their order.

    The same items, seed and size always give the same subsample.
    """
    rng = random.Random(seed)
    by_label = {y: [i for i, item in enumerate(items) if item.y == y] for y in (0, 1)}
    n_correct = min(size // 2 + size % 2 * rng.randint(0, 1), len(by_label[1]))
    n_incorrect = min(size - n_correct, len(by_label[0]))
    n_correct = min(size - n_incorrect, len(by_label[1]))  # fill up when one label is short
    chosen = rng.sample(by_label[1], n_correct) + rng.sample(by_label[0], n_incorrect)
    return [items[i] for i in sorted(chosen)]


def _resolve(name_or_path: str | Path) -> Path:
    if isinstance(name_or_path, str) and name_or_path in SHIPPED_DATASETS:
        return SHIPPED_DATASETS[name_or_path]
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        allowed = f"one of {', '.join(map(repr, SHIPPED_DATASETS))}, or the path of a dataset file"
        raise InvalidParameterError(
            "name_or_path", str(name_or_path), allowed, reason="no such dataset or file"
        )
    return path
