"""Decide whether a solution is correct by running its tests in the sandbox.

:func:`parse_check_function` splits a HumanEval ``check(candidate)`` into one step per
statement, and :func:`check_solution` runs them against a solution (a :class:`CheckResult`).
"""

from __future__ import annotations

import ast
import json
import secrets
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nip.data.sandbox import SandboxResult, run_in_sandbox

_HARNESS = Path(__file__).with_name("_harness_child.py")

CheckOutcome = Literal["passed", "failed", "timeout", "crashed", "killed"]
"""Verdict on a solution: ``failed`` (a step failed or raised), ``timeout`` (none failed, one
ran out of time), ``crashed`` (could not be defined), ``killed`` (by the sandbox, see reason)."""

StepOutcome = Literal["passed", "failed", "error", "timeout", "not_run"]


@dataclass(frozen=True)
class CheckStep:
    """One top-level statement of a ``check`` function.

    Attributes:
        source: The statement's source, dedented (the solution is ``candidate``).
        compare: For ``assert left == right``, the two sides, re-evaluated on failure.
    """

    source: str
    compare: tuple[str, str] | None = None


@dataclass(frozen=True)
class CheckSuite:
    """The tests of one problem: set-up code, then steps run in order in one namespace."""

    entry_point: str
    setup: str
    steps: tuple[CheckStep, ...]


@dataclass(frozen=True)
class StepResult:
    """How one test step went.

    Attributes:
        outcome: ``failed`` is an assertion, ``error`` another exception, ``not_run`` the
            process ended first.
        got, expected: For a failed ``assert a == b``: ``repr`` of ``a`` and ``b``.
        seconds: Wall-clock time of the step (``None`` when it did not run).
    """

    index: int
    source: str
    outcome: StepOutcome
    error_type: str | None = None
    message: str | None = None
    got: str | None = None
    expected: str | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class CheckResult:
    """The verdict on a solution (see :data:`CheckOutcome`), with a one-line ``reason``, each
    step's result, each probe's ``repr`` (or ``<ErrorType>``) and the raw sandbox result."""

    outcome: CheckOutcome
    reason: str
    steps: tuple[StepResult, ...]
    probe_values: tuple[str, ...]
    sandbox: SandboxResult

    @property
    def failed_steps(self) -> tuple[StepResult, ...]:
        return tuple(s for s in self.steps if s.outcome in ("failed", "error"))

    @property
    def first_failure(self) -> StepResult | None:
        """The first failed step: a concrete counterexample."""
        failed = self.failed_steps
        return failed[0] if failed else None


def parse_check_function(test_source: str, entry_point: str) -> CheckSuite:
    """Split HumanEval test code into set-up code and one step per statement of ``check``.

    Raises:
        ValueError: If the source defines no ``check`` function.
    """
    module = ast.parse(test_source)
    check = next(
        (n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None
    )
    if check is None:
        raise ValueError("the test code defines no check(candidate) function")
    setup = "\n".join(
        ast.get_source_segment(test_source, node) or "" for node in module.body if node is not check
    )
    steps = []
    for node in check.body:
        segment = ast.get_source_segment(test_source, node, padded=True) or ""
        compare = None
        test = node.test if isinstance(node, ast.Assert) else None
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            compare = (ast.unparse(test.left), ast.unparse(test.comparators[0]))
        steps.append(CheckStep(textwrap.dedent(segment), compare))
    return CheckSuite(entry_point, setup, tuple(steps))


def check_solution(
    solution: str,
    suite: CheckSuite,
    *,
    probes: Sequence[str] = (),
    seed: int = 0,
    step_timeout_s: float = 1.0,
    timeout_s: float = 30.0,
    memory_mb: int = 512,
    stop_on_timeout: bool = False,
) -> CheckResult:
    """Run a solution against its tests in a fresh sandbox.

    Args:
        probes: Extra expressions whose values are reported (to compare two solutions).
        seed: Seed of ``random`` before each step and probe.
        step_timeout_s: CPU time of each step and probe; ``timeout_s`` is the whole run's.
        stop_on_timeout: Skip the remaining steps (``not_run``) once one times out.
    """
    nonce = f"@nip-{secrets.token_hex(8)}@"
    payload = {
        "nonce": nonce,
        "solution": solution,
        "entry_point": suite.entry_point,
        "setup": suite.setup,
        "steps": [{"source": s.source, "compare": s.compare} for s in suite.steps],
        "probes": list(probes),
        "seed": seed,
        "step_timeout_s": step_timeout_s,
        "stop_on_timeout": stop_on_timeout,
    }
    sandbox = run_in_sandbox(
        _HARNESS.read_text(encoding="utf-8"),
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        files={"payload.json": json.dumps(payload)},
    )
    records = [
        json.loads(line[len(nonce) :])
        for line in sandbox.stdout.splitlines()
        if line.startswith(nonce)
    ]
    return _verdict(suite, records, len(probes), sandbox)


def _step_result(index: int, step: CheckStep, record: dict) -> StepResult:
    fields = ("error_type", "message", "got", "expected", "seconds")
    return StepResult(
        index, step.source, record.get("outcome", "not_run"), **{k: record.get(k) for k in fields}
    )


def _verdict(
    suite: CheckSuite, records: list[dict], n_probes: int, sandbox: SandboxResult
) -> CheckResult:
    by_index = {r["index"]: r for r in records if r["kind"] == "step"}
    steps = tuple(_step_result(i, step, by_index.get(i, {})) for i, step in enumerate(suite.steps))
    probe_by_index = {r["index"]: r["value"] for r in records if r["kind"] == "probe"}
    probe_values = tuple(probe_by_index.get(i, "<not run>") for i in range(n_probes))
    load_error = next((r for r in records if r["kind"] == "load_error"), None)
    done = any(r["kind"] == "done" for r in records)

    def result(outcome: CheckOutcome, reason: str) -> CheckResult:
        return CheckResult(outcome, reason, steps, probe_values, sandbox)

    if sandbox.status in ("memory", "violation", "killed"):
        return result("killed", sandbox.reason)
    if load_error is not None:
        return result("crashed", f"{load_error['error_type']}: {load_error['message']}")
    failed = [s for s in steps if s.outcome in ("failed", "error")]
    if failed:
        first = failed[0]
        return result("failed", f"test {first.index} failed with {first.error_type}")
    if sandbox.status == "timeout" or any(s.outcome == "timeout" for s in steps):
        return result("timeout", sandbox.reason or "a test ran out of time")
    if not done:
        return result("crashed", sandbox.reason or "the harness stopped before the end")
    return result("passed", f"all {len(steps)} tests passed")
