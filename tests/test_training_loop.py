"""The training loop: Expert Iteration and MALT end to end, groups, and resuming after a kill."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

from nip.errors import IncompatibleParametersError, SharedModelGroupError
from nip.jobs.dummy import DummyFineTuneBackend
from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    PureTextMaltParameters,
    RlParameters,
    TextRlParameters,
)
from nip.runs.run_dir import RunDirectory
from nip.settings import ExperimentSettings
from nip.training import stages
from nip.training.groups import PureTextSharedModelGroup
from nip.training.trainer import (
    PureTextEiTrainer,
    PureTextMaltTrainer,
    RunDirectoryError,
    build_trainer,
)


@pytest.fixture(scope="module")
def dataset(make_tiny_dataset) -> Path:
    """16 items: 12 train and 4 test, half of them correct."""
    return make_tiny_dataset(items=16, train=12)


def params(dataset: Path, trainer: str = "pure_text_ei", **overrides) -> HyperParameters:
    agents = {
        "prover": PureTextAgentParameters(use_dummy_api=True),
        "verifier": PureTextAgentParameters(use_dummy_api=True),
    }
    values = dict(
        trainer=trainer,
        dataset=str(dataset),
        agents=agents,
        nip_protocol=NipProtocolParameters(max_message_rounds=5),
        rl=RlParameters(num_iterations=2, rollouts_per_iteration=12),
        text_rl=TextRlParameters(min_fine_tune_examples=1, test_scheme="all"),
        pure_text_ei={"reward_threshold": 0.5},
    )
    values.update(overrides)
    return HyperParameters(**values)


def settings(run_dir: Path) -> ExperimentSettings:
    return ExperimentSettings(run_dir=run_dir, show_progress=False)


def test_two_runs_started_in_the_same_second_get_folders_of_their_own(
    dataset, tmp_path, monkeypatch
):
    """Without a run_dir, a run is saved under runs/<local time>: two started in the same
    second once shared one folder (the second wrote its parameters over the first's)."""
    monkeypatch.chdir(tmp_path)
    same_second = time.localtime()
    monkeypatch.setattr(time, "localtime", lambda *_: same_second)
    first = PureTextEiTrainer(params(dataset), ExperimentSettings(show_progress=False))
    second = PureTextEiTrainer(params(dataset, seed=7), ExperimentSettings(show_progress=False))
    assert first.run_dir.path != second.run_dir.path
    assert first.run_dir.path.parent == second.run_dir.path.parent == Path("runs")
    assert second.run_dir.path.name.endswith("-2")
    assert first.run_dir.read_json("hyper_params.json")["seed"] != 7


# ------------------------------------------------------------------ end to end
def test_expert_iteration_runs_two_iterations_end_to_end(dataset, tmp_path):
    trainer = PureTextEiTrainer(params(dataset), settings(tmp_path / "run"))
    state = trainer.train()
    assert state.stage == "done" and state.iteration == 1
    files = {p.relative_to(tmp_path / "run").as_posix() for p in (tmp_path / "run").rglob("*")}
    assert {
        "hyper_params.json",
        "state.json",
        "rollouts/train_it0000.jsonl",
        "rollouts/train_it0001.jsonl",
        "rollouts/test_it0001.jsonl",
        "metrics/train_it0000.json",
        "metrics/test_it0001.json",
        "fine_tune/it0000_verifier.jsonl",
        "fine_tune/it0000_prover.jsonl",
    } <= files
    verifier = trainer.groups["verifier"]
    assert verifier.model_name == "gpt-4o-mini-2024-07-18:ft-verifier-it0"
    assert trainer.session.agents["verifier"].model_name == verifier.model_name
    frame = trainer.metrics_dataframe()
    assert set(frame["split"]) == {"train", "test"} and "accuracy" in frame


def test_the_fine_tune_dataset_holds_the_dialogues_each_agent_won(dataset, tmp_path):
    trainer = PureTextEiTrainer(params(dataset), settings(tmp_path / "run"))
    trainer.train()
    won = [
        t for t in trainer.run_dir.load_rollouts("train", 0) if t.episode_reward("verifier") >= 0.5
    ]
    lines = trainer.run_dir.read_jsonl("fine_tune/it0000_verifier.jsonl")
    assert len(lines) == len(won) > 0
    assert all(line["messages"][-1]["role"] == "assistant" for line in lines)


def test_malt_grows_trees_and_trains_with_dpo(dataset, tmp_path):
    hp = params(
        dataset,
        trainer="pure_text_malt",
        rl=RlParameters(num_iterations=2, rollouts_per_iteration=4),
        pure_text_malt=PureTextMaltParameters(num_responses_per_timestep=2),
    )
    trainer = build_trainer(hp, settings(tmp_path / "run"))
    assert isinstance(trainer, PureTextMaltTrainer)
    trainer.train()
    trees = trainer.load_trees(0)
    assert len(trees) == 4
    lines = trainer.run_dir.read_jsonl("fine_tune/it0000_verifier.jsonl")
    assert lines and set(lines[0]) == {"input", "preferred_output", "non_preferred_output"}
    metrics = trainer.run_dir.read_json("metrics/train_it0000.json")
    assert metrics["mean_malt_nodes"] > 4 and metrics["verifier.malt_pairs"] == len(lines)
    assert metrics["verifier.malt_pair_proportion"] == pytest.approx(
        len(lines) / (4 * metrics["mean_non_terminal_malt_nodes"])
    )


def test_malt_starts_with_expert_iteration_when_asked(dataset, tmp_path):
    hp = params(
        dataset,
        trainer="pure_text_malt",
        pure_text_malt=PureTextMaltParameters(num_initial_ei_iterations=1),
    )
    trainer = build_trainer(hp, settings(tmp_path / "run"))
    trainer.train()
    assert not trainer.run_dir.exists("malt/trees_it0000.jsonl")
    assert trainer.run_dir.exists("malt/trees_it0001.jsonl")
    assert "messages" in trainer.run_dir.read_jsonl("fine_tune/it0000_verifier.jsonl")[0]


def test_malt_trains_on_the_pairs_of_every_earlier_malt_iteration_when_asked(dataset, tmp_path):
    """text_rl.fine_tune_on_all_previous_rollouts: the DPO dataset of iteration 2 holds the pairs
    of the trees of iterations 1 and 2 (the compatible ones: iteration 0 was Expert Iteration,
    which has no trees), as the original concatenated earlier iterations."""
    from nip.training.algorithms.malt import dpo_dataset

    hp = params(
        dataset,
        trainer="pure_text_malt",
        rl=RlParameters(num_iterations=4, rollouts_per_iteration=3),
        text_rl=TextRlParameters(
            min_fine_tune_examples=1, test_scheme="none", fine_tune_on_all_previous_rollouts=True
        ),
        pure_text_malt=PureTextMaltParameters(num_initial_ei_iterations=1),
    )
    trainer = build_trainer(hp, settings(tmp_path / "run"))
    trainer.train()
    verifier = trainer.groups["verifier"].agent_wholes
    lines = trainer.run_dir.read_jsonl("fine_tune/it0002_verifier.jsonl")
    earlier, now = trainer.load_trees(1), trainer.load_trees(2)
    assert lines == dpo_dataset(earlier + now, verifier)
    assert len(lines) > len(dpo_dataset(now, verifier)) > 0


def test_a_frozen_agent_is_never_fine_tuned(dataset, tmp_path):
    hp = params(dataset)
    hp.agents["prover"] = PureTextAgentParameters(use_dummy_api=True, freeze_agent=True)
    trainer = PureTextEiTrainer(hp, settings(tmp_path / "run"))
    trainer.train()
    prover = trainer.groups["prover"]
    assert prover.model_name == prover.base_model_name
    assert prover.state.model_history == []


def test_too_few_examples_skip_fine_tuning_with_a_warning(dataset, tmp_path):
    hp = params(dataset, text_rl=TextRlParameters(min_fine_tune_examples=1000))
    trainer = PureTextEiTrainer(hp, settings(tmp_path / "run"))
    with pytest.warns(UserWarning, match="fewer than text_rl.min_fine_tune_examples=1000"):
        trainer.train(max_stages=4)
    assert trainer.groups["verifier"].state.last_job_outcome == "insufficient_data"


def test_the_same_seed_gives_the_same_run(dataset, tmp_path):
    for name in ("a", "b"):
        PureTextEiTrainer(params(dataset), settings(tmp_path / name)).train()
    for relative in ("rollouts/train_it0001.jsonl", "fine_tune/it0000_verifier.jsonl"):
        assert (tmp_path / "a" / relative).read_text() == (tmp_path / "b" / relative).read_text()


# ----------------------------------------------------------------------- groups
def test_agents_sharing_a_group_are_fine_tuned_together(dataset, tmp_path):
    hp = params(
        dataset,
        interaction_protocol="debate",
        agents={
            "prover0": PureTextAgentParameters(use_dummy_api=True, shared_model_group="provers"),
            "prover1": PureTextAgentParameters(use_dummy_api=True, shared_model_group="provers"),
            "verifier": PureTextAgentParameters(use_dummy_api=True),
        },
        debate_protocol={"max_message_rounds": 3},
    )
    trainer = PureTextEiTrainer(hp, settings(tmp_path / "run"))
    assert set(trainer.groups) == {"provers", "verifier"}
    assert sorted(n for _, n in trainer.groups["provers"].agent_ids_and_names()) == [
        "prover0",
        "prover1",
    ]
    trainer.train()
    lines = trainer.run_dir.read_jsonl("fine_tune/it0000_provers.jsonl")
    systems = {line["messages"][0]["content"][:12] for line in lines}
    assert systems == {"You are Expe"}
    assert len({line["messages"][0]["content"].split(".")[0] for line in lines}) == 2


def test_a_group_whose_members_disagree_is_rejected():
    with pytest.raises(SharedModelGroupError, match="differ in lora_rank"):
        HyperParameters(
            interaction_protocol="mnip",
            agents={
                "prover0": PureTextAgentParameters(
                    shared_model_group="p", model_provider="TogetherAI", lora_rank=8
                ),
                "prover1": PureTextAgentParameters(
                    shared_model_group="p", model_provider="TogetherAI", lora_rank=16
                ),
            },
        )


def test_a_group_reports_the_seed_attributes(dataset, tmp_path):
    trainer = PureTextEiTrainer(params(dataset), settings(tmp_path / "run"))
    group: PureTextSharedModelGroup = trainer.groups["verifier"]
    assert group.is_trainable and group.lora_alpha == 64.0
    assert group.max_message_rounds == 5 and group.num_epochs == 1
    assert group.rl_learning_rate == trainer.hyper_params.rl.lr


# ----------------------------------------------------------------------- resume
def test_stopping_after_any_stage_and_resuming_gives_the_uninterrupted_run(dataset, tmp_path):
    PureTextEiTrainer(params(dataset), settings(tmp_path / "straight")).train()
    PureTextEiTrainer(params(dataset), settings(tmp_path / "stepped")).train(max_stages=1)
    while True:
        trainer = PureTextEiTrainer.resume(tmp_path / "stepped", settings(tmp_path / "stepped"))
        if trainer.finished:
            break
        trainer.train(max_stages=1)
    for relative in (
        "rollouts/train_it0001.jsonl",
        "fine_tune/it0000_prover.jsonl",
        "metrics/test_it0001.json",
    ):
        straight = (tmp_path / "straight" / relative).read_text()
        assert (tmp_path / "stepped" / relative).read_text() == straight


def test_starting_over_an_existing_run_is_refused(dataset, tmp_path):
    PureTextEiTrainer(params(dataset), settings(tmp_path / "run")).train(max_stages=1)
    with pytest.raises(RunDirectoryError, match="resume"):
        PureTextEiTrainer(params(dataset), settings(tmp_path / "run"))


def test_resuming_a_run_from_an_incompatible_version_needs_force(dataset, tmp_path):
    PureTextEiTrainer(params(dataset), settings(tmp_path / "run")).train(max_stages=1)
    saved = json.loads((tmp_path / "run" / "hyper_params.json").read_text())
    saved["_schema_version"] = "9.0"
    (tmp_path / "run" / "hyper_params.json").write_text(json.dumps(saved))
    with pytest.raises(IncompatibleParametersError, match=r"schema 9\.0"):
        PureTextEiTrainer.resume(tmp_path / "run")
    assert PureTextEiTrainer.resume(tmp_path / "run", force=True).state.iteration == 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kill_minus_nine_at_random_moments_loses_and_duplicates_nothing(dataset, tmp_path):
    """Kill the `nip run` process with SIGKILL at random points, at least 10 times, resuming
    each time; the result must equal an uninterrupted run's."""
    hp = params(dataset, rl=RlParameters(num_iterations=3, rollouts_per_iteration=12))
    config = tmp_path / "config.yaml"
    hp.save(config)
    nip = [sys.executable, "-m", "nip.cli"]
    # About 20 s of waiting on the dummy backend for the whole run: more than ten of the
    # 0.6-2 s windows below hold (1.3 s on average), however fast the machine starts Python.
    common = ["--quiet", "--dummy-latency", "0.6"]
    subprocess.run(
        [*nip, "run", str(config), "--run-dir", str(tmp_path / "straight"), *common],
        check=True,
        capture_output=True,
        timeout=300,
    )
    rng = random.Random(0)
    killed_dir = tmp_path / "killed"
    kills = 0
    command = [*nip, "run", str(config), "--run-dir", str(killed_dir), *common]
    log = tmp_path / "stderr.log"
    while True:
        with log.open("wb") as stderr:
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
            try:
                process.wait(timeout=rng.uniform(0.6, 2.0) if kills < 14 else 300)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
                kills += 1
                if (killed_dir / "state.json").exists():
                    command = [*nip, "resume", str(killed_dir), *common]
                else:  # killed before the first stage ended: start again
                    command = [*command, "--overwrite"] if "run" in command else command
                continue
        assert process.returncode == 0, log.read_text()[-2000:]
        break
    assert kills >= 10
    state = json.loads((killed_dir / "state.json").read_text())
    assert state["stage"] == "done"
    for path in sorted((tmp_path / "straight").rglob("*.jsonl")):
        relative = path.relative_to(tmp_path / "straight")
        assert (killed_dir / relative).read_text() == path.read_text(), relative
    ids = [
        json.loads(line)["id"]
        for line in (killed_dir / "rollouts/train_it0001.jsonl").read_text().splitlines()
    ]
    assert len(ids) == len(set(ids)) == 12
    assert time.time()  # the run finished within the time-out


STAGES = (
    "sample_rollouts",
    "log_stats",
    "test",
    "create_fine_tune_jobs",
    "await_fine_tune_jobs",
    "switch_models",
)


class SlowDummyFineTuning(DummyFineTuneBackend):
    """The dummy fine-tuning backend, with a few milliseconds per call, so a kill can land
    between writing a fine-tune dataset and submitting its job, or while a job is polled."""

    async def create_job(self, spec):
        await asyncio.sleep(0.02)
        return await super().create_job(spec)

    async def get_job(self, job_id):
        await asyncio.sleep(0.02)
        return await super().get_job(job_id)


def _train_in_child(
    hp: HyperParameters,
    run_dir: Path,
    resume: bool,
    error_log: Path,
    held_in: str | None = None,
    entered: Path | None = None,
) -> int:
    """Fork a process that starts or resumes the run; its pid. Every stage is padded with
    short sleeps, so a kill may land before, during or after the stage's work (and before
    the state is saved). The first ``held_in`` stage it enters writes ``entered`` and never
    ends, so a kill meant for that stage lands in it however slowly the parent looks."""
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        backends = {name: SlowDummyFineTuning() for name in ("prover", "verifier")}
        run_settings = ExperimentSettings(run_dir=run_dir, show_progress=False)
        run_settings.dummy_latency_s = 0.005
        if resume:
            trainer = PureTextEiTrainer.resume(run_dir, run_settings, fine_tune_backends=backends)
        else:
            trainer = build_trainer(hp, run_settings, fine_tune_backends=backends, overwrite=True)
        trainer.poll_interval_s = 0.01
        for stage in STAGES:  # the child's own table of stages (forked: the parent's stays)
            work = stages.STAGES[stage]

            async def padded(run, callbacks, work=work, stage=stage):
                await asyncio.sleep(0.04)
                if stage == held_in:
                    entered.write_text(stage)
                await work(run, callbacks)
                await asyncio.sleep(600 if stage == held_in else 0.04)  # held: until killed

            stages.STAGES[stage] = padded
        trainer.train()
    except BaseException:
        error_log.write_text(traceback.format_exc())
        code = 1
    os._exit(code)


def _wait(pid: int, timeout_s: float = 60) -> int:
    """The exit status of child ``pid``; killed (and a failure) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the training process did not finish in {timeout_s} s")


def _read_state(run_dir: Path) -> dict | None:
    """The saved state, or None before the first stage has ended."""
    try:
        return json.loads((run_dir / "state.json").read_text())
    except FileNotFoundError:
        return None


def _stage_running(run_dir: Path) -> tuple[int, str]:
    """The iteration and stage the run is in (the state names the next stage to run)."""
    state = _read_state(run_dir) or {"iteration": 0, "stage": "sample_rollouts"}
    return state["iteration"], state["stage"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("trainer_name", ["pure_text_ei", "pure_text_malt"])
def test_kill_minus_nine_in_every_stage_then_resume_equals_the_uninterrupted_run(
    dataset, tmp_path, trainer_name
):
    """SIGKILL the training loop twice in each of the six stages (12+ kills), at a random
    moment inside the stage, resuming each time: rollouts, MALT trees and fine-tune datasets
    equal an uninterrupted run's, and no rollout is lost or duplicated."""
    hp = params(
        dataset,
        trainer=trainer_name,
        rl=RlParameters(num_iterations=3, rollouts_per_iteration=6),
        pure_text_malt=PureTextMaltParameters(num_responses_per_timestep=2),
        nip_protocol=NipProtocolParameters(max_message_rounds=3),
    )
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    error_log = tmp_path / "child-error.txt"
    rng = random.Random(0)
    pid = _train_in_child(hp, straight, False, error_log)
    assert _wait(pid) == 0, error_log.read_text() if error_log.exists() else ""

    kills: list[tuple[int, str]] = []  # (iteration, stage) the run was in when killed
    entered = tmp_path / "entered"
    for target in [*STAGES, *STAGES]:  # iterations 0 and 1 go through all six
        entered.unlink(missing_ok=True)
        resume = _read_state(killed) is not None
        pid = _train_in_child(hp, killed, resume, error_log, held_in=target, entered=entered)
        try:
            deadline = time.monotonic() + 30
            while not entered.exists():
                if os.waitpid(pid, os.WNOHANG) != (0, 0):
                    pytest.fail(f"the run ended before stage {target} (kills: {kills})")
                if time.monotonic() > deadline:
                    pytest.fail(f"stage {target} never came")
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, 0.03))  # somewhere inside the stage's work, or after
            kills.append(_stage_running(killed))
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    pid = _train_in_child(hp, killed, True, error_log)
    assert _wait(pid) == 0, error_log.read_text() if error_log.exists() else ""

    assert len(kills) == 12
    assert {stage for _, stage in kills} == set(STAGES)
    assert _read_state(killed)["stage"] == "done"
    straight_files = sorted(p.relative_to(straight) for p in straight.rglob("*.jsonl"))
    assert any(p.parts[0] == "fine_tune" for p in straight_files)
    assert straight_files == sorted(p.relative_to(killed) for p in killed.rglob("*.jsonl"))
    for relative in straight_files:
        assert (killed / relative).read_text() == (straight / relative).read_text(), relative
    for iteration in range(3):
        ids = [t.id for t in RunDirectory(killed).load_rollouts("train", iteration)]
        assert len(ids) == len(set(ids)) > 0


# ------------------------------------------------------------------------ W&B
@pytest.mark.timeout(120)
def test_metrics_go_to_an_offline_wandb_run_without_a_key(dataset, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    run_settings = settings(tmp_path / "run")
    run_settings.wandb_mode = "auto"
    trainer = PureTextEiTrainer(params(dataset), run_settings)
    trainer.train()
    offline_runs = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 1
    assert list(offline_runs[0].glob("*.wandb"))


def test_wandb_disabled_writes_nothing(dataset, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    run_settings = settings(tmp_path / "run")
    run_settings.wandb_mode = "disabled"
    PureTextEiTrainer(params(dataset), run_settings).train()
    assert not (tmp_path / "run" / "wandb").exists()


# ------------------------------------------------------------ fine-tuning jobs are paid for once
class CountingFineTuning(DummyFineTuneBackend):
    """The dummy fine-tuning backend, recording every job it accepts in ``ledger`` (shared
    across restarts, as a provider's billing is) and failing the ``fail_call``-th call
    before it submits anything."""

    def __init__(self, ledger: list[str], fail_call: int | None = None):
        self.ledger = ledger
        self.fail_call = fail_call
        self.calls = 0

    async def create_job(self, spec):
        self.calls += 1
        if self.calls == self.fail_call:
            raise ConnectionError("the process dies here, after the first group's job")
        job_id = await super().create_job(spec)
        self.ledger.append(spec.job_name)
        return job_id


@pytest.mark.parametrize("trainer_name", ["pure_text_ei", "pure_text_malt"])
def test_a_crash_after_the_first_groups_submission_does_not_submit_it_again(
    dataset, tmp_path, trainer_name
):
    """The run dies between the first group's submission and the end of the stage; on
    resume that job is found in the saved state, so each group pays for one job per
    iteration."""
    hp = params(
        dataset,
        trainer=trainer_name,
        rl=RlParameters(num_iterations=3, rollouts_per_iteration=6),
        pure_text_malt=PureTextMaltParameters(num_responses_per_timestep=2),
        nip_protocol=NipProtocolParameters(max_message_rounds=3),
    )
    ledger: list[str] = []
    crashing = CountingFineTuning(ledger, fail_call=2)
    trainer = build_trainer(
        hp, settings(tmp_path / "run"), fine_tune_backends=dict.fromkeys(hp.agents, crashing)
    )
    with pytest.raises(ConnectionError):
        trainer.train()
    first_group = next(iter(trainer.groups))
    saved = json.loads((tmp_path / "run" / "state.json").read_text())
    assert saved["stage"] == "create_fine_tune_jobs"
    assert saved["groups"][first_group]["fine_tune_job_id"] is not None
    assert ledger == [f"{first_group}-it0"]

    counting = CountingFineTuning(ledger)
    resumed = PureTextEiTrainer.resume(
        tmp_path / "run",
        settings(tmp_path / "run"),
        fine_tune_backends=dict.fromkeys(hp.agents, counting),
    )
    assert resumed.train().stage == "done"
    assert sorted(ledger) == sorted(f"{g}-it{i}" for g in ("prover", "verifier") for i in (0, 1))
    assert resumed.groups[first_group].model_name.endswith(f":ft-{first_group}-it1")


class RecordingFineTuning(DummyFineTuneBackend):
    """The dummy fine-tuning backend, keeping every job's examples and counting fetches."""

    def __init__(self):
        self.submitted: dict[str, list[dict]] = {}
        self.fetches = 0

    async def create_job(self, spec):
        self.submitted[spec.job_name] = list(spec.examples)
        return await super().create_job(spec)

    async def get_job(self, job_id):
        self.fetches += 1
        return await super().get_job(job_id)


@pytest.mark.parametrize("trainer_name", ["pure_text_ei", "pure_text_malt"])
def test_each_job_trains_on_exactly_the_dataset_saved_in_the_run_directory(
    dataset, tmp_path, trainer_name
):
    hp = params(
        dataset, trainer=trainer_name, nip_protocol=NipProtocolParameters(max_message_rounds=3)
    )
    jobs = RecordingFineTuning()
    trainer = build_trainer(
        hp, settings(tmp_path / "run"), fine_tune_backends=dict.fromkeys(hp.agents, jobs)
    )
    trainer.train()
    assert sorted(jobs.submitted) == ["prover-it0", "verifier-it0"]
    for name, examples in jobs.submitted.items():
        group = name.removesuffix("-it0")
        assert examples == trainer.run_dir.read_jsonl(f"fine_tune/it0000_{group}.jsonl")


def test_switching_models_fetches_each_finished_job_once(dataset, tmp_path):
    hp = params(dataset)
    jobs = RecordingFineTuning()
    trainer = build_trainer(
        hp, settings(tmp_path / "run"), fine_tune_backends=dict.fromkeys(hp.agents, jobs)
    )
    while trainer.state.stage != "switch_models":
        trainer.train(max_stages=1)
    jobs.fetches = 0
    trainer.train(max_stages=1)
    assert jobs.fetches == 2  # one per group
    assert [g.model_name for g in trainer.groups.values()] == [
        "gpt-4o-mini-2024-07-18:ft-prover-it0",
        "gpt-4o-mini-2024-07-18:ft-verifier-it0",
    ]
    assert {g.state.last_job_outcome for g in trainer.groups.values()} == {"none"}


def test_a_dummy_run_reports_zero_cost(dataset, tmp_path):
    trainer = PureTextEiTrainer(params(dataset), settings(tmp_path / "run"))
    trainer.train(max_stages=2)
    assert trainer.run_dir.read_json("metrics/train_it0000.json")["cost_usd"] == 0.0


def test_api_turns_are_priced_with_the_prices_of_the_settings(dataset, tmp_path, monkeypatch):
    from nip.backends.dummy import DummyBackend, DummyPolicy
    from nip.testing.server import create_app, serve

    server = serve(create_app(DummyBackend(DummyPolicy(decide_on_turn=3))))
    try:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        hp = params(dataset)
        for agent in hp.agents.values():
            agent.use_dummy_api = False  # OpenAI, through the test server
        prices = {"gpt-4o-mini": (1_000_000.0, 0.0)}  # a dollar per prompt token
        run_settings = ExperimentSettings(
            run_dir=tmp_path / "run", show_progress=False, cache="off", prices_usd_per_1m=prices
        )
        trainer = PureTextEiTrainer(hp, run_settings)
        trainer.train(max_stages=2)
    finally:
        server.stop()
    metrics = trainer.run_dir.read_json("metrics/train_it0000.json")
    assert metrics["prompt_tokens"] > 0
    assert metrics["cost_usd"] == pytest.approx(metrics["prompt_tokens"])
    for agent in ("prover", "verifier"):
        assert metrics[f"{agent}.cost_usd"] == pytest.approx(metrics[f"{agent}.prompt_tokens"])
        assert metrics[f"{agent}.mean_latency_s"] > 0  # measured around each HTTP call
    assert metrics["prover.cost_usd"] + metrics["verifier.cost_usd"] == pytest.approx(
        metrics["cost_usd"]
    )


def test_the_run_metrics_hold_the_originals_verifier_metrics(dataset, tmp_path):
    trainer = PureTextEiTrainer(params(dataset), settings(tmp_path / "run"))
    trainer.train(max_stages=2)
    metrics = trainer.run_dir.read_json("metrics/train_it0000.json")
    assert 0.0 <= metrics["worst_datapoint_accuracy"] <= metrics["accuracy"]
    assert 0.0 <= metrics["always_wrong_proportion"] <= 1.0
    assert 0.0 <= metrics["mean_decision"] <= 1.0
    assert 0.0 <= metrics["verifier_decision_entropy"] <= 1.0
    assert metrics["verifier.prompt_tokens"] > 0 and metrics["prover.completion_tokens"] > 0


def test_a_frozen_group_asked_to_fine_tune_warns_and_records_frozen(dataset):
    from nip.session import Session

    hp = params(dataset)
    hp.agents["prover"] = PureTextAgentParameters(use_dummy_api=True, freeze_agent=True)
    session = Session(hp, ExperimentSettings(show_progress=False))
    group = PureTextSharedModelGroup(
        hp, None, session.handler, {"prover": session.agents["prover"]}, "prover"
    )
    with pytest.warns(UserWarning, match="group 'prover' is frozen"):
        job_id = asyncio.run(group.create_supervised_fine_tune_job({"prover": []}))
    assert job_id is None and group.state.last_job_outcome == "frozen"


def test_a_run_with_a_frozen_agent_records_frozen_without_warning(dataset, tmp_path):
    import warnings

    hp = params(dataset)
    hp.agents["prover"] = PureTextAgentParameters(use_dummy_api=True, freeze_agent=True)
    trainer = PureTextEiTrainer(hp, settings(tmp_path / "run"))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*frozen")
        trainer.train(max_stages=4)
    assert trainer.groups["prover"].state.last_job_outcome == "frozen"


@pytest.mark.filterwarnings("ignore:group .* fewer than")
@pytest.mark.parametrize(
    ("scheme", "tested"),
    [("none", []), ("last", [2]), ("first_and_last", [0, 2]), ("all", [0, 1, 2])],
)
def test_the_test_scheme_picks_the_iterations_that_are_tested(dataset, tmp_path, scheme, tested):
    hp = params(
        dataset,
        rl=RlParameters(num_iterations=3, rollouts_per_iteration=4),
        text_rl=TextRlParameters(min_fine_tune_examples=1, test_scheme=scheme),
    )
    trainer = PureTextEiTrainer(hp, settings(tmp_path / "run"))
    trainer.train()
    run_dir = trainer.run_dir
    assert [i for i in range(3) if run_dir.has_rollouts("test", i)] == tested
    assert [i for i in range(3) if run_dir.exists(f"metrics/test_it{i:04d}.json")] == tested
    assert all(run_dir.has_rollouts("train", i) for i in range(3))
