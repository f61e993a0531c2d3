"""The shipped labels hold up: running the tests again agrees with every label checked."""

from __future__ import annotations

import json
import random

import pytest

from nip.data import check_solution, load_code_validation_dataset
from nip.data.build_code_validation import PROBLEMS_FILE, STEP_TIMEOUT_S, read_problems
from nip.data.loader import SHIPPED_DIR

pytestmark = pytest.mark.timeout(120)

SAMPLE_SIZE = 20


def test_a_random_sample_of_labels_is_confirmed_by_running_the_tests():
    items = list(load_code_validation_dataset(split="all"))
    problems = read_problems()
    sample = random.Random(2024).sample(items, SAMPLE_SIZE)
    disagreements = []
    for item in sample:
        problem = problems[item.source_task_id]
        result = check_solution(item.solution, problem.suite, step_timeout_s=STEP_TIMEOUT_S)
        if item.y == 1 and result.outcome != "passed":
            disagreements.append((item.id, result.outcome, result.reason))
        if item.y == 0:
            failure = result.first_failure
            if result.outcome != "failed" or failure.index != item.counterexample.test_index:
                disagreements.append((item.id, result.outcome, result.reason))
    assert disagreements == []


def test_every_problem_in_the_dataset_ships_with_its_tests():
    problems = read_problems(SHIPPED_DIR / PROBLEMS_FILE)
    task_ids = {item.source_task_id for item in load_code_validation_dataset(split="all")}
    assert task_ids <= set(problems)
    for task_id in task_ids:
        assert problems[task_id].suite.steps


def test_each_problem_gives_one_correct_and_one_incorrect_item():
    items = load_code_validation_dataset(split="all")
    per_problem: dict[str, list[int]] = {}
    for item in items:
        per_problem.setdefault(item.source_task_id, []).append(item.y)
    assert all(sorted(labels) == [0, 1] for labels in per_problem.values())


def test_the_build_statistics_match_the_shipped_items():
    stats = json.loads((SHIPPED_DIR / "humaneval_cv_stats.json").read_text())
    assert stats["items"] == len(load_code_validation_dataset(split="all"))
    assert stats["reference_failures"] == []


def test_the_humaneval_licence_ships_with_the_data():
    notice = (SHIPPED_DIR / "LICENSE-HumanEval").read_text()
    assert "Copyright (c) OpenAI" in notice
    assert "Permission is hereby granted" in notice
