"""APPS-derived rows (Buggy-APPS, APPS): the Hub's column renames and the original's filters.

The columns are in docs/dataset.md; APPS (``codeparrot/apps``) stores ``solutions`` as a JSON
string of code strings and has no buggy solutions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

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
    if flags is None or (isinstance(flags, float) and flags != flags):
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


def keeps_row(row: Mapping[str, Any], apps_difficulty: str, exclude_flagged: bool) -> bool:
    """The original's filters: the APPS difficulty, and no moderation flags."""
    if apps_difficulty != "all" and row.get("difficulty") != apps_difficulty:
        return False
    return not (exclude_flagged and is_flagged(row.get("flags")))


def solution_list(value: Any) -> Any:
    """A list column as a sequence; APPS stores ``solutions`` as a JSON string."""
    if isinstance(value, str):
        if not value.strip():
            return []
        try:
            return json.loads(value)
        except ValueError:
            return value  # the caller reports "expected a list of solutions"
    return value
