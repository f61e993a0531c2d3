"""What a training run prints: the stage, a line (or bar) per stage, a summary per iteration."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from nip.parameters import HyperParameters, PureTextAgentParameters, RlParameters
from nip.settings import ExperimentSettings
from nip.training.progress import RunReporter
from nip.training.trainer import PureTextEiTrainer


@pytest.fixture(scope="module")
def dataset(make_tiny_dataset) -> Path:
    """12 items: 8 train and 4 test, half of them correct."""
    return make_tiny_dataset(items=12, train=8)


def run(dataset: Path, run_dir: Path, show_progress: bool = True) -> None:
    hp = HyperParameters(
        trainer="pure_text_ei",
        dataset=str(dataset),
        agents={
            "prover": PureTextAgentParameters(use_dummy_api=True),
            "verifier": PureTextAgentParameters(use_dummy_api=True),
        },
        rl=RlParameters(num_iterations=2, rollouts_per_iteration=4),
        text_rl={"min_fine_tune_examples": 1, "test_scheme": "last"},
        pure_text_ei={"reward_threshold": 0.5},
    )
    trainer = PureTextEiTrainer(
        hp, ExperimentSettings(run_dir=run_dir, show_progress=show_progress, cache="off")
    )
    trainer.poll_interval_s = 0.01
    trainer.train()


def test_a_run_whose_output_is_not_a_terminal_prints_one_plain_line_per_stage(
    dataset, tmp_path, capsys
):
    run(dataset, tmp_path / "run")
    lines = capsys.readouterr().err.splitlines()

    assert lines[0] == "iteration 1/2 · sampling 4 dialogues"
    assert "iteration 1/2 · fine-tuning prover and verifier" in lines
    assert "iteration 2/2 · testing" in lines
    assert any(line.startswith("iteration 1/2 done in") for line in lines)
    assert any(line.startswith("iteration 2/2 done in") and "test:" in line for line in lines)
    assert not any("\r" in line or "%|" in line for line in lines)  # no progress bars


def test_show_progress_off_prints_nothing(dataset, tmp_path, capsys):
    run(dataset, tmp_path / "run", show_progress=False)

    assert capsys.readouterr().err == ""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_bars_and_no_per_stage_done_lines():
    reporter = RunReporter(stream=Terminal())

    assert reporter.bars
    assert not RunReporter(stream=io.StringIO()).bars
