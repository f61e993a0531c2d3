"""``text_rl.save_transcripts``: readable transcripts in JSON, YAML or Markdown are written
next to the JSONL records of a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    RlParameters,
    TextRlParameters,
)
from nip.runs.run_dir import RunDirectory
from nip.settings import ExperimentSettings
from nip.training.trainer import build_trainer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def dataset(make_tiny_dataset) -> Path:
    """16 items: 12 train and 4 test, half of them correct."""
    return make_tiny_dataset(items=16, train=12)


def sample(dataset: Path, run_dir: Path, **text_rl) -> RunDirectory:
    """One iteration's rollouts and test rollouts, saved to ``run_dir``."""
    hp = HyperParameters(
        trainer="pure_text_ei",
        dataset=str(dataset),
        agents={
            "prover": PureTextAgentParameters(use_dummy_api=True),
            "verifier": PureTextAgentParameters(use_dummy_api=True),
        },
        nip_protocol=NipProtocolParameters(max_message_rounds=3),
        rl=RlParameters(num_iterations=1, rollouts_per_iteration=4),
        text_rl=TextRlParameters(test_scheme="all", **text_rl),
    )
    settings = ExperimentSettings(run_dir=run_dir, show_progress=False, wandb_mode="disabled")
    build_trainer(hp, settings).train()
    return RunDirectory(run_dir)


def test_json_transcripts_hold_each_dialogues_turns_decision_and_models(dataset, tmp_path):
    run = sample(dataset, tmp_path / "run", transcript_format="json")
    records = run.load_rollouts("train", 0)
    readable = json.loads((tmp_path / "run" / "transcripts/train_it0000.json").read_text())
    assert [r["id"] for r in readable] == [t.id for t in records]
    first, record = readable[0], records[0]
    assert first["solution"] == record.datapoint.solution
    assert first["decision"] == record.decision.word
    assert [t["text"] for t in first["turns"]] == [t.raw_text for t in record.turns]
    assert {t["model"] for t in first["turns"]} == {"gpt-4o-mini-2024-07-18"}


def test_yaml_transcripts_load_back_and_keep_code_as_a_block(dataset, tmp_path):
    sample(dataset, tmp_path / "run", transcript_format="yaml")
    text = (tmp_path / "run" / "transcripts/train_it0000.yaml").read_text()
    assert "solution: |" in text  # multi-line code stays readable
    rows = yaml.safe_load(text)
    assert len(rows) == 4 and rows[0]["turns"][0]["from"] in ("prover", "verifier")


def test_markdown_transcripts_show_the_claim_and_who_said_what(dataset, tmp_path):
    run = sample(dataset, tmp_path / "run", transcript_format="markdown")
    text = (tmp_path / "run" / "transcripts/train_it0000.md").read_text()
    record = run.load_rollouts("train", 0)[0]
    assert f"## Dialogue {record.id}" in text
    assert "```python\n" + record.datapoint.solution.rstrip("\n") + "\n```" in text
    turn = record.turns[0]
    assert f"**Round 0, {turn.agent}** ({turn.model}):\n\n> {turn.raw_text}" in text


def test_test_rollouts_get_readable_transcripts_too(dataset, tmp_path):
    sample(dataset, tmp_path / "run", transcript_format="json")
    assert (tmp_path / "run" / "transcripts/test_it0000.json").exists()


def test_without_save_transcripts_only_the_jsonl_records_are_written(dataset, tmp_path):
    sample(dataset, tmp_path / "run", save_transcripts=False)
    assert (tmp_path / "run" / "rollouts/train_it0000.jsonl").exists()
    assert not (tmp_path / "run" / "transcripts").exists()
