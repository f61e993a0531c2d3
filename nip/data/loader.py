"""Load a code-validation dataset: the shipped one, a Hub dataset, or a user's file or folder.

Every source's rows go the same way: column renames, their family's filters, one item per
solution, the split, and a seeded subsample.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nip.data._dataset import CodeValidationDataset, CodeValidationItem
from nip.data._errors import DatasetSplitError
from nip.data._hub import load_hub_splits
from nip.data._readers import (
    SPLITS,
    is_grouped,
    items_from_rows,
    keeps_row,
    normalise_columns,
    read_rows,
)
from nip.errors import InvalidParameterError
from nip.parameters.scenario import (
    SHIPPED_DATASET_SPLITS,
    AppsDifficulty,
    CodeValidationParameters,
    Difficulty,
    dataset_kind,
    refuse_inapplicable,
)

if TYPE_CHECKING:
    from nip.parameters import HyperParameters

SHIPPED_DIR = Path(__file__).with_name("code_validation")
SHIPPED_DATASETS = {name: SHIPPED_DIR / f"{name}.jsonl" for name in SHIPPED_DATASET_SPLITS}
"""Datasets that ship with nip, by name."""

_SPLIT_CHOICES = (*SPLITS, "all")


def load_code_validation_dataset(
    name_or_path: str | Path = "humaneval_cv",
    split: str = "train",
    difficulty: Difficulty = "all",
    max_size: int | None = None,
    seed: int = 0,
    *,
    apps_difficulty: AppsDifficulty = "interview",
    apps_exclude_flagged: bool = True,
    revision: str | None = None,
) -> CodeValidationDataset:
    """Load question-solution pairs labelled correct (``y=1``) or incorrect (``y=0``).

    Args:
        name_or_path: A shipped dataset's name (``"humaneval_cv"``), a Hugging Face Hub id
            (``"lrhammond/buggy-apps"``), a folder in the Hub's layout, or a ``.jsonl``,
            ``.jsonl.gz`` or ``.parquet`` file (the row layouts: docs/dataset.md).
        split: ``"train"``, ``"test"``, ``"validation"`` or ``"all"``; a file's rows without
            a ``split`` get one by problem (problems never straddle splits).
        difficulty: For flat rows (``humaneval_cv``): ``"easy"``, ``"hard"`` or ``"all"``.
        max_size: Keep at most this many items, drawn with ``seed``, half of each label
            where the data allow.
        apps_difficulty: For APPS-style rows: ``"introductory"``, ``"interview"``,
            ``"competition"`` or ``"all"``.
        apps_exclude_flagged: For APPS-style rows: drop problems with moderation flags.
        revision: For a Hub dataset: the commit, tag or branch to load.

    Returns:
        The items, in source order; ``revision`` holds the Hub commit they come from.

    Raises:
        InvalidParameterError: A value not allowed, or a filter that does not apply.
        DatasetSplitError, DatasetFormatError (names row and field), DatasetUnavailableError.

    """
    _check_arguments(split, max_size)
    options = CodeValidationParameters(  # checks both difficulties
        difficulty=difficulty,
        apps_difficulty=apps_difficulty,
        apps_exclude_flagged=apps_exclude_flagged,
    )
    name = str(name_or_path)
    kind = dataset_kind(name, "name_or_path")
    if revision is not None and kind != "hub":
        raise InvalidParameterError(
            "revision", revision, "None for a dataset that is not on the Hub"
        )
    numbered, source, resolved, origin = _numbered_rows(name, kind, split, revision)
    items = _items(numbered, source, options)
    if kind in ("shipped", "file"):
        _check_file_split(name, split, items)
        items = [item for item in items if split in ("all", item.split)]
    if max_size is not None and max_size < len(items):
        items = balanced_subsample(items, max_size, seed)
    shown = name if kind in ("shipped", "hub") else str(Path(name).expanduser())
    return CodeValidationDataset(
        items, name=shown, split=split, difficulty=difficulty, revision=resolved, origin=origin
    )


def load_configured_dataset(hyper_params: HyperParameters, split: str) -> CodeValidationDataset:
    """The configured dataset's ``split`` (``max_train_size`` or ``max_test_size`` bounds it)."""
    options = hyper_params.code_validation
    return load_code_validation_dataset(
        hyper_params.dataset,
        split=split,
        difficulty=options.difficulty,
        max_size=options.max_train_size if split == "train" else options.max_test_size,
        seed=hyper_params.seed,
        apps_difficulty=options.apps_difficulty,
        apps_exclude_flagged=options.apps_exclude_flagged,
        revision=options.dataset_revision,
    )


def dataset_provenance(dataset: CodeValidationDataset) -> dict[str, Any]:
    """What a run records about its data; the fingerprint is a SHA-256 of ids, labels, solutions."""
    digest = hashlib.sha256()
    for item in dataset:
        digest.update(f"{item.id}\0{item.y}\0{item.solution}\0".encode())
    return {
        "dataset": dataset.name,
        "split": dataset.split,
        "revision": dataset.revision,
        "origin": dataset.origin,
        "items": len(dataset),
        "labels": dataset.label_counts(),
        "fingerprint": digest.hexdigest(),
    }


def balanced_subsample(
    items: list[CodeValidationItem], size: int, seed: int
) -> list[CodeValidationItem]:
    """Draw ``size`` items, half of each label where possible, keeping their order."""
    rng = random.Random(seed)
    by_label = {y: [i for i, item in enumerate(items) if item.y == y] for y in (0, 1)}
    n_correct = min(size // 2 + size % 2 * rng.randint(0, 1), len(by_label[1]))
    n_incorrect = min(size - n_correct, len(by_label[0]))
    n_correct = min(size - n_incorrect, len(by_label[1]))  # fill up when one label is short
    chosen = rng.sample(by_label[1], n_correct) + rng.sample(by_label[0], n_incorrect)
    return [items[i] for i in sorted(chosen)]


def _check_arguments(split: str, max_size: int | None) -> None:
    if split not in _SPLIT_CHOICES:
        raise InvalidParameterError("split", split, ", ".join(map(repr, _SPLIT_CHOICES)))
    if max_size is not None and (
        isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1
    ):
        raise InvalidParameterError("max_size", max_size, "a positive integer or None")


def _numbered_rows(
    name: str, kind: str, split: str, revision: str | None
) -> tuple[list[tuple[int, Any, str | None]], str, str | None, str]:
    """``(row number, row, split)`` triples, source, resolved Hub revision and origin."""
    if kind in ("shipped", "file"):
        path = SHIPPED_DATASETS[name] if kind == "shipped" else Path(name).expanduser()
        return [(n, row, None) for n, row in read_rows(path)], str(path), None, kind
    splits, resolved, origin = load_hub_splits(name, revision)
    if split != "all" and split not in splits:
        raise DatasetSplitError(name, split, tuple(splits))
    chosen = list(splits) if split == "all" else [split]
    numbered = [(n, row, s) for s in chosen for n, row in enumerate(splits[s], start=1)]
    return numbered, name, resolved, origin


def _items(
    numbered: list[tuple[int, Any, str | None]], source: str, options: CodeValidationParameters
) -> list[CodeValidationItem]:
    """Items of the rows that pass the filters of their family (flat or APPS)."""
    rows = [
        (n, normalise_columns(row) if isinstance(row, dict) else row, s) for n, row, s in numbered
    ]
    family = "apps" if any(isinstance(r, dict) and is_grouped(r) for _, r, _ in rows) else "flat"
    refuse_inapplicable(options, family, source)
    if family == "apps":
        level = _apps_level(rows, options.apps_difficulty, source)
        rows = [(n, r, s) for n, r, s in rows if keeps_row(r, level, options.apps_exclude_flagged)]
    items: list[CodeValidationItem] = []
    for row_split in dict.fromkeys(s for _, _, s in rows):
        kept = [(n, row) for n, row, s in rows if s == row_split]
        items += items_from_rows(kept, source, split=row_split)
    if family == "flat":
        items = [i for i in items if options.difficulty in ("all", i.difficulty)]
    return items


def _apps_level(rows: list[tuple[int, Any, str | None]], level: str, source: str) -> str:
    """The APPS difficulty to keep; rows without one accept only the default or ``all``."""
    if any(isinstance(row, dict) and row.get("difficulty") for _, row, _ in rows):
        return level
    if level not in ("all", CodeValidationParameters().apps_difficulty):
        raise InvalidParameterError(
            "apps_difficulty",
            level,
            f"its default or 'all' for {source!r}",
            reason=f"the rows of {source!r} have no difficulty to filter on",
        )
    return "all"


def _check_file_split(name: str, split: str, items: list[CodeValidationItem]) -> None:
    """A file has train and test (by hash when rows have none); other splits must be there."""
    available = tuple(dict.fromkeys(("train", "test", *(item.split for item in items))))
    if split not in ("all", *available):
        raise DatasetSplitError(name, split, available)
