"""A run's dialogues as Inspect evaluation logs: written with inspect_ai's own writer, read
back by ``read_eval_log`` and ``samples_df`` with every turn's text and every score equal."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    RlParameters,
    TextRlParameters,
)
from nip.runs.inspect_export import export_inspect
from nip.runs.run_dir import RunDirectory
from nip.settings import ExperimentSettings
from nip.training.trainer import build_trainer

pytest.importorskip("inspect_ai")  # the `inspect` extra (in `dev`)


@pytest.fixture(scope="module")
def run(make_tiny_dataset, tmp_path_factory) -> Path:
    """A finished two-iteration Expert Iteration run on the dummy API, tested every iteration."""
    params = HyperParameters(
        trainer="pure_text_ei",
        dataset=str(make_tiny_dataset(items=12, train=8)),
        agents={
            "prover": PureTextAgentParameters(use_dummy_api=True),
            "verifier": PureTextAgentParameters(use_dummy_api=True),
        },
        nip_protocol=NipProtocolParameters(max_message_rounds=3),
        rl=RlParameters(num_iterations=2, rollouts_per_iteration=4),
        text_rl=TextRlParameters(min_fine_tune_examples=1, test_scheme="all"),
    )
    run_dir = tmp_path_factory.mktemp("runs") / "ei-run"
    build_trainer(params, ExperimentSettings(run_dir=run_dir, show_progress=False)).train()
    return run_dir


def test_each_split_and_iteration_becomes_one_log_whose_samples_hold_every_turn_and_score(
    run, tmp_path
):
    from inspect_ai.log import read_eval_log

    logs = export_inspect(run, tmp_path / "logs")
    saved = sorted((run / "rollouts").glob("*.jsonl"))
    assert [p.name for p in logs] == [p.stem + ".eval" for p in saved]
    directory = RunDirectory(run)
    for path in logs:
        split, _, number = path.stem.rpartition("_it")
        transcripts = directory.load_rollouts(split, int(number))
        log = read_eval_log(str(path))
        assert log.status == "success" and log.eval.metadata["split"] == split
        assert log.eval.metadata["hyper_params"] == json.loads(
            (run / "hyper_params.json").read_text()
        )
        assert set(log.eval.model_roles) == {"prover", "verifier"}
        assert len(log.samples) == len(transcripts) > 0
        for sample, transcript in zip(log.samples, transcripts, strict=True):
            point = transcript.datapoint
            assert sample.id == transcript.id
            assert (sample.metadata["question"], sample.metadata["solution"]) == (
                point.question,
                point.solution,
            )
            assert sample.metadata["label"] == point.y
            assert sample.target == ("accept" if point.y == 1 else "reject")
            turns = [m for m in sample.messages if m.role == "assistant"]
            assert [(m.metadata["agent"], m.text) for m in turns] == [
                (t.agent, t.raw_text) for t in transcript.turns
            ]
            assert sample.scores["decision"].value == transcript.decision.word
            assert sample.scores["correct"].value == float(transcript.correct)
            rewards = {k.removeprefix("reward_"): s.value for k, s in sample.scores.items()}
            assert {a: rewards[a] for a in transcript.episode_rewards} == transcript.episode_rewards
            tokens = sum(t.prompt_tokens + t.completion_tokens for t in transcript.turns)
            assert sum(u.total_tokens for u in sample.model_usage.values()) == tokens


def test_samples_df_and_messages_df_read_the_logs_back(run, tmp_path):
    from inspect_ai.analysis import messages_df, samples_df

    export_inspect(run, tmp_path / "logs")
    directory = RunDirectory(run)
    by_id = {  # a dialogue's id is unique within its split and iteration
        (f"{run.name}-{split}-{iteration}", t.id): t
        for path in sorted((run / "rollouts").glob("*.jsonl"))
        for split, iteration in [_split_iteration(path)]
        for t in directory.load_rollouts(split, iteration)
    }
    transcripts = list(by_id.values())
    samples = samples_df(str(tmp_path / "logs"))
    assert sorted(zip(samples["eval_id"], samples["id"], strict=True)) == sorted(by_id)
    for _, row in samples.iterrows():
        transcript = by_id[row["eval_id"], row["id"]]
        assert row["score_correct"] == float(transcript.correct)
        assert row["score_decision"] == transcript.decision.word
        assert row["score_reward_prover"] == transcript.episode_reward("prover")
    messages = messages_df(str(tmp_path / "logs"))
    assistant = messages[messages["role"] == "assistant"]
    assert sorted(assistant["content"]) == sorted(
        turn.raw_text for t in transcripts for turn in t.turns
    )


def test_a_sweep_directory_exports_each_cell_into_its_own_folder(run, tmp_path):
    sweep = tmp_path / "sweep"
    for cell in ("seed-0", "seed-1"):
        shutil.copytree(run, sweep / "cells" / cell)
    (sweep / "sweep.json").write_text(json.dumps({"name": "s", "cells": []}))
    logs = export_inspect(sweep)
    assert {p.parent for p in logs} == {sweep / "inspect" / "seed-0", sweep / "inspect" / "seed-1"}
    assert len(logs) == 2 * len(list((run / "rollouts").glob("*.jsonl")))


def test_the_export_command_writes_the_logs_and_says_how_to_open_them(run, tmp_path, capsys):
    from nip.cli import main

    assert main(["export", "inspect", str(run), "--out", str(tmp_path / "out")]) == 0
    assert f"inspect view --log-dir {tmp_path / 'out'}" in capsys.readouterr().out
    assert list((tmp_path / "out").glob("*.eval"))


def _split_iteration(path: Path) -> tuple[str, int]:
    split, _, number = path.stem.rpartition("_it")
    return split, int(number)
