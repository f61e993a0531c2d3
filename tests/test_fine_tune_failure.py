"""A failed fine-tuning job does not end a run: ``text_rl.on_fine_tune_failure`` decides.

The jobs run on ``nip serve``'s app, served on loopback, with a scripted trainer whose jobs
fail once then succeed, or always fail; the trainer meets the failures through the real HTTP
fine-tuning API.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nip.errors import FineTuneStoppedError
from nip.jobs.self_hosted import SelfHostedFineTuneBackend
from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    RlParameters,
    TextRlParameters,
)
from nip.server.app import create_server_app
from nip.server.config import ServerConfig
from nip.settings import ExperimentSettings
from nip.testing.server import serve
from nip.training.trainer import PureTextEiTrainer, build_trainer
from nip.utils.notices import NipWarning
from tests.doubles.fine_tuning import SCRIPTED_ERROR, ScriptedFineTuneBackend

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def dataset(make_tiny_dataset) -> Path:
    """16 items: 12 train and 4 test, half of them correct."""
    return make_tiny_dataset(items=16, train=12)


def params(dataset: Path, trainer: str = "pure_text_ei", **text_rl) -> HyperParameters:
    """Three iterations (two of them fine-tune); only the verifier is trained, on a server
    whose base model is "base"."""
    agent = dict(use_dummy_api=True, model_provider="SelfHosted", model_name="base")
    return HyperParameters(
        trainer=trainer,
        dataset=str(dataset),
        agents={
            "prover": PureTextAgentParameters(**agent, freeze_agent=True),
            "verifier": PureTextAgentParameters(**agent),
        },
        nip_protocol=NipProtocolParameters(max_message_rounds=3),
        rl=RlParameters(num_iterations=3, rollouts_per_iteration=6),
        text_rl=TextRlParameters(
            **{
                "min_fine_tune_examples": 1,
                "test_scheme": "none",
                "fine_tune_retry_backoff_s": 0.0,
                **text_rl,
            }
        ),
        pure_text_ei={"reward_threshold": 0.0},
    )


def fine_tuning_server(tmp_path: Path, backend: ScriptedFineTuneBackend):
    """``nip serve``'s app with the scripted trainer, on loopback (no inference engine)."""
    (tmp_path / "base").mkdir(exist_ok=True)
    config = ServerConfig(
        model=str(tmp_path / "base"),
        engine="none",
        storage_dir=str(tmp_path / "server"),
        poll_interval_s=0.02,
    )
    return serve(create_server_app(config, fine_tune_backend=backend))


def trainer_for(hp, run_dir: Path, url: str, *, resume: bool = False) -> PureTextEiTrainer:
    backends = {"verifier": SelfHostedFineTuneBackend(url)}
    run_settings = ExperimentSettings(run_dir=run_dir, show_progress=False, wandb_mode="disabled")
    if resume:
        trainer = PureTextEiTrainer.resume(run_dir, run_settings, fine_tune_backends=backends)
    else:
        trainer = build_trainer(hp, run_settings, fine_tune_backends=backends)
    trainer.poll_interval_s = 0.02
    return trainer


def saved_state(run_dir: Path) -> dict:
    return json.loads((run_dir / "state.json").read_text())


# ------------------------------------------------------------------------------ retry
def test_retry_resubmits_a_job_that_failed_once_and_trains_on_the_same_dataset(dataset, tmp_path):
    backend = ScriptedFineTuneBackend(fail_first=1)
    with fine_tuning_server(tmp_path, backend) as server:
        trainer = trainer_for(params(dataset), tmp_path / "run", server.url)
        assert trainer.train().stage == "done"
    first, second, *later = backend.specs.values()
    assert first.examples == second.examples  # the same dataset, resubmitted
    assert len(later) == 1  # iteration 1's job
    verifier = trainer.groups["verifier"].state
    assert verifier.model_history == ["verifier-it0-2", "verifier-it1"]
    assert [f["error"] for f in verifier.fine_tune_failures] == [
        f"training_failed: {SCRIPTED_ERROR}"
    ]


def test_every_failure_is_kept_in_the_saved_state_with_its_error(dataset, tmp_path):
    backend = ScriptedFineTuneBackend(fail_first=2)
    with fine_tuning_server(tmp_path, backend) as server:
        trainer_for(params(dataset), tmp_path / "run", server.url).train()
    failures = saved_state(tmp_path / "run")["groups"]["verifier"]["fine_tune_failures"]
    assert [(f["iteration"], f["error"]) for f in failures] == [
        (0, f"training_failed: {SCRIPTED_ERROR}")
    ] * 2
    assert len({f["job_id"] for f in failures}) == 2


def test_after_the_last_retry_the_group_keeps_its_model_and_the_run_goes_on(dataset, tmp_path):
    backend = ScriptedFineTuneBackend(always_fail=True)
    with fine_tuning_server(tmp_path, backend) as server, pytest.warns(NipWarning) as warned:
        trainer = trainer_for(
            params(dataset, max_fine_tune_retries=2), tmp_path / "run", server.url
        )
        assert trainer.train().stage == "done"
    assert len(backend.specs) == 3 + 3  # one try and two retries, in each iteration
    group = trainer.groups["verifier"]
    assert group.model_name == "base" and group.state.model_history == []
    assert group.state.last_job_outcome == "failed"
    lines = [str(w.message) for w in warned if "keeps its" in str(w.message)]
    assert len(lines) == 2  # one warning (one plain line) per iteration
    assert lines[0].startswith("group 'verifier': fine-tuning failed after 3")


def test_a_group_that_kept_its_model_is_reported_in_the_iteration_metrics(dataset, tmp_path):
    backend = ScriptedFineTuneBackend(always_fail=True)
    with fine_tuning_server(tmp_path, backend) as server:
        trainer_for(params(dataset, max_fine_tune_retries=1), tmp_path / "run", server.url).train()
    metrics = json.loads((tmp_path / "run" / "metrics/train_it0000.json").read_text())
    assert metrics["verifier.fine_tune_failed"] == 1
    assert metrics["verifier.fine_tune_failures"] == 2
    assert "accuracy" in metrics  # added to the iteration's metrics, not replacing them


def test_malt_resubmits_the_same_preference_pairs_as_a_dpo_job(dataset, tmp_path):
    backend = ScriptedFineTuneBackend(fail_first=1)
    with fine_tuning_server(tmp_path, backend) as server:
        hp = params(dataset, trainer="pure_text_malt")
        assert trainer_for(hp, tmp_path / "run", server.url).train().stage == "done"
    first, second, _ = backend.specs.values()
    assert first.method == second.method == "dpo"
    assert first.examples == second.examples


# ---------------------------------------------------------------------- keep_previous
def test_keep_previous_does_not_resubmit_and_the_run_goes_on(dataset, tmp_path):
    backend = ScriptedFineTuneBackend(fail_first=1)
    with fine_tuning_server(tmp_path, backend) as server:
        hp = params(dataset, on_fine_tune_failure="keep_previous")
        trainer = trainer_for(hp, tmp_path / "run", server.url)
        assert trainer.train().stage == "done"
    assert len(backend.specs) == 2  # iteration 0 failed and was not retried; iteration 1 ran
    assert trainer.groups["verifier"].state.model_history == ["verifier-it1"]


# ------------------------------------------------------------------------------- stop
def test_stop_ends_the_run_with_an_error_naming_the_group_the_job_and_the_error(dataset, tmp_path):
    backend = ScriptedFineTuneBackend(fail_first=1)
    with fine_tuning_server(tmp_path, backend) as server:
        trainer = trainer_for(
            params(dataset, on_fine_tune_failure="stop"), tmp_path / "run", server.url
        )
        with pytest.raises(FineTuneStoppedError) as raised:
            trainer.train()
    job_id = next(iter(saved_state(tmp_path / "run")["groups"]["verifier"]["fine_tune_failures"]))[
        "job_id"
    ]
    assert raised.value.group == "verifier" and raised.value.job_id == job_id
    assert "'verifier'" in str(raised.value) and job_id in str(raised.value)
    assert SCRIPTED_ERROR in str(raised.value) and "nip resume" in str(raised.value)


def test_resuming_a_stopped_run_resubmits_the_job_and_never_waits_on_the_failed_one(
    dataset, tmp_path
):
    backend = ScriptedFineTuneBackend(fail_first=1)
    run_dir = tmp_path / "run"
    with fine_tuning_server(tmp_path, backend) as server:
        with pytest.raises(FineTuneStoppedError):
            trainer_for(params(dataset, on_fine_tune_failure="stop"), run_dir, server.url).train()
        assert saved_state(run_dir)["stage"] == "await_fine_tune_jobs"
        resumed = trainer_for(None, run_dir, server.url, resume=True)
        assert resumed.train().stage == "done"
    assert len(backend.specs) == 3  # the failed job, its resubmission, iteration 1's job
    assert resumed.groups["verifier"].state.model_history == ["verifier-it0-2", "verifier-it1"]


# ------------------------------------------------------------------------- kill -9
CHILD = """
import sys
from pathlib import Path
from nip.jobs.self_hosted import SelfHostedFineTuneBackend
from nip.parameters import HyperParameters
from nip.settings import ExperimentSettings
from nip.training.trainer import PureTextEiTrainer, build_trainer

run_dir, url, mode, backoff = Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
backends = {"verifier": SelfHostedFineTuneBackend(url)}
settings = ExperimentSettings(run_dir=run_dir, show_progress=False, wandb_mode="disabled")
if mode == "resume":
    trainer = PureTextEiTrainer.resume(run_dir, settings, fine_tune_backends=backends)
else:
    hp = HyperParameters.load(sys.argv[5])
    trainer = build_trainer(hp, settings, fine_tune_backends=backends)
trainer.poll_interval_s = 0.02
# The back-off is part of the run's parameters; the test shortens it for the resumed process.
trainer.hyper_params.text_rl.fine_tune_retry_backoff_s = backoff
trainer.train()
"""


def run_child(tmp_path: Path, *args: str) -> subprocess.Popen:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    log = (tmp_path / "child.log").open("ab")
    return subprocess.Popen([sys.executable, str(script), *args], stdout=log, stderr=log, env=env)


def test_a_run_killed_between_a_failure_and_the_resubmission_resubmits_on_resume(dataset, tmp_path):
    """The first process records the failure, then waits out a long back-off and is killed
    with SIGKILL there; the resumed process resubmits at once instead of polling the failed
    job, and the run finishes with the retried model."""
    backend = ScriptedFineTuneBackend(fail_first=1)
    run_dir = tmp_path / "run"
    config = tmp_path / "hp.json"
    params(dataset, fine_tune_retry_backoff_s=600.0).save(config)
    with fine_tuning_server(tmp_path, backend) as server:
        child = run_child(tmp_path, str(run_dir), server.url, "run", "600", str(config))
        try:
            deadline = time.monotonic() + 60
            while not (run_dir / "state.json").exists() or not saved_state(run_dir)["groups"].get(
                "verifier", {}
            ).get("fine_tune_failures"):
                assert child.poll() is None, (tmp_path / "child.log").read_text()
                assert time.monotonic() < deadline, "the failure was never recorded"
                time.sleep(0.02)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(10)
        assert child.returncode == -signal.SIGKILL
        assert len(backend.specs) == 1  # killed before the resubmission
        resumed = run_child(tmp_path, str(run_dir), server.url, "resume", "0")
        assert resumed.wait(90) == 0, (tmp_path / "child.log").read_text()
    state = saved_state(run_dir)
    assert state["stage"] == "done"
    assert len(backend.specs) == 3  # failed, resubmitted once, iteration 1
    assert state["groups"]["verifier"]["model_history"] == ["verifier-it0-2", "verifier-it1"]


class GivesBackTheFailedJob:
    """A fine-tuning backend whose every submission answers with one job that failed."""

    name = "gives-back-the-failed-job"

    def __init__(self):
        self.submissions = 0

    async def create_job(self, spec):
        self.submissions += 1
        return "the-one-job"

    async def get_job(self, job_id):
        from nip.jobs import FineTuneJob

        return FineTuneJob(id=job_id, status="failed", error="out of memory")

    async def cancel_job(self, job_id):
        return None

    async def list_events(self, job_id):
        return []


def test_a_resubmission_answered_with_the_failed_job_ends_the_retries_instead_of_waiting(
    dataset, tmp_path
):
    backend = GivesBackTheFailedJob()
    hp = params(dataset, max_fine_tune_retries=2)
    run_settings = ExperimentSettings(
        run_dir=tmp_path / "run", show_progress=False, wandb_mode="disabled"
    )
    trainer = build_trainer(hp, run_settings, fine_tune_backends={"verifier": backend})
    trainer.poll_interval_s = 0.02

    with pytest.warns(NipWarning) as warned:
        assert trainer.train().stage == "done"
    # In each of the two iterations that fine-tune: one try and one resubmission, which
    # gave back the same job: the group keeps its model at once.
    assert backend.submissions == 2 * 2
    assert trainer.groups["verifier"].state.last_job_outcome == "failed"
    warnings = [str(w.message) for w in warned if "gave back" in str(w.message)]
    assert len(warnings) == 2 and "'the-one-job', not a new one" in warnings[0]
