"""Turn rows into code-validation items, checking every field; read rows from JSONL or parquet.

The row layouts (flat, and grouped Buggy-APPS rows), item ids and the APPS filters are in
docs/dataset.md. A file's rows without a ``split`` get one from a hash of their problem. APPS
(``codeparrot/apps``) stores ``solutions`` as a JSON string and has no buggy solutions.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import numbers
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from nip.data._dataset import CodeValidationItem, Counterexample, Mutation
from nip.data._errors import DatasetFormatError
from nip.extras import needs
from nip.protocols import datapoint_stance

SPLITS = ("train", "test", "validation")
TRAIN_FRACTION = 0.8

#: Older or newer names of the same column on the Hub -> the name nip reads.
COLUMN_RENAMES = {
    "apps_split": "original_split",
    "apps_id": "original_id",
    "apps_problem_id": "original_problem_id",
    "apps_difficulty": "difficulty",
}

#: Columns that identify the problem, in order of preference.
PROBLEM_ID_COLUMNS = ("source_task_id", "original_problem_id", "original_id", "problem_id")

#: Flag values that mean "not flagged" once stripped and lower-cased.
_UNFLAGGED_TEXT = {"", "[]", "{}", "null", "none", "nan", "false"}


def normalise_columns(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with renamed columns under the names nip reads (an existing name wins)."""
    renamed = dict(row)
    for old, new in COLUMN_RENAMES.items():
        if old in renamed and new not in renamed:
            renamed[new] = renamed.pop(old)
    return renamed


def is_grouped(row: Mapping[str, Any]) -> bool:
    """Whether ``row`` is one problem with lists of solutions (the APPS layout)."""
    return "solutions" in row or "buggy_solutions" in row


def is_flagged(flags: Any) -> bool:
    """Whether a ``flags`` value records a moderation flag (None, NaN, empty, "[]"... do not;
    a mapping category -> bool does when any is true)."""
    if _is_missing(flags):
        return False
    if isinstance(flags, bytes):
        flags = flags.decode("utf-8", "replace")
    if isinstance(flags, str):
        text = flags.strip()
        if text.lower() in _UNFLAGGED_TEXT:
            return False
        try:
            parsed = json.loads(text)
        except ValueError:
            return True
        return is_flagged(parsed) if not isinstance(parsed, str) else bool(parsed.strip())
    if isinstance(flags, Mapping):
        return any(bool(value) for value in flags.values())
    if hasattr(flags, "__len__"):
        return len(flags) > 0
    return bool(flags)


def keeps_row(row: Any, apps_difficulty: str, exclude_flagged: bool) -> bool:
    """The original's filters: the APPS difficulty, and no moderation flags (a row that is no
    object is kept, to be refused when read)."""
    if not isinstance(row, Mapping):
        return True
    if apps_difficulty != "all" and row.get("difficulty") != apps_difficulty:
        return False
    return not (exclude_flagged and is_flagged(row.get("flags")))


def solution_list(value: Any) -> Any:
    """A list column as a sequence (a missing one empty); APPS stores ``solutions`` as a JSON
    string."""
    if _is_missing(value):
        return []
    if isinstance(value, str):
        if not value.strip():
            return []
        try:
            return json.loads(value)
        except ValueError:
            return value  # the caller reports "expected a list of solutions"
    return value


def items_from_rows(
    rows: Iterable[tuple[int, Any]], source: str | Path, *, split: str | None = None
) -> list[CodeValidationItem]:
    """The items of numbered rows, checking every field and that ids are unique.

    Args:
        source: Where the rows come from (named in errors; its stem makes fallback ids).
        split: The split of every row (a Hub split); None: the row's ``split``, else a hash.
    """
    path = Path(source)
    items: list[CodeValidationItem] = []
    for number, row in rows:
        if not isinstance(row, Mapping):
            raise DatasetFormatError(path, "expected an object per row", row=number)
        items.extend(_items_from_row(path, number, row, split))
    ids = [item.id for item in items]
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        duplicate = next(i for i in ids if i in seen or seen.add(i))
        raise DatasetFormatError(path, f"id {duplicate!r} appears more than once", field="id")
    return items


def read_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """The rows of a dataset file with their 1-based numbers, unchecked."""
    name = path.name.lower()
    if name.endswith(".parquet"):
        yield from _parquet_rows(path)
    elif name.endswith((".jsonl", ".jsonl.gz", ".ndjson")):
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as file:
            for number, line in enumerate(file, start=1):
                if not line.strip():
                    continue
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as error:
                    raise DatasetFormatError(
                        path, f"invalid JSON ({error.msg})", row=number
                    ) from None
    else:
        raise DatasetFormatError(path, "unknown file type: expected .jsonl, .jsonl.gz or .parquet")


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    with needs("parquet"):
        import pandas as pd
    try:
        frame = pd.read_parquet(path)
    except Exception as error:
        raise DatasetFormatError(path, f"not a readable parquet file ({error})") from None
    yield from enumerate(frame.to_dict("records"), start=1)


def _items_from_row(
    path: Path, number: int, row: Mapping[str, Any], split: str | None
) -> list[CodeValidationItem]:
    def fail(field: str, message: str) -> DatasetFormatError:
        return DatasetFormatError(path, message, row=number, field=field)

    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise fail("question", "missing, or not a non-empty string")
    problem = next((str(row[c]) for c in PROBLEM_ID_COLUMNS if not _is_missing(row.get(c))), None)
    original_split = row.get("original_split")
    if problem is not None and not _is_missing(original_split):
        problem = f"{original_split}-{problem}"  # APPS numbers problems per split
    task = problem if problem is not None else _digest(question)
    if split is None:
        split = row.get("split")
        if _is_missing(split):
            split = "train" if int(_digest(task), 16) % 100 < TRAIN_FRACTION * 100 else "test"
        elif split not in SPLITS:
            raise fail("split", f"{split!r} is not one of {', '.join(SPLITS)}")
    difficulty = row.get("difficulty")
    difficulty = "unknown" if _is_missing(difficulty) else str(difficulty)
    common = dict(question=question, split=split, difficulty=difficulty, source_task_id=task)
    grouped = is_grouped(row)
    if not _is_missing(row.get("id")):
        base_id = str(row["id"])
    elif grouped and problem is not None:
        base_id = problem  # stable across files and row orders
    else:
        base_id = f"{path.stem}-{number}"

    if grouped:
        items = []
        for field, y in (("solutions", 1), ("buggy_solutions", 0)):
            values = solution_list(row.get(field))
            if isinstance(values, str | bytes | Mapping) or not hasattr(values, "__len__"):
                raise fail(field, "expected a list of solutions")
            for k in range(len(values)):
                code = _solution_text(values[k])
                if code is None:
                    raise fail(
                        f"{field}[{k}]", "expected code, or an object with a 'solution' string"
                    )
                label = "correct" if y else "buggy"
                items.append(_item(f"{base_id}/{label}/{k}", code, y, common, {}))
        return items

    solution = row.get("solution")
    if not isinstance(solution, str):
        raise fail("solution", "missing, or not a string")
    y = row.get("y")
    if isinstance(y, bool) or not isinstance(y, numbers.Integral) or int(y) not in (0, 1):
        raise fail("y", f"expected 0 or 1 (an integer), got {y!r}")
    extras = {}
    try:
        if isinstance(row.get("mutation"), Mapping):
            extras["mutation"] = Mutation(**row["mutation"])
        if isinstance(row.get("counterexample"), Mapping):
            extras["counterexample"] = Counterexample(**row["counterexample"])
    except TypeError as error:
        raise fail(
            "mutation" if "mutation" not in extras else "counterexample", str(error)
        ) from None
    for field in ("entry_point", "passes_visible_examples"):
        if not _is_missing(row.get(field)):
            extras[field] = row[field]
    return [_item(base_id, solution, int(y), common, extras)]


def _item(item_id: str, solution: str, y: int, common: dict, extras: dict) -> CodeValidationItem:
    stance = datapoint_stance(solution)
    return CodeValidationItem(
        id=item_id, solution=solution, y=y, prover_stance=stance, **common, **extras
    )


def _solution_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("solution"), str):
        return value["solution"]
    return None


def _is_missing(value: Any) -> bool:
    """``None`` or a float NaN (how pandas fills gaps)."""
    return value is None or (isinstance(value, float) and value != value)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
