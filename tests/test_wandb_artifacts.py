"""W&B as the original used it: each iteration's rollouts and transcripts as artifacts, offline
without a key, and a sweep's runs in one group."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.settings import ExperimentSettings
from nip.sweeps.run import GridSpec, run_sweep
from nip.training.logging import build_rollout_artifacts
from nip.training.trainer import build_trainer
from nip.utils.imports import heavy_imports


def _written(folder: Path, needle: bytes, count: int = 1, timeout_s: float = 60) -> bytes:
    """The offline run's records once they hold ``needle`` ``count`` times: W&B's service
    writes them after ``finish()`` returns."""
    deadline = time.monotonic() + timeout_s
    while True:
        data = b"".join(p.read_bytes() for p in folder.glob("offline-run-*/*.wandb"))
        if data.count(needle) >= count or time.monotonic() > deadline:
            return data
        time.sleep(0.05)


def offline(monkeypatch, tmp_path: Path, run_dir: Path) -> ExperimentSettings:
    """W&B offline, without a key, its files under ``tmp_path``: a run's settings."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    return ExperimentSettings(run_dir=run_dir, show_progress=False, wandb_mode="offline")


def _params(dataset: Path, trainer: str = "pure_text_ei") -> HyperParameters:
    dummy = PureTextAgentParameters(use_dummy_api=True)
    return HyperParameters(
        trainer=trainer,
        dataset=str(dataset),
        agents={"prover": dummy, "verifier": dummy},
        rl={"num_iterations": 2, "rollouts_per_iteration": 2},
        text_rl={"min_fine_tune_examples": 1, "test_scheme": "last", "save_transcripts": True},
        nip_protocol={"max_message_rounds": 3},
    )


def test_the_rollout_artifacts_hold_every_saved_rollout_and_transcript_file(
    make_tiny_dataset, tmp_path
):
    with heavy_imports():  # a LoRA worker thread of an earlier test may be importing TRL
        import wandb

    run_dir = tmp_path / "run"
    settings = ExperimentSettings(run_dir=run_dir, show_progress=False, wandb_mode="disabled")
    build_trainer(_params(make_tiny_dataset()), settings).train()
    rollouts, transcripts = build_rollout_artifacts(wandb, run_dir, "run42")
    assert (rollouts.name, rollouts.type) == ("full_rollouts_run42", "rollouts")
    assert set(rollouts.manifest.entries) == {
        "rollouts/train_it0000.jsonl",
        "rollouts/train_it0001.jsonl",
        "rollouts/test_it0001.jsonl",
    }
    assert transcripts.name == "raw_transcript_run42"
    assert {Path(e).stem for e in transcripts.manifest.entries} == {
        "train_it0000",
        "train_it0001",
        "test_it0001",
    }


@pytest.mark.timeout(180)
def test_an_offline_run_logs_each_iterations_rollouts_as_artifacts(
    make_tiny_dataset, tmp_path, monkeypatch
):
    run_dir = tmp_path / "run"
    settings = offline(monkeypatch, tmp_path, run_dir)
    build_trainer(_params(make_tiny_dataset()), settings).train()
    assert len(list((run_dir / "wandb").glob("offline-run-*/*.wandb"))) == 1
    data = _written(run_dir / "wandb", b"full_rollouts_run", count=3)
    # Three saves of the rollouts: training at iterations 0 and 1, the last test.
    assert data.count(b"full_rollouts_run") >= 3 and b"raw_transcript_run" in data
    assert b"rollouts/test_it0001.jsonl" in data


@pytest.mark.timeout(180)
def test_an_offline_run_logs_its_jobs_training_cost_and_sums_up_what_it_spent(
    make_tiny_dataset, tmp_path, monkeypatch
):
    run_dir = tmp_path / "run"
    settings = offline(monkeypatch, tmp_path, run_dir)
    build_trainer(_params(make_tiny_dataset()), settings).train()
    data = _written(run_dir / "wandb", b"spent_training_usd")
    assert b"prover.training_cost_usd" in data  # with iteration 0's metrics
    assert b"spent_training_usd" in data and b"spent_inference_usd" in data  # the summary


@pytest.mark.timeout(180)
def test_a_malt_run_logs_its_trees_and_the_originals_processed_transcripts_and_prompts(
    make_tiny_dataset, tmp_path, monkeypatch
):
    """Beside the rollouts and raw transcripts: MALT's trees (``malt_trees_<run>``), and the
    original's two other transcript artifacts, the messages per channel
    (``processed_transcript_<run>``) and every turn's prompt (``prompts_<run>``)."""
    run_dir = tmp_path / "run"
    settings = offline(monkeypatch, tmp_path, run_dir)
    trainer = build_trainer(_params(make_tiny_dataset(), "pure_text_malt"), settings)
    trainer.train()
    data = _written(run_dir / "wandb", b"prompts_run", count=3)
    for name in (b"malt_trees_run", b"processed_transcript_run", b"prompts_run"):
        assert data.count(name) >= 3, name  # training at iterations 0 and 1, the last test
    assert b"malt/trees_it0001.jsonl" in data and b"prompts/test_it0001.json" in data
    dialogue = trainer.run_dir.load_rollouts("train", 0)[0]
    processed = json.loads((run_dir / "processed_transcripts/train_it0000.json").read_text())[0]
    first = dialogue.messages[0]
    assert processed["transcript"][0][f"{first.sender}@{first.channel}"] == first.content
    prompts = json.loads((run_dir / "prompts/train_it0000.json").read_text())[0]
    turn = dialogue.turns[-1]
    built = trainer.session.agents[turn.agent].build_chat_prompt(dialogue, turn.round)
    assert prompts["prompts"][turn.round][turn.agent] == built


@pytest.mark.timeout(180)
def test_a_sweeps_runs_share_a_wandb_group_named_after_the_sweep(
    make_tiny_dataset, tmp_path, monkeypatch
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    _params(make_tiny_dataset()).save(tmp_path / "base.yaml")
    (tmp_path / "grid.yaml").write_text("name: groupie\nbase: base.yaml\naxes:\n  seed: [0, 1]\n")
    settings = ExperimentSettings(show_progress=False, wandb_mode="offline")
    outcomes = run_sweep(
        GridSpec.load(tmp_path / "grid.yaml"), tmp_path / "s", settings, echo=False
    )
    assert set(outcomes.values()) == {"done"}
    for cell in ("seed0", "seed1"):
        assert b"groupie" in _written(tmp_path / "s/cells" / cell / "wandb", b"groupie")
        assert list((tmp_path / "s/cells" / cell / "wandb").glob(f"offline-run-*-groupie-{cell}"))
    assert json.loads((tmp_path / "s/sweep.json").read_text())["name"] == "groupie"
