"""The run plan: what a run will do, computed once, and read by the trainer, the dry run,
the reporter and ``nip plan``; a resumed run refuses a changed plan."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from nip.cli import main
from nip.configs import list_presets
from nip.jobs import FineTuneSpec
from nip.jobs.dummy import DummyFineTuneBackend
from nip.jobs.openai_api import job_request
from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    PureTextMaltParameters,
    RlParameters,
    TextRlParameters,
)
from nip.providers import DUMMY_PROVIDER
from nip.runs.changes import change_saved_parameters
from nip.settings import ExperimentSettings
from nip.training.cost_estimate import estimate_cost, plan_run
from nip.training.plan import PlanChangedError, RunPlan, make_run_plan
from nip.training.trainer import PureTextEiTrainer, build_trainer


@pytest.fixture(scope="module")
def dataset(make_tiny_dataset) -> Path:
    return make_tiny_dataset(items=16, train=12)


def params(dataset: Path, **overrides) -> HyperParameters:
    values = dict(
        dataset=str(dataset),
        agents={
            "prover": PureTextAgentParameters(use_dummy_api=True),
            "verifier": PureTextAgentParameters(use_dummy_api=True),
        },
        nip_protocol=NipProtocolParameters(max_message_rounds=3),
        rl=RlParameters(num_iterations=3, rollouts_per_iteration=4),
        text_rl=TextRlParameters(min_fine_tune_examples=1, test_scheme="first_and_last"),
    )
    values.update(overrides)
    return HyperParameters(**values)


def settings(run_dir: Path) -> ExperimentSettings:
    return ExperimentSettings(run_dir=run_dir, show_progress=False)


def test_the_plan_says_what_each_iteration_samples_tests_and_trains():
    hp = HyperParameters.construct_test_params()
    hp.trainer = "pure_text_malt"
    hp.rl = RlParameters(num_iterations=4, rollouts_per_iteration=3, num_test_iterations=2)
    hp.text_rl = TextRlParameters(
        test_scheme="first_and_last", fine_tune_on_all_previous_rollouts=True
    )
    hp.pure_text_malt = PureTextMaltParameters(num_initial_ei_iterations=1)
    hp.agents["prover"].freeze_agent = True
    plan = make_run_plan(hp, train_ids=[f"t{i}" for i in range(10)], test_ids=["a", "b", "c"])
    assert [it.algorithm for it in plan] == ["expert_iteration", "malt", "malt", "malt"]
    assert [it.tests for it in plan] == [True, False, False, True]
    assert plan[0].test_passes == 2 and sorted(plan[0].test_item_ids) == ["a", "b", "c"]
    assert plan[0].item_ids != ("t0", "t1", "t2")  # a seeded shuffled walk
    assert len(set(plan[0].item_ids + plan[1].item_ids + plan[2].item_ids)) == 9
    verifier = [it.group("verifier") for it in plan]
    assert [v.method for v in verifier[:3]] == ["supervised", "dpo", "dpo"]
    assert [v.data_iterations for v in verifier[:3]] == [(0,), (1,), (1, 2)]
    assert verifier[3] is None and not plan[3].fine_tunes  # the last iteration trains nothing
    assert plan[1].group("prover").skip == "frozen" and plan[1].frozen_agents == ("prover",)
    assert "verifier: dpo on its 1-2" in str(plan)


@pytest.mark.parametrize("iterations, counted", [(1, "1 iteration"), (3, "3 iterations")])
def test_the_plans_and_dry_runs_first_lines_count_iterations_in_words(iterations, counted):
    hp = HyperParameters.construct_test_params()
    hp.rl = RlParameters(num_iterations=iterations, rollouts_per_iteration=2)
    plan = make_run_plan(hp, train_ids=[f"t{i}" for i in range(6)], test_ids=["a"])
    assert str(plan).splitlines()[0].endswith(f"seed {hp.seed}, {counted}")
    assert f", {counted}: " in str(estimate_cost(hp)).splitlines()[0]


def test_the_plan_round_trips_through_a_dict_and_json():
    plan = plan_run(HyperParameters.construct_test_params())
    assert RunPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert "<table>" in plan._repr_html_()


def test_a_jobs_settings_in_the_plan_are_what_the_backend_is_sent(dataset, tmp_path):
    submitted: list[FineTuneSpec] = []

    class Recording(DummyFineTuneBackend):
        async def create_job(self, spec):
            submitted.append(spec)
            return await super().create_job(spec)

    hp = params(dataset, rl=RlParameters(num_iterations=2, rollouts_per_iteration=4))
    trainer = build_trainer(
        hp, settings(tmp_path / "run"), fine_tune_backends={"verifier": Recording()}
    )
    trainer.train()
    (spec,) = submitted
    assert DUMMY_PROVIDER.job_settings(spec) == trainer.plan[0].group("verifier").job
    openai = HyperParameters.construct_test_params()
    openai.agents["verifier"] = PureTextAgentParameters(model_provider="OpenAI")
    job = plan_run(openai)[0].group("verifier").job
    assert job == job_request(FineTuneSpec(**{**spec.to_dict(), "base_model": job["model"]}))


def test_the_trainer_samples_and_tests_as_the_plan_says_and_saves_it(dataset, tmp_path):
    trainer = PureTextEiTrainer(params(dataset), settings(tmp_path / "run"))
    trainer.train()
    plan = trainer.plan
    for it in plan:
        sampled = [t.datapoint.id for t in trainer.run_dir.load_rollouts("train", it.iteration)]
        assert tuple(sampled) == it.item_ids
        assert trainer.run_dir.has_rollouts("test", it.iteration) == it.tests
    assert RunPlan.from_dict(trainer.run_dir.read_json("plan.json")) == plan


def test_the_dry_run_prices_the_plan_the_trainer_runs(dataset, tmp_path):
    hp = params(dataset)
    trainer = PureTextEiTrainer(hp, settings(tmp_path / "run"))
    assert estimate_cost(hp).plan == trainer.plan


def test_resuming_with_a_changed_plan_is_refused_with_a_diff_unless_accepted(dataset, tmp_path):
    run = tmp_path / "run"
    PureTextEiTrainer(params(dataset), settings(run)).train(max_stages=1)
    saved = json.loads((run / "hyper_params.json").read_text())
    saved["text_rl"]["test_scheme"] = "all"
    (run / "hyper_params.json").write_text(json.dumps(saved))
    with pytest.raises(PlanChangedError, match=r"iterations\[1\]\.tests: False -> True"):
        PureTextEiTrainer.resume(run, settings(run))
    trainer = PureTextEiTrainer.resume(run, settings(run), accept_plan_change=True)
    assert trainer.plan[1].tests
    assert PureTextEiTrainer.resume(run, settings(run)).plan == trainer.plan  # saved now


def test_a_run_started_before_run_plans_is_not_resumed_on_shuffled_items_unless_accepted(
    dataset, tmp_path
):
    """A run without plan.json drew its items in the file's order: resuming it with the
    shuffled walk would change its data without a word."""
    run = tmp_path / "run"
    PureTextEiTrainer(params(dataset), settings(run)).train(max_stages=1)
    (run / "plan.json").unlink()  # as an older nip left it
    with pytest.raises(PlanChangedError, match="without run plans"):
        PureTextEiTrainer.resume(run, settings(run))
    PureTextEiTrainer.resume(run, settings(run), accept_plan_change=True)
    assert (run / "plan.json").exists()
    PureTextEiTrainer.resume(run, settings(run))  # the plan is saved now


def test_an_unchanged_run_resumes_without_a_word_about_its_plan(dataset, tmp_path):
    run = tmp_path / "run"
    PureTextEiTrainer(params(dataset), settings(run)).train(max_stages=2)
    assert PureTextEiTrainer.resume(run, settings(run)).train().stage == "done"


@pytest.mark.parametrize("preset", [p.name for p in list_presets()])
def test_nip_plan_prints_the_plan_of_every_preset(preset, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["plan", preset]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Run plan:") and "iteration" in out


def test_nip_resume_takes_accept_plan_change():
    from nip.cli import build_parser

    args = build_parser().parse_args(["resume", "runs/x", "--accept-plan-change"])
    assert args.accept_plan_change


def test_the_dashboard_snapshot_shows_what_the_plan_has_this_iteration_do(dataset, tmp_path):
    from nip.widgets import RunSnapshot

    run = tmp_path / "run"
    trainer = PureTextEiTrainer(params(dataset), settings(run))
    trainer.train(max_stages=1)
    snapshot = RunSnapshot.read(run)
    assert snapshot.plan == trainer.plan
    assert (
        snapshot.planned
        == "1 x 4 test · fine-tuning: prover: supervised on it 0; verifier: supervised on it 0"
    )


# ---------------------------------------------------------------------- the plan runs
def test_the_trainer_samples_and_tests_exactly_the_plans_items_and_draws_none_itself(
    dataset, tmp_path
):
    """Sampling and testing read the plan's ids: a plan naming other items (here: the same
    items in reverse) is what runs; a trainer drawing its items again would not see it."""
    trainer = PureTextEiTrainer(params(dataset), settings(tmp_path / "run"))
    first = trainer.plan[0]
    reversed_step = replace(
        first, item_ids=first.item_ids[::-1], test_item_ids=first.test_item_ids[::-1]
    )
    trainer.context.plan = replace(trainer.plan, iterations=(reversed_step, *trainer.plan[1:]))
    trainer.train(max_stages=3)  # sample, log, test
    load = trainer.run_dir.load_rollouts
    assert tuple(t.datapoint.id for t in load("train", 0)) == reversed_step.item_ids
    assert tuple(t.datapoint.id for t in load("test", 0)) == reversed_step.test_item_ids


def test_each_iteration_runs_the_stages_its_plan_lists_and_the_last_ends_after_its_test():
    plan = make_run_plan(HyperParameters.construct_test_params())
    assert plan[0].stages == (
        "sample_rollouts",
        "log_stats",
        "test",
        "create_fine_tune_jobs",
        "await_fine_tune_jobs",
        "switch_models",
    )
    assert plan[-1].stages == ("sample_rollouts", "log_stats", "test")
    assert plan.after(0, "switch_models") == (1, "sample_rollouts")
    assert plan.after(len(plan) - 1, "test") == (len(plan) - 1, "done")
    assert plan.total_stages == 6 * (len(plan) - 1) + 3


def test_an_accepted_plan_change_keeps_the_executed_stages_as_they_ran(dataset, tmp_path):
    run = tmp_path / "run"
    PureTextEiTrainer(params(dataset), settings(run)).train(max_stages=2)  # sampled, logged
    ran = RunPlan.from_dict(json.loads((run / "plan.json").read_text()))
    change_saved_parameters(run, {"rl.rollouts_per_iteration": 6}, accept=True)
    trainer = PureTextEiTrainer.resume(run, settings(run), accept_plan_change=True)
    saved = RunPlan.from_dict(json.loads((run / "plan.json").read_text()))
    assert saved == trainer.plan
    assert saved[0].item_ids == ran[0].item_ids and saved[0].items == 4  # as sampled
    assert saved[1].items == len(saved[1].item_ids) == 6  # not yet run: the new plan's
    trainer.train()
    sampled = trainer.run_dir.load_rollouts("train", 0)
    assert tuple(t.datapoint.id for t in sampled) == ran[0].item_ids


def test_a_groups_job_continues_from_the_model_its_plan_step_says(dataset, tmp_path):
    submitted: list[FineTuneSpec] = []

    class Recording(DummyFineTuneBackend):
        async def create_job(self, spec):
            submitted.append(spec)
            return await super().create_job(spec)

    verifier = PureTextAgentParameters(use_dummy_api=True, fine_tune_from_scratch=False)
    hp = params(dataset, agents={"prover": verifier, "verifier": verifier})
    trainer = build_trainer(
        hp, settings(tmp_path / "run"), fine_tune_backends={"prover": Recording()}
    )
    assert [it.group("prover").continues for it in trainer.plan[:2]] == [True, True]
    trainer.train()
    first, second = submitted
    assert first.base_model == hp.agents["prover"].model_name
    assert second.base_model == f"{first.base_model}:ft-prover-it0"  # the first job's model


def test_the_job_monitors_epoch_count_is_the_plans(monkeypatch):
    """A job OpenAI is sent ``n_epochs`` for trains that many epochs: the notebook's job
    monitor counts them as the plan does (it counted ``rl.num_epochs``)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # a client is made, nothing is sent
    from nip.session import Session
    from nip.training.groups import PureTextSharedModelGroup

    hp = HyperParameters.construct_test_params()
    hp.agents["verifier"] = PureTextAgentParameters(openai_n_epochs=3)
    session = Session(hp, ExperimentSettings(show_progress=False))
    group = PureTextSharedModelGroup(
        hp, None, session.handler, {"verifier": session.agents["verifier"]}, "verifier"
    )
    assert group.num_epochs == 3 == plan_run(hp)[0].group("verifier").epochs


def test_extending_a_run_shows_the_plans_schedule_by_group_and_update_schedule(dataset, tmp_path):
    from nip.experiments.extend import extension_schedule
    from nip.parameters.update_schedule import AlternatingPeriodicUpdateSchedule

    shared = PureTextAgentParameters(use_dummy_api=True, shared_model_group="everyone")
    odd = AlternatingPeriodicUpdateSchedule(period=1, first_on=False)  # odd iterations
    hp = params(
        dataset,
        agents={"prover": shared.model_copy(update={"update_schedule": odd}), "verifier": shared},
        rl=RlParameters(num_iterations=1, rollouts_per_iteration=4),
    )
    hp.agents["verifier"].update_schedule = odd
    run = tmp_path / "run"
    PureTextEiTrainer(hp, settings(run)).train()
    text = extension_schedule(run, 2)
    assert "iteration 0: fine-tune nothing" in text  # its update schedule skips iteration 0
    assert "iteration 1: sample 4 dialogues, fine-tune everyone" in text
