"""Mutants change one span of the original text and leave the rest as written."""

from __future__ import annotations

import difflib

from nip.data._source import example_calls, strip_docstrings
from nip.data.mutations import OPERATORS, mutate

SOLUTION = '''\
def count_small(numbers, limit):
    """Count the numbers below the limit."""
    if not numbers:
        return 0
    total = 0
    for i in range(len(numbers)):  # every index
        if numbers[i] < limit and numbers[i] != -1:
            total += 1
    return min(total, len(numbers[1:]))
'''


def _mutants():
    return mutate(strip_docstrings(SOLUTION), "count_small")


def test_every_mutant_changes_exactly_one_place_and_keeps_comments():
    original = strip_docstrings(SOLUTION).splitlines()
    for mutant in _mutants():
        changed = [
            line
            for line in difflib.ndiff(original, mutant.source.splitlines())
            if line.startswith(("- ", "+ "))
        ]
        assert 1 <= len(changed) <= 2 * 2, mutant
        assert "# every index" in mutant.source


def test_mutants_are_distinct_compile_and_differ_from_the_original():
    mutants = _mutants()
    sources = [m.source for m in mutants]
    assert len(set(sources)) == len(sources)
    assert strip_docstrings(SOLUTION) not in sources
    for source in sources:
        compile(source, "<mutant>", "exec")


def test_mutants_record_the_operator_line_and_change():
    by_change = {(m.operator, m.before.strip(), m.after.strip()) for m in _mutants()}
    assert ("comparison", "if numbers[i] < limit and numbers[i] != -1:",
            "if numbers[i] <= limit and numbers[i] != -1:") in by_change  # fmt: skip
    assert ("boolean", "if numbers[i] < limit and numbers[i] != -1:",
            "if numbers[i] < limit or numbers[i] != -1:") in by_change  # fmt: skip
    assert ("builtin_swap", "return min(total, len(numbers[1:]))",
            "return max(total, len(numbers[1:]))") in by_change  # fmt: skip
    assert ("drop_guard", "if not numbers:\n        return 0", "") in by_change


def test_bounds_are_shifted_with_constants_folded_rather_than_appended():
    afters = {m.after.strip() for m in _mutants() if m.operator in ("range_bound", "slice_bound")}
    assert "for i in range(len(numbers) + 1):  # every index" in afters
    assert "return min(total, len(numbers[2:]))" in afters
    assert "return min(total, len(numbers[:]))" not in afters
    negative = {m.after.strip() for m in _mutants() if m.operator == "constant"}
    assert "if numbers[i] < limit and numbers[i] != -2:" in negative


def test_many_kinds_of_operator_apply_to_an_ordinary_function():
    operators = {m.operator for m in _mutants()}
    assert operators <= set(OPERATORS)
    assert len(operators) >= 8


def test_the_docstring_and_signature_are_never_mutated():
    for mutant in _mutants():
        assert mutant.source.startswith("def count_small(numbers, limit):\n")
        assert "Count the numbers" not in mutant.source


def test_docstring_stripping_keeps_code_and_comments_verbatim():
    stripped = strip_docstrings(SOLUTION)
    assert '"""' not in stripped
    assert "    for i in range(len(numbers)):  # every index\n" in stripped


def test_example_calls_are_read_from_the_docstring_of_the_entry_point():
    prompt = '''def f(xs):
    """Sum.
    >>> f([1, 2])
    3
    For example: f([]) == 0, and f(xs) is prose.
    """
'''
    assert example_calls(prompt, "f") == ["f([1, 2])", "f([])"]
