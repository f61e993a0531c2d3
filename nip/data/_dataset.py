"""The records of a code-validation dataset (an item, its mutation and counterexample) and
:class:`CodeValidationDataset`, an immutable sequence of items with a readable summary."""

from __future__ import annotations

import dataclasses
import html
from collections import Counter
from collections.abc import Sequence
from dataclasses import KW_ONLY, InitVar, asdict, dataclass
from typing import TYPE_CHECKING, Any, overload

from nip.extras import needs

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Mutation:
    """The single edit (``operator``, at 1-based ``line``, ``before`` -> ``after``) that
    turned the correct solution into this incorrect one."""

    operator: str
    line: int
    before: str
    after: str


@dataclass(frozen=True)
class Counterexample:
    """The first test an incorrect solution fails: concrete evidence that it is wrong.

    Attributes:
        test: The failing test's source (it calls the solution as ``candidate``).
        error_type: ``AssertionError`` for a wrong answer, else the exception raised.
        got, expected: For ``assert candidate(...) == expected``, both sides.
    """

    test_index: int
    test: str
    error_type: str | None
    message: str | None = None
    got: str | None = None
    expected: str | None = None


@dataclass(frozen=True)
class CodeValidationItem:
    """One question-solution pair to judge: is the solution correct?

    Attributes:
        y: 1 if the solution is correct, 0 if not.
        split: ``"train"``, ``"test"`` or ``"validation"``, shared by a problem's items.
        difficulty: ``"easy"``/``"hard"`` for ``humaneval_cv`` (see ``docs/dataset.md``), the
            APPS difficulty for APPS data.
        source_task_id: The problem the item comes from (e.g. ``"HumanEval/0"``).
        prover_stance: A randomised prover's side (:func:`nip.protocols.datapoint_stance`).
        mutation, counterexample: For a mutant, the edit and the first test it fails.
        passes_visible_examples: Whether the solution gives the reference answers on the
            calls shown in the question (``None`` when there are none or it is unknown).
    """

    id: str
    question: str
    solution: str
    y: int
    split: str
    difficulty: str
    source_task_id: str
    prover_stance: int
    entry_point: str | None = None
    mutation: Mutation | None = None
    counterexample: Counterexample | None = None
    passes_visible_examples: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON-ready dict (nested records become dicts)."""
        return asdict(self)

    def to_row(self) -> dict[str, Any]:
        """A flat dict for a table: the mutation and counterexample fields are prefixed."""
        row = self.to_dict()
        for name, record in (("mutation", Mutation), ("counterexample", Counterexample)):
            nested = row.pop(name) or {}
            row |= {f"{name}_{key}": nested.get(key) for key in record.__dataclass_fields__}
        return row


@dataclass(eq=False, repr=False)
class CodeValidationDataset(Sequence[CodeValidationItem]):
    """The items of a code-validation dataset, in a fixed order.

    Args:
        name: Where they come from (a shipped dataset's name or a file path).
        revision: The Hugging Face Hub commit they come from (None for other sources).
        origin: ``"shipped"``, ``"file"``, ``"directory"``, ``"hub"`` or ``"cache"``.
    """

    items: InitVar[Sequence[CodeValidationItem]]
    _: KW_ONLY
    name: str = ""
    split: str = "all"
    difficulty: str = "all"
    revision: str | None = None
    origin: str = ""

    def __post_init__(self, items: Sequence[CodeValidationItem]) -> None:
        self._items = tuple(items)

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> CodeValidationItem: ...

    @overload
    def __getitem__(self, index: slice) -> CodeValidationDataset: ...

    def __getitem__(self, index: int | slice) -> CodeValidationItem | CodeValidationDataset:
        if isinstance(index, slice):
            return dataclasses.replace(self, items=self._items[index])
        return self._items[index]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CodeValidationDataset):
            return NotImplemented
        return self._items == other._items

    __hash__ = None  # type: ignore[assignment]

    def label_counts(self) -> dict[str, int]:
        """How many items are correct (``y=1``) and incorrect (``y=0``)."""
        counts = Counter(item.y for item in self._items)
        return {"correct": counts[1], "incorrect": counts[0]}

    def tier_counts(self) -> dict[tuple[str, int], int]:
        """How many items there are per ``(difficulty, y)``."""
        return dict(sorted(Counter((i.difficulty, i.y) for i in self._items).items()))

    def to_dataframe(self) -> pd.DataFrame:
        """One row per item; mutation and counterexample fields are flattened (needs pandas)."""
        with needs("dataframes"):
            import pandas as pd

        return pd.DataFrame([item.to_row() for item in self._items])

    def __repr__(self) -> str:
        labels = self.label_counts()
        tiers = Counter(item.difficulty for item in self._items)
        tier_text = ", ".join(f"{tier} {n}" for tier, n in sorted(tiers.items()))
        return (
            f"CodeValidationDataset({self.name!r}, split={self.split!r}, "
            f"difficulty={self.difficulty!r}: {len(self)} items, {labels['correct']} correct, "
            f"{labels['incorrect']} incorrect; {tier_text or 'empty'})"
        )

    def _repr_html_(self, max_rows: int = 5) -> str:
        esc = html.escape
        tiers = sorted({item.difficulty for item in self._items})
        counts = self.tier_counts()
        header = "".join(f"<th>{esc(t)}</th>" for t in tiers)
        body = "".join(
            f"<tr><th>{label}</th>"
            + "".join(f"<td>{counts.get((t, y), 0)}</td>" for t in tiers)
            + "</tr>"
            for label, y in (("correct (y=1)", 1), ("incorrect (y=0)", 0))
        )
        rows = "".join(
            "<tr>"
            f"<td>{esc(item.id)}</td><td>{item.y}</td><td>{esc(item.difficulty)}</td>"
            f"<td>{esc(item.mutation.operator if item.mutation else '')}</td>"
            f"<td><code>{esc(_first_line(item.question))}</code></td>"
            "</tr>"
            for item in self._items[:max_rows]
        )
        return (
            f"<div><b>{esc(repr(self))}</b>"
            f"<table><tr><th></th>{header}</tr>{body}</table>"
            "<table><tr><th>id</th><th>y</th><th>difficulty</th><th>mutation</th>"
            f"<th>question</th></tr>{rows}</table></div>"
        )


def _first_line(text: str, limit: int = 80) -> str:
    """The first line that says something (skipping imports and blank lines)."""
    lines = [line for line in text.splitlines() if line.strip()]
    chosen = next((line for line in lines if not line.startswith(("import", "from"))), "")
    return chosen if len(chosen) <= limit else chosen[: limit - 3] + "..."
