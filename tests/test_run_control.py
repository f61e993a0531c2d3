"""Pausing, resuming and stopping a run between stages through its control file, from the
same kernel or another process (``nip control``), and the dashboard's reading of a run."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nip.cli import main
from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    RlParameters,
    TextRlParameters,
)
from nip.runs.control import (
    RunControlError,
    StageProgressWriter,
    read_request,
    read_stage_progress,
    read_status,
    reported_status,
    request,
)
from nip.settings import ExperimentSettings
from nip.training.trainer import PureTextEiTrainer
from nip.widgets import RunMonitor, RunSnapshot

WAIT_S = 60.0  # a bound on every wait, never reached when things work


@pytest.fixture(scope="module")
def dataset(make_tiny_dataset) -> Path:
    """12 items: 8 train and 4 test, half of them correct."""
    return make_tiny_dataset(items=12, train=8)


def params(dataset: Path) -> HyperParameters:
    return HyperParameters(
        trainer="pure_text_ei",
        dataset=str(dataset),
        agents={
            "prover": PureTextAgentParameters(use_dummy_api=True),
            "verifier": PureTextAgentParameters(use_dummy_api=True),
        },
        nip_protocol=NipProtocolParameters(max_message_rounds=5),
        rl=RlParameters(num_iterations=2, rollouts_per_iteration=8),
        text_rl=TextRlParameters(min_fine_tune_examples=1, test_scheme="all"),
        pure_text_ei={"reward_threshold": 0.5},
    )


def trainer_at(run_dir: Path, dataset: Path) -> PureTextEiTrainer:
    trainer = PureTextEiTrainer(params(dataset), ExperimentSettings(run_dir=run_dir))
    trainer.poll_interval_s = 0.01
    return trainer


async def wait_until(condition: Callable[[], bool]) -> None:
    """Yield to the loop until ``condition()`` holds (failing after WAIT_S seconds)."""
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.01)


def saved_outputs(run_dir: Path) -> dict[str, str]:
    return {
        p.relative_to(run_dir).as_posix(): p.read_text()
        for folder in ("rollouts", "fine_tune", "metrics")
        for p in sorted((run_dir / folder).glob("*"))
    }


# --------------------------------------------------------------------- the trainer
def test_a_run_paused_resumed_stopped_and_resumed_with_nip_resume_equals_an_uninterrupted_run(
    dataset, tmp_path
):
    PureTextEiTrainer(params(dataset), ExperimentSettings(run_dir=tmp_path / "straight")).train()
    run = tmp_path / "interrupted"
    trainer = trainer_at(run, dataset)

    async def pause_resume_then_stop() -> None:
        request(run, "pause")
        first = asyncio.create_task(trainer.train_async(max_stages=4))
        await wait_until(lambda: read_status(run).get("status") == "paused")
        assert trainer.state.stages_completed == 1 and RunSnapshot.read(run).status == "paused"
        await asyncio.sleep(0.1)  # many polls: a paused run stays where it is
        assert trainer.state.stages_completed == 1 and not first.done()
        request(run, "resume")
        await asyncio.wait_for(first, WAIT_S)
        assert trainer.state.stages_completed == 4

        request(run, "pause")
        second = asyncio.create_task(trainer.train_async())
        await wait_until(lambda: read_status(run).get("status") == "paused")
        request(run, "stop")
        state = await asyncio.wait_for(second, WAIT_S)
        assert state.stages_completed == 5 and state.stage != "done"

    asyncio.run(pause_resume_then_stop())
    assert RunSnapshot.read(run).status == "stopped"
    assert read_request(run) == "run"  # the stop was answered: resuming does not stop again

    assert main(["resume", str(run), "--quiet"]) == 0
    assert PureTextEiTrainer.resume(run).finished
    assert saved_outputs(run) == saved_outputs(tmp_path / "straight")


def test_a_stop_asked_before_the_run_continues_ends_it_at_the_next_stage_boundary(
    dataset, tmp_path
):
    run = tmp_path / "run"
    trainer = trainer_at(run, dataset)
    trainer.train(max_stages=1)
    request(run, "stop")
    state = trainer.train()
    assert state.stages_completed == 2 and not trainer.finished
    assert PureTextEiTrainer.resume(run).train().stage == "done"


@pytest.mark.timeout(300)
def test_a_nip_run_in_another_process_pauses_and_stops_when_asked_with_nip_control(
    dataset, tmp_path
):
    config, run = tmp_path / "config.yaml", tmp_path / "run"
    params(dataset).save(config)
    request(run, "pause")  # as the dashboard's button would, before the run starts
    command = [sys.executable, "-m", "nip.cli", "run", str(config), "--run-dir", str(run)]
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen([*command, "--quiet"], stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + WAIT_S
        while read_status(run).get("status") != "paused":
            assert process.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the run did not pause"
            time.sleep(0.05)
        assert RunSnapshot.read(run).stages_completed == 1
        assert main(["control", str(run), "stop"]) == 0
        assert process.wait(timeout=WAIT_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert RunSnapshot.read(run).status == "stopped"
    assert main(["resume", str(run), "--quiet"]) == 0
    assert RunSnapshot.read(run).finished


def test_an_unknown_request_is_refused_with_the_allowed_ones(tmp_path):
    with pytest.raises(RunControlError, match="'pause', 'resume'"):
        request(tmp_path, "halt")


def test_without_a_control_file_the_run_goes_on(tmp_path):
    assert read_request(tmp_path) == "run"


# --------------------------------------------------------------------------- cli
def test_nip_control_writes_the_request_the_trainer_reads(dataset, tmp_path, capsys):
    run = tmp_path / "run"
    trainer_at(run, dataset).train(max_stages=1)
    assert main(["control", str(run), "pause"]) == 0
    assert read_request(run) == "pause"
    assert main(["control", str(run), "resume"]) == 0
    assert read_request(run) == "run"
    assert "asked the run to resume" in capsys.readouterr().out


def test_nip_control_refuses_a_folder_without_a_run(tmp_path, capsys):
    assert main(["control", str(tmp_path), "stop"]) == 2
    assert "holds no run" in capsys.readouterr().err
    assert not (tmp_path / "control.json").exists()


# ------------------------------------------------------------------ the snapshot
def test_the_snapshot_follows_a_growing_run_directory(dataset, tmp_path):
    run = tmp_path / "run"
    assert RunSnapshot.read(run).status == "no run"
    trainer = trainer_at(run, dataset)
    assert RunSnapshot.read(run).status == "not started"

    trainer.train(max_stages=2)  # sampled and logged iteration 0
    snapshot = RunSnapshot.read(run)
    assert (snapshot.iteration, snapshot.stage, snapshot.stage_number) == (0, "test", 3)
    assert snapshot.status == "running" and snapshot.total_stages == 9
    assert [i for i, _ in snapshot.metric("train", "accuracy")] == [0]
    assert snapshot.agents == ["prover", "verifier"]
    assert "iteration 1 of 2" in snapshot.describe()

    trainer.train(max_stages=4)  # tested, created and awaited the jobs, switched models
    snapshot = RunSnapshot.read(run)
    assert snapshot.iteration == 1 and snapshot.stage == "sample_rollouts"
    assert [i for i, _ in snapshot.metric("test", "accuracy")] == [0]
    jobs = {job.group: job for job in snapshot.jobs}
    assert jobs["verifier"].iteration == 0
    assert jobs["verifier"].model == "gpt-4o-mini-2024-07-18:ft-verifier-it0"

    trainer.train()
    snapshot = RunSnapshot.read(run)
    assert snapshot.status == "finished" and snapshot.progress == 1.0
    assert [i for i, _ in snapshot.metric("train", "accuracy")] == [0, 1]


def test_the_rollout_engine_reports_each_finished_dialogue(dataset, tmp_path):
    trainer = trainer_at(tmp_path / "run", dataset)
    calls: list[tuple[int, int]] = []
    trainer.session.rollouts(n=4, on_progress=lambda done, total: calls.append((done, total)))
    assert calls == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]


def test_a_stage_that_plays_dialogues_writes_how_far_it_has_got(dataset, tmp_path):
    run = tmp_path / "run"
    trainer = trainer_at(run, dataset)
    trainer.train(max_stages=1)  # sampled iteration 0's 8 dialogues
    played = read_stage_progress(run)
    assert (played["stage"], played["iteration"], played["done"], played["total"]) == (
        "sample_rollouts",
        0,
        8,
        8,
    )
    # The run has moved on to logging: that count is about a finished stage, not shown.
    assert RunSnapshot.read(run).stage_progress == ""


def test_the_snapshot_shows_how_far_the_current_stage_has_got(dataset, tmp_path):
    run = tmp_path / "run"
    trainer_at(run, dataset).train(max_stages=2)  # now at iteration 0's test stage
    report = StageProgressWriter(run, "test", 0, total=8, offset=4)  # the second of two passes
    report(1, 4)
    snapshot = RunSnapshot.read(run)
    assert (snapshot.stage_done, snapshot.stage_total) == (5, 8)
    assert snapshot.position.endswith("test (5 of 8 dialogues)")


def test_stage_progress_is_written_at_most_twice_a_second_but_always_at_the_end(tmp_path):
    report = StageProgressWriter(tmp_path, "sample_rollouts", 3, min_interval_s=3600)
    report(0, 10)  # the first report: always written
    report(6, 10)  # too soon after the last write: skipped
    assert read_stage_progress(tmp_path)["done"] == 0
    report(10, 10)
    assert read_stage_progress(tmp_path)["done"] == 10


def test_progress_is_written_without_waiting_for_the_disk_and_state_with_it(tmp_path, monkeypatch):
    """A progress count is for a display (fsync under a busy disk cost more than the write);
    files a resume reads are on the disk before they replace the old ones."""
    import os

    from nip.utils.files import atomic_write_text

    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    StageProgressWriter(tmp_path, "sample_rollouts", 0)(1, 10)
    assert read_stage_progress(tmp_path)["done"] == 1 and synced == []
    atomic_write_text(tmp_path / "state.json", "{}")
    assert len(synced) == 1


def test_the_first_stage_progress_is_written_on_a_machine_booted_moments_ago(tmp_path, monkeypatch):
    """time.monotonic counts from boot: on a machine up for less than min_interval_s, the
    first report was once skipped (the writer started from 0.0, a value the clock reads)."""
    monkeypatch.setattr(time, "monotonic", lambda: 12.0)  # up for 12 s
    report = StageProgressWriter(tmp_path, "sample_rollouts", 0, min_interval_s=3600)
    report(1, 10)
    assert read_stage_progress(tmp_path)["done"] == 1


def test_stage_progress_intervals_are_measured_on_the_clock_it_is_given(tmp_path):
    now = [0.0]
    report = StageProgressWriter(tmp_path, "test", 2, min_interval_s=0.5, clock=lambda: now[0])
    report(1, 10)  # at 0.0: the first report
    now[0] = 0.4
    report(2, 10)  # 0.4 s later: skipped
    assert read_stage_progress(tmp_path)["done"] == 1
    now[0] = 0.9
    report(3, 10)  # 0.5 s after the last write: written
    assert read_stage_progress(tmp_path)["done"] == 3


def test_the_snapshot_reads_a_local_jobs_losses_from_its_events(tmp_path):
    run = tmp_path / "run"
    (run / "jobs" / "job-1").mkdir(parents=True)
    (run / "state.json").write_text(
        json.dumps(
            {
                "iteration": 0,
                "stage": "await_fine_tune_jobs",
                "stages_completed": 4,
                "groups": {
                    "verifier": {"fine_tune_job_id": "job-1", "last_job_outcome": "submitted"}
                },
                "job_iterations": {"verifier": 0},
            }
        )
    )
    (run / "jobs" / "job-1" / "status.json").write_text('{"status": "running"}')
    events = [{"message": "started", "data": {}}]
    events += [{"message": f"step {s}", "data": {"step": s, "loss": 2.0 / s}} for s in (1, 2)]
    (run / "jobs" / "job-1" / "events.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in events) + '{"half a li'
    )
    (job,) = RunSnapshot.read(run).jobs
    assert (job.status, job.losses) == ("running", ((1, 2.0), (2, 1.0)))


# ------------------------------------------------------------------- the widget
def test_the_dashboard_grows_its_plots_and_its_buttons_write_the_control_file(dataset, tmp_path):
    run = tmp_path / "run"
    trainer = trainer_at(run, dataset)
    trainer.train(max_stages=3)
    monitor = RunMonitor(trainer)  # no running loop here: no polling task
    assert monitor.task is None
    assert [t.name for t in monitor.accuracy_plot.figure.data] == ["train", "test"]
    assert list(monitor.reward_plot.figure.data[0].x) == [0]

    monitor.pause_button.click()
    assert read_request(run) == "pause" and monitor.pause_button.disabled
    assert "pausing" in monitor.header.value
    monitor.resume_button.click()
    assert read_request(run) == "run"

    trainer.train()
    monitor.refresh()
    assert list(monitor.accuracy_plot.figure.data[0].x) == [0, 1]
    assert "finished" in monitor.header.value and monitor.stop_button.disabled
    assert "ft-verifier-it0" in monitor.jobs_view.value


def test_the_dashboard_says_what_dummy_jobs_did_and_draws_no_empty_loss_plot(dataset, tmp_path):
    trainer = trainer_at(tmp_path / "run", dataset)
    trainer.train()
    monitor = RunMonitor(trainer.run_dir.path)
    jobs = {job.group: job for job in monitor.snapshot.jobs}
    assert jobs["verifier"].state == "succeeded, in use (dummy backend: trains nothing)"
    assert jobs["verifier"].model in monitor.jobs_view.value
    assert "none" not in [job.state for job in jobs.values()]  # the outcome of no iteration
    assert "no losses reported: the dummy backend trains nothing" in monitor.jobs_view.value
    assert monitor.loss_plot.layout.display == "none" and not monitor.loss_plot.figure.data


def test_the_dashboards_figures_are_saved_as_light_outputs_not_figure_widgets(dataset, tmp_path):
    """A plotly FigureWidget keeps plotly.js (5 MB) in its saved state: a notebook with one
    dashboard saved at 15 MB."""
    from ipywidgets.embed import dependency_state

    trainer = trainer_at(tmp_path / "run", dataset)
    trainer.train()
    monitor = RunMonitor(trainer.run_dir.path)
    state = json.dumps(dependency_state(monitor, drop_defaults=False))
    assert len(state) < 200_000, f"the dashboard's widget state is {len(state):,} bytes"
    assert [t.name for t in monitor.accuracy_plot.figure.data] == ["train", "test"]


def test_a_run_can_be_paused_from_the_dashboard_before_its_first_stage_ends(dataset, tmp_path):
    run = tmp_path / "run"
    trainer_at(run, dataset)  # built: the background task has not finished a stage yet
    monitor = RunMonitor(run)
    assert "not started" in monitor.header.value and not monitor.pause_button.disabled
    monitor.pause_button.click()
    assert read_request(run) == "pause" and "pausing" in monitor.header.value


def test_a_run_that_says_running_but_whose_owner_was_killed_reads_interrupted(dataset, tmp_path):
    run = tmp_path / "run"
    trainer_at(run, dataset).train(max_stages=1)  # says "running", and is between two calls
    assert read_status(run)["status"] == "running" and reported_status(run) == "running"
    # A process trains it (as ``nip run`` elsewhere would), then is killed with -9.
    script = (
        "import sys, time\nfrom nip.runs.ownership import owning\n"
        "with owning(sys.argv[1], 'training'):\n    print('holding', flush=True)\n"
        "    time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    owner = subprocess.Popen(
        [sys.executable, "-c", script, str(run)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert owner.stdout.readline() == b"holding\n"
        assert RunSnapshot.read(run).status == "running"
    finally:
        owner.kill()  # SIGKILL: its lock file still names it
        owner.wait(timeout=WAIT_S)
    assert read_status(run)["status"] == "running"  # what the file says, unchanged
    assert reported_status(run) == "interrupted"
    assert RunSnapshot.read(run).status == "interrupted"
    monitor = RunMonitor(run, start=False)
    assert "interrupted" in monitor.header.value and "resume it" in monitor.header.value
    assert all(b.disabled for b in (monitor.pause_button, monitor.stop_button))
    monitor.close()
    PureTextEiTrainer.resume(run).train(max_stages=1)  # resumed: running again, then owned
    assert RunSnapshot.read(run).status == "running"


def test_the_dashboard_of_a_folder_without_a_run_offers_no_buttons(tmp_path):
    monitor = RunMonitor(tmp_path)
    assert "no run" in monitor.header.value
    assert all(b.disabled for b in (monitor.pause_button, monitor.stop_button))


def test_the_dashboard_polls_on_the_running_loop_until_it_is_closed(dataset, tmp_path):
    run = tmp_path / "run"
    trainer = trainer_at(run, dataset)

    async def watch_while_training() -> None:
        monitor = RunMonitor(trainer, poll_interval_s=0.01)
        assert monitor.task is not None
        await trainer.train_async(max_stages=2)
        await wait_until(lambda: monitor.snapshot.stages_completed == 2)
        task = monitor.task
        monitor.close()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(watch_while_training())


def test_a_finished_run_says_finished_in_run_status_json_with_all_its_stages_counted(
    dataset, tmp_path
):
    trainer = trainer_at(tmp_path / "run", dataset)
    trainer.train()
    status = read_status(tmp_path / "run")
    assert status["status"] == "finished"
    assert status["stages_completed"] == status["stages_total"] == trainer.plan.total_stages
    assert RunSnapshot.read(tmp_path / "run").status == "finished"


def test_a_run_whose_stage_raises_says_failed_with_the_error_and_running_once_resumed(
    dataset, tmp_path, monkeypatch
):
    from nip.training.stages import STAGES

    run = tmp_path / "run"
    trainer = trainer_at(run, dataset)
    log_stats = STAGES["log_stats"]

    async def disk_full(run_context, callbacks) -> None:
        raise OSError("no space left on device")

    monkeypatch.setitem(STAGES, "log_stats", disk_full)  # the second stage fails
    with pytest.raises(OSError):
        trainer.train()
    monkeypatch.setitem(STAGES, "log_stats", log_stats)
    status = read_status(run)
    assert status["status"] == "failed" and status["stages_completed"] == 1
    assert status["error"] == "log_stats: OSError: no space left on device"
    snapshot = RunSnapshot.read(run)
    assert snapshot.status == "failed" and snapshot.error == status["error"]

    resumed = PureTextEiTrainer.resume(run)
    resumed.train(max_stages=1)
    assert read_status(run)["status"] == "running" and "error" not in read_status(run)
    resumed.train()
    assert read_status(run)["status"] == "finished"
