"""What a training run prints: the stage, a line (or bar) per stage, a summary per iteration."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from nip.parameters import HyperParameters, PureTextAgentParameters, RlParameters
from nip.settings import ExperimentSettings
from nip.training.reporter import RunReporter
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


def test_the_fine_tuning_line_counts_the_steps_logged_just_before_the_jobs_end():
    from types import SimpleNamespace

    from nip.jobs import FineTuneEvent
    from nip.parameters import HyperParameters
    from nip.runs.plan_steps import IterationPlan
    from nip.settings import ExperimentSettings
    from nip.training.context import RunContext

    events: list[FineTuneEvent] = []

    class Jobs:
        async def list_events(self, job_id: str) -> list[FineTuneEvent]:
            return list(events)

    group = SimpleNamespace(submitted_job_id="verifier-it0", fine_tune_backend=Jobs())
    run = RunContext(
        HyperParameters.construct_test_params(),
        ExperimentSettings(),
        session=None,  # type: ignore[arg-type]  (the reporter reads no dialogue here)
        run_dir=None,  # type: ignore[arg-type]
        plan=[
            IterationPlan(0, "expert_iteration", items=4),
            IterationPlan(1, "expert_iteration", items=4),
        ],
        groups={"verifier": group},  # type: ignore[dict-item]
    )
    stream = io.StringIO()
    reporter = RunReporter(stream=stream, bars=False, poll_s=3600)  # no second regular read

    async def fine_tune() -> None:
        await reporter.on_stage_begin(run, "await_fine_tune_jobs")
        events.append(FineTuneEvent(0.0, "info", "step 1", {"step": 1, "loss": 1.5}))
        await asyncio.sleep(0.05)  # the watcher reads step 1
        events.append(FineTuneEvent(1.0, "info", "step 2", {"step": 2, "loss": 1.25}))
        await reporter.on_stage_end(run, "await_fine_tune_jobs")

    asyncio.run(fine_tune())
    assert "  verifier: 2 steps, loss 1.250" in stream.getvalue().splitlines()


def test_a_slow_engine_start_gets_a_line_and_its_duration_and_a_quick_one_nothing():
    stream = io.StringIO()

    async def wait(seconds: float, after_s: float) -> None:
        reporter = RunReporter(stream=stream, bars=False, engines_after_s=after_s)
        await reporter.on_engines_wait(None, done=False)  # type: ignore[arg-type]
        await asyncio.sleep(seconds)
        await reporter.on_engines_wait(None, done=True)  # type: ignore[arg-type]

    asyncio.run(wait(0.0, after_s=3600))
    assert stream.getvalue() == ""
    asyncio.run(wait(0.2, after_s=0.01))
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("starting the agents' model engines")
    assert lines[1].startswith("  engines ready in ")


def test_in_a_notebook_the_stage_lines_are_plain_output_not_standard_error(monkeypatch):
    import sys
    import types

    kernel = types.SimpleNamespace(config={"IPKernelApp": {}})
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: kernel))
    assert RunReporter().stream is sys.stdout
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    assert RunReporter().stream is sys.stderr
