"""Label every mutant of one problem by running the tests (the slow part of the build).

The rules are in ``docs/dataset.md``: a failing mutant is incorrect; one that passes, or runs
out of time or memory, is never used.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from nip.data.checking import CheckResult, check_solution
from nip.data.humaneval import Problem
from nip.data.mutations import Mutant, mutate

STEP_TIMEOUT_S = 1.0
"""CPU time allowed to one test step; the slowest reference step takes about 0.04 s."""

RUN_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Candidate:
    """A mutant with the verdict of its tests.

    Attributes:
        verdict: ``wrong_answer`` (first failure an assertion), ``error`` (an exception),
            ``survived``, ``timeout`` or ``resource`` (killed, out of memory, crashed).
        only_assertions: Every failing step failed an assertion (a wrong answer).
        passes_visible_examples: Same as the reference on every call in the statement;
            ``None`` when it shows none.
    """

    mutant: Mutant
    verdict: str
    failed_tests: int
    total_tests: int
    only_assertions: bool
    passes_visible_examples: bool | None
    counterexample: dict | None

    @property
    def is_incorrect(self) -> bool:
        """A label we can trust: it failed a test, and nothing ran out of time or memory."""
        return self.verdict in ("wrong_answer", "error")

    @property
    def difficulty(self) -> str:
        """``hard``: passes the visible examples, fails one hidden test, by a wrong answer."""
        hard = (
            self.passes_visible_examples is True and self.failed_tests == 1 and self.only_assertions
        )
        return "hard" if hard else "easy"


@dataclass(frozen=True)
class ProblemReport:
    """Everything the build learned about one problem."""

    problem: Problem
    reference_ok: bool
    candidates: tuple[Candidate, ...]


def label_problem(problem: Problem, seed: int = 0) -> ProblemReport:
    """Run the reference and every mutant of ``problem`` through its tests."""
    check = functools.partial(
        check_solution,
        suite=problem.suite,
        probes=problem.examples,
        seed=seed,
        step_timeout_s=STEP_TIMEOUT_S,
        timeout_s=RUN_TIMEOUT_S,
    )
    reference = check(problem.reference)
    if reference.outcome != "passed":
        return ProblemReport(problem, False, ())
    # Examples the reference cannot evaluate (pseudo-code, wrong arity) are not examples.
    visible = {
        i: value for i, value in enumerate(reference.probe_values) if not value.startswith("<")
    }
    candidates = []
    for mutant in mutate(problem.reference, problem.entry_point):
        result = check(mutant.source, stop_on_timeout=True)
        candidates.append(_candidate(mutant, result, visible))
    return ProblemReport(problem, True, tuple(candidates))


def _candidate(mutant: Mutant, result: CheckResult, visible: dict[int, str]) -> Candidate:
    failed = result.failed_steps
    out_of_resources = any(s.outcome == "timeout" for s in result.steps) or any(
        s.error_type in ("MemoryError", "RecursionError") for s in failed
    )
    if result.outcome in ("killed", "crashed") or (out_of_resources and failed):
        verdict = "resource"
    elif result.outcome == "timeout":
        verdict = "timeout"
    elif result.outcome == "passed":
        verdict = "survived"
    elif failed[0].outcome == "failed":
        verdict = "wrong_answer"
    else:
        verdict = "error"
    passes_visible = (
        all(result.probe_values[i] == value for i, value in visible.items()) if visible else None
    )
    first = result.first_failure
    counterexample = first and {
        "test_index": first.index,
        "test": first.source.strip(),
        "error_type": first.error_type,
        "message": first.message or None,
        "got": first.got,
        "expected": first.expected,
    }
    return Candidate(
        mutant=mutant,
        verdict=verdict,
        failed_tests=len(failed),
        total_tests=len(result.steps),
        only_assertions=all(s.outcome == "failed" for s in failed),
        passes_visible_examples=passes_visible,
        counterexample=counterexample,
    )
