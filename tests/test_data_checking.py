"""Solutions are judged by running their tests, one step at a time, in the sandbox."""

from __future__ import annotations

import pytest

from nip.data import check_solution
from nip.data.checking import parse_check_function

pytestmark = pytest.mark.timeout(60)

TESTS = """
METADATA = {"author": "test"}


def check(candidate):
    assert candidate(2, 3) == 5
    assert candidate(-1, 1) == 0
    for x in range(5):
        assert candidate(x, 0) == x
"""

ADD = "def add(a, b):\n    return a + b\n"


@pytest.fixture
def suite():
    return parse_check_function(TESTS, "add")


def test_a_check_function_is_split_into_one_step_per_statement(suite):
    assert [step.source.split("\n")[0] for step in suite.steps] == [
        "assert candidate(2, 3) == 5",
        "assert candidate(-1, 1) == 0",
        "for x in range(5):",
    ]
    assert suite.steps[0].compare == ("candidate(2, 3)", "5")
    assert "METADATA" in suite.setup


def test_a_correct_solution_passes_every_step(suite):
    result = check_solution(ADD, suite)
    assert result.outcome == "passed"
    assert [step.outcome for step in result.steps] == ["passed"] * 3
    assert result.first_failure is None


def test_a_wrong_answer_fails_with_the_test_and_the_value_returned(suite):
    result = check_solution("def add(a, b):\n    return a - b\n", suite)
    assert result.outcome == "failed"
    failure = result.first_failure
    assert failure.index == 0
    assert failure.error_type == "AssertionError"
    assert (failure.got, failure.expected) == ("-1", "5")
    assert [step.outcome for step in result.steps] == ["failed", "failed", "passed"]


def test_an_exception_in_a_test_counts_as_a_failure_with_its_type(suite):
    result = check_solution("def add(a, b):\n    return [a][b]\n", suite)
    assert result.outcome == "failed"
    assert result.first_failure.error_type == "IndexError"
    assert result.first_failure.outcome == "error"


def test_a_solution_that_cannot_be_defined_crashes(suite):
    result = check_solution("def add(a, b):\n    return a +\n", suite)
    assert result.outcome == "crashed"
    assert "SyntaxError" in result.reason


def test_a_step_that_loops_forever_times_out_and_the_others_still_run(suite):
    solution = "def add(a, b):\n    while (a, b) == (2, 3):\n        pass\n    return a + b\n"
    result = check_solution(solution, suite, step_timeout_s=0.5)
    assert result.outcome == "timeout"
    assert [step.outcome for step in result.steps] == ["timeout", "passed", "passed"]


def test_stop_on_timeout_skips_the_remaining_steps(suite):
    solution = "def add(a, b):\n    while True:\n        pass\n"
    result = check_solution(solution, suite, step_timeout_s=0.3, stop_on_timeout=True)
    assert result.outcome == "timeout"
    assert [step.outcome for step in result.steps] == ["timeout", "not_run", "not_run"]


def test_a_forbidden_operation_kills_the_run_with_the_reason(suite):
    solution = "import os\n\ndef add(a, b):\n    os.system('true')\n    return a + b\n"
    result = check_solution(solution, suite)
    assert result.outcome == "killed"
    assert "os.system" in result.reason


def test_printing_does_not_confuse_the_result(suite):
    solution = 'def add(a, b):\n    print(\'{"kind": "done"}\', end="")\n    return a + b\n'
    assert check_solution(solution, suite).outcome == "passed"


def test_probes_report_the_value_of_each_expression(suite):
    result = check_solution(ADD, suite, probes=["add(1, 1)", "add('a', 'b')", "add(1)"])
    assert result.probe_values == ("2", "'ab'", "<TypeError>")


def test_random_inputs_are_the_same_in_every_run():
    tests = "import random\n\ndef check(candidate):\n    assert candidate(random.random()) < 0\n"
    suite = parse_check_function(tests, "f")
    runs = [check_solution("def f(x):\n    return x\n", suite) for _ in range(2)]
    assert runs[0].first_failure.got == runs[1].first_failure.got


def test_tests_can_call_helpers_defined_by_the_solution():
    tests = "def check(candidate):\n    assert candidate(3) == helper(3)\n"
    solution = "def helper(x):\n    return 2 * x\n\ndef double(x):\n    return helper(x)\n"
    suite = parse_check_function(tests, "double")
    assert check_solution(solution, suite).outcome == "passed"
