"""Buggy-APPS (lrhammond/buggy-apps) and APPS through Hugging Face ``datasets``, offline.

A small dataset is written in the Hub's exact schema (nested solution records, flags) and read
as a Hub-layout folder, as a parquet file, and as a Hub id from the Hugging Face cache. No
test touches the network: the Hub endpoint points at a closed local port.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from nip.data import (  # noqa: E402
    DatasetSplitError,
    load_code_validation_dataset,
)
from nip.data._hub import load_hub_splits  # noqa: E402
from nip.errors import InvalidParameterError  # noqa: E402
from nip.parameters import HyperParameters  # noqa: E402
from nip.protocols import datapoint_stance  # noqa: E402

pytestmark = [
    pytest.mark.timeout(120),
    # datasets (and pandas with it, 1-2 s) is imported by the tests, not at collection.
    pytest.mark.skipif(find_spec("datasets") is None, reason="datasets is not installed"),
]

REPO = Path(__file__).resolve().parents[1]
COMMIT = "0123456789abcdef0123456789abcdef01234567"

_SOLUTION = pa.struct(
    [
        ("original_solution_number", pa.int64()),
        ("checks", pa.struct([("error", pa.int64()), ("fail", pa.int64()), ("pass", pa.int64())])),
        ("generation_attempts", pa.int64()),
        ("levenshtein_distance", pa.struct([("normalised", pa.float64()), ("raw", pa.int64())])),
        ("solution", pa.string()),
    ]
)
SCHEMA = pa.schema(
    [
        ("original_split", pa.string()),
        ("original_problem_id", pa.int64()),
        ("difficulty", pa.string()),
        ("question", pa.string()),
        ("solutions", pa.list_(_SOLUTION)),
        ("buggy_solutions", pa.list_(_SOLUTION)),
        ("flags", pa.string()),
    ]
)


def _solution(code: str, number: int = 0) -> dict:
    return {
        "original_solution_number": number,
        "checks": {"error": 0, "fail": 0 if "ok" in code else 1, "pass": 3},
        "generation_attempts": 1,
        "levenshtein_distance": {"normalised": 0.05, "raw": 2},
        "solution": code,
    }


def _problem(pid: int, difficulty: str = "interview", *, correct=1, buggy=1, flags="[]"):
    return {
        "original_split": "train" if pid % 2 else "test",
        "original_problem_id": pid,
        "difficulty": difficulty,
        "question": f"Problem {pid}: read n and print n + {pid}.",
        "solutions": [
            _solution(f"print(int(input()) + {pid})  # ok {k}", k) for k in range(correct)
        ],
        "buggy_solutions": [
            _solution(f"print(int(input()) - {pid})  # bug {k}") for k in range(buggy)
        ],
        "flags": flags,
    }


TRAIN = [
    _problem(1),
    # More buggy than correct solutions: the original walked both lists over len(solutions).
    _problem(2, correct=1, buggy=3),
    _problem(3, "introductory"),
    _problem(4, "competition"),
    _problem(5, flags="['violence']"),
    _problem(6, flags=""),
    _problem(7, flags=None),
]
TEST = [_problem(11), _problem(12, "introductory")]


def _write_table(path: Path, rows: list[dict], schema=SCHEMA) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def _hub_folder(root: Path, **splits: list[dict]) -> Path:
    """A folder laid out like a Hub download: data/<split>.parquet."""
    for split, rows in (splits or {"train": TRAIN, "test": TEST}).items():
        _write_table(root / "data" / f"{split}.parquet", rows)
    return root


@pytest.fixture(autouse=True)
def _private_hf_cache(tmp_path, monkeypatch):
    """Arrow files that ``datasets`` writes go to the test's own folder."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


# ------------------------------------------------------------------ a Hub-layout folder
def test_a_hub_folder_keeps_its_own_train_and_test_splits(tmp_path):
    folder = _hub_folder(tmp_path / "buggy-apps")
    train = load_code_validation_dataset(folder, split="train")
    test = load_code_validation_dataset(folder, split="test")
    assert {i.source_task_id for i in train} == {"train-1", "test-2", "train-7", "test-6"}
    assert {i.source_task_id for i in test} == {"train-11"}
    assert {i.split for i in train} == {"train"} and {i.split for i in test} == {"test"}


def test_every_solution_is_a_correct_item_and_every_buggy_solution_an_incorrect_one(tmp_path):
    folder = _hub_folder(tmp_path / "d", train=[_problem(2, correct=1, buggy=3)], test=TEST)
    items = load_code_validation_dataset(folder, split="train")
    assert sorted((i.id, i.y) for i in items) == [
        ("test-2/buggy/0", 0),
        ("test-2/buggy/1", 0),
        ("test-2/buggy/2", 0),
        ("test-2/correct/0", 1),
    ]


def test_items_carry_the_question_the_code_and_the_hash_parity_stance(tmp_path):
    folder = _hub_folder(tmp_path / "d")
    item = next(i for i in load_code_validation_dataset(folder) if i.id == "train-1/buggy/0")
    assert item.question == "Problem 1: read n and print n + 1."
    assert item.solution == "print(int(input()) - 1)  # bug 0"
    assert item.prover_stance == datapoint_stance(item.solution)
    assert item.difficulty == "interview"


def test_the_apps_difficulty_defaults_to_interview_and_all_keeps_every_tier(tmp_path):
    folder = _hub_folder(tmp_path / "d")
    default = load_code_validation_dataset(folder, split="train")
    everything = load_code_validation_dataset(folder, split="train", apps_difficulty="all")
    intro = load_code_validation_dataset(folder, split="train", apps_difficulty="introductory")
    assert {i.difficulty for i in default} == {"interview"}
    assert {i.difficulty for i in everything} == {"interview", "introductory", "competition"}
    assert {i.source_task_id for i in intro} == {"train-3"}


def test_flagged_problems_are_dropped_and_empty_flags_mean_not_flagged(tmp_path):
    folder = _hub_folder(tmp_path / "d")
    kept = {i.source_task_id for i in load_code_validation_dataset(folder)}
    assert "train-5" not in kept  # flags "['violence']"
    assert {"test-6", "train-7"} <= kept  # flags "" and null
    assert "train-1" in kept  # flags "[]"
    with_flagged = load_code_validation_dataset(folder, apps_exclude_flagged=False)
    assert "train-5" in {i.source_task_id for i in with_flagged}


def test_a_validation_split_is_used_where_the_dataset_has_one(tmp_path):
    folder = _hub_folder(tmp_path / "d", train=TRAIN, test=TEST, validation=[_problem(21)])
    validation = load_code_validation_dataset(folder, split="validation")
    assert {i.source_task_id for i in validation} == {"train-21"}
    assert {i.split for i in validation} == {"validation"}


def test_asking_for_a_split_the_dataset_lacks_names_the_splits_it_has(tmp_path):
    folder = _hub_folder(tmp_path / "d")
    with pytest.raises(DatasetSplitError, match="has no 'validation' split") as caught:
        load_code_validation_dataset(folder, split="validation")
    assert set(caught.value.available) == {"train", "test"}


def test_max_size_draws_a_seeded_subsample_of_the_split(tmp_path):
    folder = _hub_folder(tmp_path / "d")
    first = load_code_validation_dataset(folder, max_size=3, seed=1, apps_difficulty="all")
    again = load_code_validation_dataset(folder, max_size=3, seed=1, apps_difficulty="all")
    assert len(first) == 3 and first == again


def test_the_hubs_renamed_columns_are_read_under_their_new_names(tmp_path):
    renamed = SCHEMA.set(0, pa.field("apps_split", pa.string())).set(
        1, pa.field("apps_id", pa.int64())
    )
    new_names = {"original_split": "apps_split", "original_problem_id": "apps_id"}
    rows = [{new_names.get(k, k): v for k, v in row.items()} for row in TRAIN[:2]]
    path = _write_table(tmp_path / "renamed" / "data" / "train.parquet", rows, renamed)
    _write_table(path.with_name("test.parquet"), rows[:1], renamed)
    items = load_code_validation_dataset(path.parent.parent)
    assert {i.source_task_id for i in items} == {"train-1", "test-2"}


# ------------------------------------------------------------------ the same rows as a file
def test_a_parquet_file_in_the_hub_schema_gives_the_same_items_with_the_same_filters(tmp_path):
    folder = _hub_folder(tmp_path / "d")
    from_folder = load_code_validation_dataset(folder, split="train", apps_difficulty="all")
    path = folder / "data" / "train.parquet"
    from_file = load_code_validation_dataset(path, split="all", apps_difficulty="all")
    assert {(i.id, i.y, i.solution) for i in from_file} == {
        (i.id, i.y, i.solution) for i in from_folder
    }


def test_codeparrot_apps_rows_give_correct_items_only(tmp_path):
    rows = [
        {
            "problem_id": 9,
            "question": "Print 1.",
            "solutions": json.dumps(["print(1)", "print(2 - 1)"]),
            "difficulty": "interview",
            "input_output": "{}",
            "starter_code": "",
            "url": "https://example.org/9",
        }
    ]
    folder = tmp_path / "apps"
    (folder / "train.jsonl").parent.mkdir(parents=True)
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = load_code_validation_dataset(folder, split="train")
    assert [(i.id, i.y) for i in items] == [("9/correct/0", 1), ("9/correct/1", 1)]


def test_rows_without_a_difficulty_are_kept_and_cannot_be_filtered_by_one(tmp_path):
    rows = [{k: v for k, v in row.items() if k != "difficulty"} for row in TRAIN[:2]]
    path = tmp_path / "no_difficulty.parquet"
    _write_table(path, rows, SCHEMA.remove(SCHEMA.get_field_index("difficulty")))
    assert {i.source_task_id for i in load_code_validation_dataset(path, split="all")} == {
        "train-1",
        "test-2",
    }
    with pytest.raises(InvalidParameterError, match="no difficulty") as caught:
        load_code_validation_dataset(path, split="all", apps_difficulty="competition")
    assert caught.value.field == "apps_difficulty"


# ------------------------------------------------------------------ filters that do not apply
def test_a_humaneval_difficulty_is_refused_for_apps_rows(tmp_path):
    folder = _hub_folder(tmp_path / "d")
    with pytest.raises(InvalidParameterError, match="does not apply") as caught:
        load_code_validation_dataset(folder, difficulty="hard")
    assert caught.value.field == "difficulty"


def test_an_apps_filter_is_refused_for_the_shipped_dataset():
    with pytest.raises(InvalidParameterError, match="does not apply") as caught:
        load_code_validation_dataset("humaneval_cv", apps_difficulty="competition")
    assert caught.value.field == "apps_difficulty"


def test_the_configuration_refuses_an_apps_filter_for_humaneval_cv():
    with pytest.raises(InvalidParameterError) as caught:
        HyperParameters.from_dict({"code_validation": {"apps_exclude_flagged": False}})
    assert caught.value.field == "code_validation.apps_exclude_flagged"


def test_the_configuration_refuses_a_humaneval_difficulty_for_buggy_apps():
    with pytest.raises(InvalidParameterError) as caught:
        HyperParameters.from_dict(
            {"dataset": "lrhammond/buggy-apps", "code_validation": {"difficulty": "easy"}}
        )
    assert caught.value.field == "code_validation.difficulty"


def test_the_configuration_refuses_a_revision_for_a_dataset_not_on_the_hub():
    with pytest.raises(InvalidParameterError) as caught:
        HyperParameters.from_dict({"code_validation": {"dataset_revision": COMMIT}})
    assert caught.value.field == "code_validation.dataset_revision"


def test_the_configuration_refuses_a_validation_split_humaneval_cv_does_not_have():
    with pytest.raises(InvalidParameterError, match="no 'validation' split") as caught:
        HyperParameters.from_dict({"text_rl": {"test_dataset_split": "validation"}})
    assert caught.value.field == "text_rl.test_dataset_split"


def test_buggy_apps_is_accepted_by_name_with_a_pinned_revision():
    params = HyperParameters.from_dict(
        {
            "dataset": "lrhammond/buggy-apps",
            "code_validation": {"apps_difficulty": "all", "dataset_revision": COMMIT},
            "text_rl": {"test_dataset_split": "validation"},
        }
    )
    assert params.code_validation.dataset_revision == COMMIT


# ------------------------------------------------------------------ the Hub, offline
def _cache_as_if_downloaded(cache: Path, repo_id: str, commit: str, folder: Path) -> None:
    """Write ``folder``'s splits into a ``datasets`` cache as a Hub download of ``commit``."""
    from datasets.data_files import DataFilesDict
    from datasets.packaged_modules.parquet.parquet import Parquet

    namespace, name = repo_id.split("/")
    files = DataFilesDict.from_local_or_remote(
        {p.stem: [str(p)] for p in (folder / "data").glob("*.parquet")}, base_path=str(folder)
    )
    builder = Parquet(
        cache_dir=str(cache), data_files=files, dataset_name=f"{namespace}___{name}", hash=commit
    )
    builder.download_and_prepare()
    written = Path(builder.cache_dir)
    target = cache / f"{namespace}___{name}" / "default" / "0.0.0" / commit
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(written, target)
    for arrow in target.glob(f"{namespace}___{name}-*.arrow"):
        arrow.rename(arrow.with_name(arrow.name.replace(f"{namespace}___", "")))


def _run_offline(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter whose Hub endpoint is a closed local port."""
    inherited = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    environment = {
        **inherited,
        "PYTHONPATH": str(REPO),
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_DATASETS_CACHE": str(tmp_path / "hf-datasets"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        env=environment,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


_LOAD = (
    "from nip.data import load_code_validation_dataset as load\n"
    "d = load('lrhammond/buggy-apps', split='test', revision={revision!r})\n"
    "print(len(d), d.revision, d.origin)\n"
)


def test_without_network_or_cache_the_error_names_the_dataset_and_a_local_copy(tmp_path):
    result = _run_offline(tmp_path, _LOAD.format(revision=None))
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "DatasetUnavailableError" in last
    assert "lrhammond/buggy-apps" in last and "data/train.parquet" in last


@pytest.mark.parametrize("offline_flag", [{}, {"HF_DATASETS_OFFLINE": "1"}])
def test_a_cached_hub_dataset_loads_without_network_and_reports_its_revision(
    tmp_path, offline_flag
):
    folder = _hub_folder(tmp_path / "download")
    _cache_as_if_downloaded(tmp_path / "hf-datasets", "lrhammond/buggy-apps", COMMIT, folder)
    result = _run_offline(tmp_path, _LOAD.format(revision=None), **offline_flag)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["2", COMMIT, "cache"]


def test_a_pinned_revision_other_than_the_cached_one_is_refused_offline(tmp_path):
    folder = _hub_folder(tmp_path / "download")
    _cache_as_if_downloaded(tmp_path / "hf-datasets", "lrhammond/buggy-apps", COMMIT, folder)
    result = _run_offline(tmp_path, _LOAD.format(revision="fedcba9"), HF_DATASETS_OFFLINE="1")
    assert result.returncode != 0
    assert "dataset_revision='fedcba9' is pinned" in result.stderr


def test_apps_from_the_hub_without_network_says_how_to_use_a_local_copy(tmp_path):
    code = "from nip.data import load_code_validation_dataset as load; load('codeparrot/apps')"
    result = _run_offline(tmp_path, code)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "DatasetUnavailableError" in last and "'codeparrot/apps'" in last
    assert "dataset: /path/to/folder" in last


def test_a_local_folder_has_no_hub_revision(tmp_path):
    _, revision, origin = load_hub_splits(str(_hub_folder(tmp_path / "d")))
    assert revision is None and origin == "directory"


def test_a_run_on_a_hub_dataset_records_the_revision_it_used(tmp_path, monkeypatch):
    import datasets

    from nip.settings import ExperimentSettings
    from nip.training.trainer import PureTextEiTrainer

    cache = tmp_path / "hub-cache"
    _cache_as_if_downloaded(cache, "lrhammond/buggy-apps", COMMIT, _hub_folder(tmp_path / "dl"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    dummy = {"use_dummy_api": True}
    params = HyperParameters.from_dict(
        {
            "dataset": "lrhammond/buggy-apps",
            "code_validation": {"dataset_revision": COMMIT[:10]},
            "agents": {"prover": dummy, "verifier": dummy},
        }
    )
    run_dir = tmp_path / "run"
    PureTextEiTrainer(params, ExperimentSettings(run_dir=run_dir, show_progress=False))
    record = json.loads((run_dir / "dataset.json").read_text())
    assert {split: record[split]["revision"] for split in record} == {
        "train": COMMIT,
        "test": COMMIT,
    }
    assert record["train"]["dataset"] == "lrhammond/buggy-apps"
