"""What the trainer does with the dataset: records its provenance and tests on the chosen split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nip.data import DatasetSplitError
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.settings import ExperimentSettings
from nip.training.trainer import PureTextEiTrainer

pytestmark = pytest.mark.timeout(120)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _rows(split: str, n: int) -> list[dict]:
    return [
        {
            "id": f"{split}{i}",
            "question": f"Return {i} plus the argument ({split}).",
            "solution": f"def f(x):\n    return x + {i + i % 2}\n",
            "y": 1 - i % 2,
            "split": split,
        }
        for i in range(n)
    ]


def _params(dataset: Path, **text_rl) -> HyperParameters:
    return HyperParameters.from_dict(
        {
            "dataset": str(dataset),
            "agents": {
                "prover": PureTextAgentParameters(use_dummy_api=True).to_dict(),
                "verifier": PureTextAgentParameters(use_dummy_api=True).to_dict(),
            },
            "nip_protocol": {"max_message_rounds": 3},
            "rl": {"num_iterations": 1, "rollouts_per_iteration": 4},
            "text_rl": {"test_scheme": "last", **text_rl},
        }
    )


def _settings(run_dir: Path) -> ExperimentSettings:
    return ExperimentSettings(run_dir=run_dir, show_progress=False)


def test_a_new_run_records_each_splits_source_size_and_fingerprint(tmp_path):
    data = _write(tmp_path / "items.jsonl", _rows("train", 6) + _rows("test", 2))
    PureTextEiTrainer(_params(data), _settings(tmp_path / "run"))
    record = json.loads((tmp_path / "run" / "dataset.json").read_text())
    assert set(record) == {"train", "test"}
    assert record["train"]["items"] == 6 and record["test"]["items"] == 2
    assert record["train"]["dataset"] == str(data) and record["train"]["origin"] == "file"
    assert record["train"]["revision"] is None  # only a Hub dataset has one
    assert len(record["train"]["fingerprint"]) == 64


def test_the_same_data_give_the_same_fingerprint_and_other_data_another(tmp_path):
    data = _write(tmp_path / "items.jsonl", _rows("train", 6) + _rows("test", 2))
    other = _write(tmp_path / "other.jsonl", _rows("train", 5) + _rows("test", 2))
    fingerprints = []
    for name, path in (("a", data), ("b", data), ("c", other)):
        PureTextEiTrainer(_params(path), _settings(tmp_path / name))
        record = json.loads((tmp_path / name / "dataset.json").read_text())
        fingerprints.append(record["train"]["fingerprint"])
    assert fingerprints[0] == fingerprints[1] != fingerprints[2]


def test_the_test_stage_uses_the_validation_split_when_asked(tmp_path):
    rows = _rows("train", 6) + _rows("test", 2) + _rows("validation", 4)
    data = _write(tmp_path / "items.jsonl", rows)
    trainer = PureTextEiTrainer(
        _params(data, test_dataset_split="validation"), _settings(tmp_path / "run")
    )
    trainer.train()
    tested = {t.datapoint.id for t in trainer.run_dir.load_rollouts("test", 0)}
    assert tested == {f"validation{i}" for i in range(4)}
    assert "validation" in json.loads((tmp_path / "run" / "dataset.json").read_text())


def test_a_validation_split_the_file_lacks_is_refused_before_any_sampling(tmp_path):
    data = _write(tmp_path / "items.jsonl", _rows("train", 6) + _rows("test", 2))
    with pytest.raises(DatasetSplitError, match="no 'validation' split"):
        PureTextEiTrainer(
            _params(data, test_dataset_split="validation"), _settings(tmp_path / "run")
        )
    assert not (tmp_path / "run" / "rollouts").exists()
