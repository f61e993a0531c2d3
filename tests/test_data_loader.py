"""Loading code-validation datasets: the shipped one, and a user's JSONL or parquet files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from nip.data import (
    CodeValidationDataset,
    CodeValidationItem,
    DatasetFormatError,
    load_code_validation_dataset,
)
from nip.errors import InvalidParameterError, NipError
from nip.protocols import datapoint_stance

pytestmark = pytest.mark.timeout(60)


def _write_jsonl(path: Path, rows: list) -> Path:
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _row(i: int, y: int, **extra) -> dict:
    return {"question": f"Problem {i // 2}", "solution": f"solution {i}", "y": y, **extra}


# ------------------------------------------------------------------ the shipped dataset
def test_the_shipped_dataset_loads_by_default_as_the_training_split():
    dataset = load_code_validation_dataset()
    assert isinstance(dataset, CodeValidationDataset)
    assert len(dataset) > 100
    assert {item.split for item in dataset} == {"train"}
    assert all(isinstance(item, CodeValidationItem) for item in dataset)


def test_no_problem_appears_in_both_splits():
    train = load_code_validation_dataset(split="train")
    test = load_code_validation_dataset(split="test")
    assert not {i.source_task_id for i in train} & {i.source_task_id for i in test}
    assert len(train) > len(test) > 0


@pytest.mark.parametrize("split", ["train", "test"])
@pytest.mark.parametrize("difficulty", ["easy", "hard", "all"])
def test_each_split_and_tier_has_as_many_correct_as_incorrect_items(split, difficulty):
    dataset = load_code_validation_dataset(split=split, difficulty=difficulty)
    labels = dataset.label_counts()
    assert labels["correct"] == labels["incorrect"] > 0


def test_the_difficulty_filter_keeps_only_that_tier():
    hard = load_code_validation_dataset(split="all", difficulty="hard")
    assert {item.difficulty for item in hard} == {"hard"}


def test_incorrect_items_carry_their_mutation_and_counterexample():
    dataset = load_code_validation_dataset(split="all")
    for item in dataset:
        if item.y == 0:
            assert item.mutation is not None and item.mutation.operator
            assert item.counterexample is not None and item.counterexample.test
        else:
            assert item.mutation is None and item.counterexample is None


def test_hard_bugs_pass_the_visible_examples_and_fail_by_a_wrong_answer():
    for item in load_code_validation_dataset(split="all", difficulty="hard"):
        if item.y == 0:
            assert item.passes_visible_examples is True
            assert item.counterexample.error_type == "AssertionError"


def test_prover_stance_is_the_hash_parity_of_the_solution():
    for item in load_code_validation_dataset(split="test"):
        assert item.prover_stance == datapoint_stance(item.solution)


def test_items_are_frozen():
    item = load_code_validation_dataset()[0]
    with pytest.raises(AttributeError):
        item.y = 1 - item.y  # type: ignore[misc]


# ------------------------------------------------------------------ subsampling
def test_max_size_gives_the_same_items_for_the_same_seed():
    first = load_code_validation_dataset(max_size=20, seed=3)
    again = load_code_validation_dataset(max_size=20, seed=3)
    other = load_code_validation_dataset(max_size=20, seed=4)
    assert [i.id for i in first] == [i.id for i in again]
    assert [i.id for i in first] != [i.id for i in other]


def test_max_size_keeps_the_classes_balanced():
    dataset = load_code_validation_dataset(max_size=30, seed=1)
    assert len(dataset) == 30
    assert dataset.label_counts() == {"correct": 15, "incorrect": 15}


def test_max_size_fills_up_from_the_larger_class_when_one_is_short(tmp_path):
    rows = [_row(i, 1) for i in range(8)] + [_row(100, 0)]
    path = _write_jsonl(tmp_path / "skewed.jsonl", rows)
    dataset = load_code_validation_dataset(path, split="all", max_size=5)
    assert dataset.label_counts() == {"correct": 4, "incorrect": 1}


def test_max_size_larger_than_the_dataset_keeps_everything():
    full = load_code_validation_dataset(split="test")
    assert load_code_validation_dataset(split="test", max_size=10_000) == full


# ------------------------------------------------------------------ arguments
@pytest.mark.parametrize(
    ("argument", "value", "allowed"),
    [
        ("split", "dev", "'validation'"),
        ("difficulty", "medium", "'hard'"),
        ("max_size", 0, "positive"),
    ],
)
def test_a_bad_argument_is_an_error_naming_the_allowed_values(argument, value, allowed):
    with pytest.raises(InvalidParameterError, match=allowed) as caught:
        load_code_validation_dataset(**{argument: value})
    assert caught.value.field == argument


def test_an_unknown_name_that_is_not_a_file_is_an_error():
    with pytest.raises(InvalidParameterError, match="humaneval_cv"):
        load_code_validation_dataset("no_such_dataset")


# ------------------------------------------------------------------ user files
def test_a_users_jsonl_file_loads_with_splits_derived_by_problem(tmp_path):
    rows = [_row(i, i % 2) for i in range(40)]
    path = _write_jsonl(tmp_path / "mine.jsonl", rows)
    everything = load_code_validation_dataset(path, split="all")
    assert len(everything) == 40
    by_question: dict[str, set[str]] = {}
    for item in everything:
        by_question.setdefault(item.question, set()).add(item.split)
    assert all(len(splits) == 1 for splits in by_question.values())
    assert {item.difficulty for item in everything} == {"unknown"}


def test_a_users_file_can_give_its_own_split_and_ids(tmp_path):
    rows = [_row(0, 1, split="test", id="a"), _row(1, 0, split="train", id="b")]
    path = _write_jsonl(tmp_path / "mine.jsonl", rows)
    assert [i.id for i in load_code_validation_dataset(path, split="test")] == ["a"]


def test_a_gzipped_jsonl_file_loads(tmp_path):
    path = tmp_path / "mine.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as file:
        file.write(json.dumps(_row(0, 1)) + "\n" + json.dumps(_row(1, 0)) + "\n")
    assert len(load_code_validation_dataset(path, split="all")) == 2


@pytest.mark.parametrize(
    ("bad_line", "field"),
    [
        ({"question": "Q", "y": 1}, "solution"),
        ({"solution": "x = 1", "y": 1}, "question"),
        ({"question": "Q", "solution": "x = 1", "y": "1"}, "y"),
        ({"question": "Q", "solution": "x = 1", "y": 2}, "y"),
        ({"question": "Q", "solution": "x = 1", "y": 1, "split": "dev"}, "split"),
        ('{"question": "Q", "solution": ', None),
    ],
    ids=[
        "missing-solution",
        "missing-question",
        "string-y",
        "y-not-0-or-1",
        "bad-split",
        "bad-json",
    ],
)
def test_a_malformed_row_names_the_file_row_and_field(tmp_path, bad_line, field):
    path = _write_jsonl(tmp_path / "broken.jsonl", [_row(0, 1), bad_line])
    with pytest.raises(DatasetFormatError) as caught:
        load_code_validation_dataset(path, split="all")
    error = caught.value
    assert isinstance(error, NipError)
    assert (error.path, error.row, error.field) == (path, 2, field)
    assert "broken.jsonl, row 2" in str(error)


def test_duplicate_ids_are_a_format_error(tmp_path):
    path = _write_jsonl(tmp_path / "dup.jsonl", [_row(0, 1, id="x"), _row(1, 0, id="x")])
    with pytest.raises(DatasetFormatError, match="'x'"):
        load_code_validation_dataset(path, split="all")


def test_an_unknown_file_type_is_a_format_error(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("question,solution,y\n")
    with pytest.raises(DatasetFormatError, match="unknown file type"):
        load_code_validation_dataset(path)


# ------------------------------------------------------------------ parquet (Buggy-APPS)
def test_a_buggy_apps_parquet_file_gives_one_item_per_solution(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame(
        {
            "original_problem_id": [7, 8],
            "question": ["Add two numbers.", "Reverse a list."],
            "difficulty": ["interview", "interview"],
            "solutions": [
                [{"solution": "print(a + b)"}],
                [{"solution": "print(xs[::-1])"}, {"solution": "print(list(reversed(xs)))"}],
            ],
            # More buggy than correct solutions: each list is walked over its own length.
            "buggy_solutions": [
                [{"solution": "print(a - b)"}, {"solution": "print(a * b)"}],
                [{"solution": "print(xs)"}],
            ],
        }
    )
    path = tmp_path / "buggy_apps.parquet"
    frame.to_parquet(path)
    dataset = load_code_validation_dataset(path, split="all")
    solutions = {(item.solution, item.y) for item in dataset}
    assert solutions == {
        ("print(a + b)", 1), ("print(a - b)", 0), ("print(a * b)", 0),
        ("print(xs[::-1])", 1), ("print(list(reversed(xs)))", 1), ("print(xs)", 0),
    }  # fmt: skip
    assert {item.source_task_id for item in dataset} == {"7", "8"}
    assert len({item.split for item in dataset if item.source_task_id == "7"}) == 1


def test_a_flat_parquet_file_loads(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path = tmp_path / "flat.parquet"
    pd.DataFrame([_row(0, 1), _row(1, 0)]).to_parquet(path)
    assert [item.y for item in load_code_validation_dataset(path, split="all")] == [1, 0]


def test_a_parquet_file_with_a_wrong_typed_label_names_the_row(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path = tmp_path / "flat.parquet"
    pd.DataFrame([_row(0, "yes"), _row(1, "no")]).to_parquet(path)
    with pytest.raises(DatasetFormatError) as caught:
        load_code_validation_dataset(path, split="all")
    assert (caught.value.row, caught.value.field) == (1, "y")


# ------------------------------------------------------------------ display and export
def test_repr_names_the_source_and_counts_labels_and_tiers():
    text = repr(load_code_validation_dataset(split="test"))
    assert text.startswith("CodeValidationDataset('humaneval_cv', split='test'")
    assert "correct" in text and "incorrect" in text and "easy" in text


def test_html_shows_counts_by_label_and_tier_and_the_first_rows():
    dataset = load_code_validation_dataset(split="test")
    page = dataset._repr_html_()
    assert "<table>" in page and "hard" in page and "incorrect (y=0)" in page
    assert dataset[0].id in page


def test_to_dataframe_has_one_row_per_item_with_flattened_mutations():
    pytest.importorskip("pandas")
    dataset = load_code_validation_dataset(split="test")
    frame = dataset.to_dataframe()
    assert len(frame) == len(dataset)
    assert {"id", "question", "solution", "y", "mutation_operator", "counterexample_test"} <= set(
        frame.columns
    )


def test_slicing_a_dataset_gives_a_dataset():
    dataset = load_code_validation_dataset()
    head = dataset[:4]
    assert isinstance(head, CodeValidationDataset)
    assert list(head) == list(dataset)[:4]
