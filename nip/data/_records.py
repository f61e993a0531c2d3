"""The records of a code-validation dataset: one item, its mutation and its counterexample."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


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
        row = {k: v for k, v in self.to_dict().items() if k not in ("mutation", "counterexample")}
        for name in ("mutation", "counterexample"):
            fields = (Mutation if name == "mutation" else Counterexample).__dataclass_fields__
            nested = getattr(self, name)
            for key in fields:
                row[f"{name}_{key}"] = getattr(nested, key) if nested is not None else None
        return row
