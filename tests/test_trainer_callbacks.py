"""The trainer is a loop over the run plan: algorithms are objects in one table, and what
watches a run is a callback."""

from __future__ import annotations

from pathlib import Path

import pytest

from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    RlParameters,
    TextRlParameters,
)
from nip.settings import ExperimentSettings
from nip.training.algorithms import ALGORITHMS, BY_NAME, TrainingAlgorithm
from nip.training.callbacks import TrainerCallback
from nip.training.context import RunContext
from nip.training.trainer import build_trainer


@pytest.fixture(scope="module")
def dataset(make_tiny_dataset) -> Path:
    return make_tiny_dataset(items=16, train=12)


def test_every_algorithm_the_plan_names_is_an_object_of_the_algorithm_table():
    assert set(BY_NAME) == {a.name for a in ALGORITHMS.values()} == {"expert_iteration", "malt"}
    assert all(isinstance(a, TrainingAlgorithm) for a in ALGORITHMS.values())
    assert {a.method for a in ALGORITHMS.values()} == {"supervised", "dpo"}


class Recorder(TrainerCallback):
    def __init__(self):
        self.events: list[tuple] = []

    async def on_stage_begin(self, trainer, stage):
        self.events.append(("begin", trainer.state.iteration, stage))

    async def on_stage_end(self, trainer, stage, error=None):
        self.events.append(("end", trainer.state.iteration, stage))

    async def on_job_submitted(self, trainer, group, job_id):
        self.events.append(("job", trainer.state.iteration, group))

    def on_log(self, trainer, metrics):
        self.events.append(("log", trainer.state.iteration, "accuracy" in metrics))


class StopAfter(TrainerCallback):
    def __init__(self, stages: int):
        self.stages = stages

    async def should_continue(self, trainer):
        return trainer.state.stages_completed < self.stages


def hyper_params(dataset: Path) -> HyperParameters:
    return HyperParameters(
        dataset=str(dataset),
        agents={
            "prover": PureTextAgentParameters(use_dummy_api=True, freeze_agent=True),
            "verifier": PureTextAgentParameters(use_dummy_api=True),
        },
        nip_protocol=NipProtocolParameters(max_message_rounds=3),
        rl=RlParameters(num_iterations=2, rollouts_per_iteration=4),
        text_rl=TextRlParameters(min_fine_tune_examples=1, test_scheme="last"),
    )


def test_a_callback_sees_every_stage_each_job_and_the_metrics(dataset, tmp_path):
    recorder = Recorder()
    settings = ExperimentSettings(run_dir=tmp_path / "run", show_progress=False)
    build_trainer(hyper_params(dataset), settings, callbacks=[recorder]).train()
    begins = [(i, s) for kind, i, s in recorder.events if kind == "begin"]
    assert begins[:6] == [
        (0, "sample_rollouts"),
        (0, "log_stats"),
        (0, "test"),
        (0, "create_fine_tune_jobs"),
        (0, "await_fine_tune_jobs"),
        (0, "switch_models"),
    ]
    assert begins[6:] == [(1, "sample_rollouts"), (1, "log_stats"), (1, "test")]
    assert ("job", 0, "verifier") in recorder.events  # the frozen prover submits none
    assert not any(e[0] == "job" and e[2] == "prover" for e in recorder.events)
    assert ("log", 0, True) in recorder.events


def test_a_callback_can_stop_the_run_between_stages_and_it_resumes(dataset, tmp_path):
    settings = ExperimentSettings(run_dir=tmp_path / "run", show_progress=False)
    trainer = build_trainer(hyper_params(dataset), settings, callbacks=[StopAfter(2)])
    assert trainer.train().stages_completed == 2
    resumed = type(trainer).resume(tmp_path / "run", ExperimentSettings(show_progress=False))
    assert resumed.train().stage == "done"


def test_callbacks_see_the_runs_context_not_the_trainer(dataset, tmp_path):
    seen: list[object] = []

    class Watcher(TrainerCallback):
        async def on_stage_begin(self, run, stage):
            seen.append(run)

    settings = ExperimentSettings(run_dir=tmp_path / "run", show_progress=False)
    trainer = build_trainer(hyper_params(dataset), settings, callbacks=[Watcher()])
    trainer.train(max_stages=2)
    assert seen == [trainer.context, trainer.context]
    assert isinstance(seen[0], RunContext) and not isinstance(seen[0], type(trainer))
    assert trainer.context.step is trainer.plan[0] and trainer.context.state is trainer.state


async def test_wandb_starts_off_the_event_loop_so_a_sweeps_other_cells_go_on(monkeypatch):
    import asyncio
    import threading
    from types import SimpleNamespace

    from nip.training import callbacks
    from nip.training.logging import NullLogger

    released = threading.Event()

    def slow_start(run):  # W&B's set-up, which only the event loop can let finish here
        assert released.wait(timeout=10), "the event loop was blocked while W&B started"
        return NullLogger()

    async def another_cell() -> None:
        await asyncio.sleep(0.01)
        released.set()

    monkeypatch.setattr(callbacks, "make_logger", slow_start)
    wandb = callbacks.WandbCallback()
    run = SimpleNamespace(state=SimpleNamespace(stage="sample_rollouts"))
    await asyncio.wait_for(asyncio.gather(wandb.on_train_begin(run), another_cell()), 20)
    assert isinstance(wandb.logger, NullLogger)
