"""Notebook widgets: forms from the parameter classes, the prompt inspector, the step-through
controller and the fine-tuning launcher, driven as a user would (set values, click)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import ipywidgets
import pytest

from nip.backends import DummyBackend
from nip.errors import BackendUnavailableError, FineTuneError, InvalidParameterError, NipError
from nip.jobs import FineTuneEvent, FineTuneJob
from nip.parameters import (
    ContiguousPeriodicUpdateSchedule,
    HyperParameters,
    PureTextAgentParameters,
)
from nip.rollouts import Datapoint
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.training.algorithms.malt import DpoExample
from nip.training.groups import PureTextSharedModelGroup
from nip.widgets import (
    DialogueController,
    FineTuneLauncher,
    OptionalControl,
    ParametersForm,
    PromptInspector,
    job_loss,
    job_progress,
)

ITEMS = [
    Datapoint(
        id=f"p{i}",
        question="Return a + b.",
        solution=f"def f(a, b):\n    return a + b + {i % 2}\n",
        y=1 - i % 2,
        stance=i % 2,
    )
    for i in range(12)
]


def dummy_params() -> HyperParameters:
    params = HyperParameters.construct_test_params()
    params.nip_protocol.min_message_rounds = 3  # the verifier asks before it may decide
    return params


def first(widget: ipywidgets.Widget, kind: type) -> ipywidgets.Widget | None:
    """The first widget of ``kind`` in ``widget``'s tree, depth first."""
    if isinstance(widget, kind):
        return widget
    for child in getattr(widget, "children", ()):
        found = first(child, kind)
        if found is not None:
            return found
    return None


def make_session(params: HyperParameters | None = None) -> Session:
    return Session(params or dummy_params(), ExperimentSettings(show_progress=False))


def verifier_group(session: Session, backend=None) -> PureTextSharedModelGroup:
    return PureTextSharedModelGroup(
        session.hyper_params,
        session.settings,
        session.handler,
        {"verifier": session.agents["verifier"]},
        "verifier",
        fine_tune_backend=backend,
    )


class ScriptedJobs:
    """A fine-tuning backend whose job goes through the scripted states, one per poll.

    Each state is (status, event data); the last state repeats.
    """

    name = "scripted"

    def __init__(self, *states: tuple[str, dict]):
        self.states = states
        self.polls = 0
        self.cancelled = False

    async def create_job(self, spec) -> str:
        return "job-1"

    async def get_job(self, job_id: str) -> FineTuneJob:
        status, _ = self.states[min(self.polls, len(self.states) - 1)]
        self.polls += 1
        if self.cancelled:
            status = "cancelled"
        return FineTuneJob(
            id=job_id,
            status=status,
            fine_tuned_model="tuned-model" if status == "succeeded" else None,
            error="out of memory" if status == "failed" else None,
        )

    async def list_events(self, job_id: str) -> list[FineTuneEvent]:
        seen = self.states[: self.polls]
        return [
            FineTuneEvent(float(i), "info", f"poll {i}", data) for i, (_, data) in enumerate(seen)
        ]

    async def cancel_job(self, job_id: str) -> None:
        self.cancelled = True


# =========================================================================== forms
def test_the_removed_params_widget_method_names_the_form_to_use_instead():
    with pytest.raises(NipError, match=r"ParametersForm\(params"):
        dummy_params().widget()


def test_a_parameters_form_edits_the_live_object():
    params = dummy_params()
    form = ParametersForm(params)
    form.controls["rl.num_iterations"].value = 5
    form.controls["agents.verifier.model_name"].value = "gpt-4o"
    assert params.rl.num_iterations == 5
    assert params.agents["verifier"].model_name == "gpt-4o"


def test_each_field_gets_a_control_for_its_type():
    controls = ParametersForm(dummy_params()).controls
    assert isinstance(controls["trainer"], ipywidgets.Dropdown)  # Literal
    assert [value for _label, value in controls["trainer"].options] == [
        "pure_text_ei",
        "pure_text_malt",
    ]
    assert isinstance(controls["text_rl.save_transcripts"], ipywidgets.Checkbox)  # bool
    assert isinstance(controls["agents.verifier.lora_dropout"], ipywidgets.FloatSlider)  # [0, 1)
    assert isinstance(controls["agents.verifier.vllm_server_port"], ipywidgets.BoundedIntText)
    assert isinstance(controls["seed"], ipywidgets.IntText)  # unbounded int
    assert isinstance(controls["rl.lr"], ipywidgets.FloatText)  # bounded on one side
    assert isinstance(controls["dataset"], ipywidgets.Text)  # str
    assert isinstance(controls["agents.verifier.temperature"], OptionalControl)  # float | None
    assert isinstance(controls["protocol_common.force_guess"], OptionalControl)  # Literal | None


def test_nested_groups_are_accordion_pages_and_agents_are_tabs():
    form = ParametersForm(dummy_params())
    accordion = first(form, ipywidgets.Accordion)
    assert accordion.titles[:3] == ("agents", "rl", "text_rl")
    assert first(accordion, ipywidgets.Tab).titles == ("prover", "verifier")


def test_an_invalid_value_is_shown_beside_its_control_and_changes_nothing():
    params = dummy_params()
    form = ParametersForm(params)
    form.controls["nip_protocol.min_message_rounds"].value = 20  # more than max_message_rounds
    assert params.nip_protocol.min_message_rounds == 3
    assert "min_message_rounds=20 is not allowed" in form.error("nip_protocol.min_message_rounds")
    assert "color:#c5221f" in form.notes["nip_protocol.min_message_rounds"].value
    assert form.rejected == {"nip_protocol.min_message_rounds": 20}


def test_a_valid_value_clears_the_error():
    params = dummy_params()
    form = ParametersForm(params)
    form.controls["nip_protocol.min_message_rounds"].value = 20
    form.controls["nip_protocol.min_message_rounds"].value = 4
    assert params.nip_protocol.min_message_rounds == 4
    assert form.error("nip_protocol.min_message_rounds") == ""
    assert "color:#c5221f" not in form.notes["nip_protocol.min_message_rounds"].value


def test_a_rejected_value_is_applied_once_a_related_change_makes_it_valid():
    params = dummy_params()
    verifier = params.agents["verifier"]
    verifier.model_provider = "TogetherAI"  # a provider the LoRA settings act on
    form = ParametersForm(params)
    form.controls["agents.verifier.lora_alpha"].value = 16  # lora_alpha_scale is still set
    assert verifier.lora_alpha is None and form.error("agents.verifier.lora_alpha")
    form.controls["agents.verifier.lora_alpha_scale"].value = None
    assert (verifier.lora_alpha, verifier.lora_alpha_scale) == (16, None)
    assert form.rejected == {}


def test_an_optional_field_is_set_by_ticking_its_box_and_unset_by_unticking_it():
    params = dummy_params()
    control = ParametersForm(params).controls["agents.verifier.temperature"]
    control.is_set.value = True
    assert params.agents["verifier"].temperature == 1.0  # a neutral start within [0, 2]
    control.inner.value = 0.5
    assert params.agents["verifier"].temperature == 0.5
    control.is_set.value = False
    assert params.agents["verifier"].temperature is None and control.inner.disabled


def test_changing_the_protocol_gives_its_agents_and_rebuilds_their_tabs():
    params = dummy_params()
    form = ParametersForm(params)
    form.controls["interaction_protocol"].value = "debate"
    assert params.interaction_protocol == "debate"
    assert list(params.agents) == ["prover0", "prover1", "verifier"]
    assert params.agents["prover0"].use_dummy_api  # new provers copy the old prover
    form.controls["agents.prover1.model_name"].value = "other"
    assert params.agents["prover1"].model_name == "other"
    assert "agents.prover.model_name" not in form.controls


def test_agents_of_one_shared_model_group_must_stay_in_agreement():
    params = dummy_params()
    form = ParametersForm(params)
    form.controls["agents.prover.shared_model_group"].value = "shared"
    form.controls["agents.verifier.shared_model_group"].value = "shared"
    form.controls["agents.verifier.model_name"].value = "gpt-4o"
    assert params.agents["verifier"].model_name != "gpt-4o"
    assert "differ in model_name" in form.error("agents.verifier.model_name")


def test_the_kind_of_update_schedule_can_be_chosen():
    params = dummy_params()
    form = ParametersForm(params)
    form.controls["agents.verifier.update_schedule"].value = ContiguousPeriodicUpdateSchedule
    assert isinstance(params.agents["verifier"].update_schedule, ContiguousPeriodicUpdateSchedule)
    form.controls["agents.verifier.update_schedule.period"].value = 3
    assert params.agents["verifier"].update_schedule.period == 3


def test_the_yaml_preview_follows_the_object():
    params = dummy_params()
    form = ParametersForm(params)
    form.controls["seed"].value = 1234
    assert "seed: 1234" in form.yaml_preview.value


def test_saving_round_trips_through_yaml(tmp_path):
    params = dummy_params()
    form = ParametersForm(params, save_path=tmp_path / "experiment.yaml")
    form.controls["interaction_protocol"].value = "mnip"
    form.controls["agents.verifier.top_p"].value = 0.9
    form.save_button.click()
    assert "saved to" in form.save_status.value
    assert HyperParameters.load(tmp_path / "experiment.yaml") == params


def test_a_save_that_fails_says_why(tmp_path):
    form = ParametersForm(dummy_params(), save_path=tmp_path / "no-such-folder" / "p.yaml")
    assert form.save() is None
    assert "not saved" in form.save_status.value


def test_a_form_edits_any_parameters_class():
    agent = PureTextAgentParameters()
    form = ParametersForm(agent)
    form.controls["max_response_words"].value = 80
    assert agent.max_response_words == 80
    assert (
        repr(form)
        == f"ParametersForm(PureTextAgentParameters, fields={len(form.controls)}, rejected=0)"
    )


def test_update_assigns_fields_that_constrain_each_other_together():
    agent = PureTextAgentParameters(model_provider="TogetherAI")
    with pytest.raises(InvalidParameterError):
        agent.lora_alpha = 16
    agent.update(lora_alpha=16, lora_alpha_scale=None)
    assert (agent.lora_alpha, agent.lora_alpha_scale) == (16, None)
    with pytest.raises(InvalidParameterError):
        agent.update(lora_alpha=None)
    assert agent.lora_alpha == 16


def test_importing_nip_does_not_import_ipywidgets():
    code = "import sys, nip; nip.HyperParameters(); print('ipywidgets' in sys.modules)"
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert output == "False"


# ===================================================================== inspector
def test_the_inspector_shows_the_prompt_before_the_agent_generates():
    dialogue = make_session().dialogue(ITEMS[0])
    inspector = PromptInspector(dialogue)
    assert (inspector.agent, inspector.round_id) == ("verifier", 0)
    assert inspector.messages == dialogue.prompt_for("verifier", 0)
    assert inspector.messages[0]["role"] == "system"
    assert "not generated yet" in inspector.completion_view.value


def test_the_inspector_shows_a_played_round_with_its_completion():
    dialogue = make_session().dialogue(ITEMS[0])
    dialogue.step(overrides={"verifier": "Question: what if a is negative?"})
    inspector = PromptInspector(dialogue, agent="verifier")
    inspector.round_picker.value = 0
    assert "Question: what if a is negative?" in inspector.completion_view.value
    assert "written by hand" in inspector.completion_view.value


def test_the_inspector_offers_the_rounds_the_agent_speaks_in():
    dialogue = make_session().dialogue(ITEMS[0])
    dialogue.step()
    dialogue.step()
    inspector = PromptInspector(dialogue, agent="verifier")
    assert inspector.rounds() == [0, 2]
    assert inspector.round_picker.options == (("0", 0), ("2 (next)", 2))
    inspector.agent_picker.value = "prover"
    assert inspector.rounds() == [1]


def test_the_inspector_messages_can_be_copied_as_json():
    inspector = PromptInspector(make_session().dialogue(ITEMS[0]))
    assert json.loads(inspector.json_box.value) == inspector.messages
    assert json.loads(inspector.to_json()) == inspector.messages


def test_the_inspector_has_a_stable_plain_text_repr():
    inspector = PromptInspector(make_session().dialogue(ITEMS[0]))
    expected = "PromptInspector(dialogue='it0-00000', agent='verifier', round=0, messages=1)"
    assert inspector._repr_mimebundle_()["text/plain"] == expected


# ==================================================================== controller
def test_next_round_plays_one_round_and_updates_the_views():
    controller = DialogueController(make_session().dialogue(ITEMS[0]))
    controller.next_button.click()
    assert controller.dialogue.round_id == 1
    assert "next: round 1, prover" in controller.status.value
    assert "Question:" in controller.transcript_view.value
    assert controller.inspector.rounds() == [0]  # the verifier's played round


def test_regenerate_is_disabled_until_a_round_has_been_played():
    controller = DialogueController(make_session().dialogue(ITEMS[0]))
    assert controller.regenerate_button.disabled
    controller.next_button.click()
    assert not controller.regenerate_button.disabled


def test_regenerate_replays_the_last_round_with_a_new_sample():
    controller = DialogueController(make_session().dialogue(ITEMS[0]))
    controller.next_button.click()
    controller.regenerate_button.click()
    (turn,) = controller.dialogue.transcript.turns
    assert controller.dialogue.round_id == 1 and turn.sample_index == 1


def test_branch_adds_a_controller_for_an_independent_copy():
    controller = DialogueController(make_session().dialogue(ITEMS[0]))
    controller.next_button.click()
    controller.branch_button.click()
    (branch,) = controller.branches
    assert branch.title == "branch 1 (from round 1)"
    branch.next_button.click()
    assert (branch.dialogue.round_id, controller.dialogue.round_id) == (2, 1)


def test_run_to_end_plays_until_the_dialogue_is_over_and_disables_playing():
    controller = DialogueController(make_session().dialogue(ITEMS[0]))
    controller.run_button.click()
    assert controller.dialogue.done and "over after" in controller.status.value
    assert controller.next_button.disabled and controller.run_button.disabled
    assert not controller.branch_button.disabled


def test_an_error_is_shown_in_the_controller_and_it_stays_usable():
    class Unreachable:
        name = "unreachable"

        async def generate(self, request):
            raise BackendUnavailableError("connection refused", attempts=3)

    session = make_session()
    controller = DialogueController(session.dialogue(ITEMS[0]))
    working, session.agents["verifier"].backend = session.agents["verifier"].backend, Unreachable()
    controller.next_button.click()
    assert "BackendUnavailableError: connection refused" in controller.error_text
    session.agents["verifier"].backend = working
    controller.next_button.click()
    assert controller.error_text == "" and controller.dialogue.round_id == 1


async def test_in_jupyter_a_click_runs_on_the_event_loop_without_blocking_it():
    session = make_session()
    session.agents["verifier"].backend = DummyBackend(latency_s=0.05)
    controller = DialogueController(session.dialogue(ITEMS[0]))
    controller.next_button.click()
    assert controller.task is not None and not controller.task.done()
    assert controller.next_button.disabled and controller.dialogue.round_id == 0
    await controller.task
    assert controller.dialogue.round_id == 1 and not controller.next_button.disabled


async def test_the_controller_actions_can_be_awaited():
    controller = DialogueController(make_session().dialogue(ITEMS[0]))
    turns = await controller.next_round()
    transcript = await controller.run_to_end()
    assert turns[0].agent == "verifier" and transcript.done


def test_the_controller_has_a_stable_plain_text_repr():
    controller = DialogueController(make_session().dialogue(ITEMS[0]))
    expected = "DialogueController(dialogue='it0-00000', rounds=0, next round 0, branches=0)"
    assert controller._repr_mimebundle_()["text/plain"] == expected


# ====================================================================== launcher
def test_the_launcher_previews_the_groups_sft_examples():
    session = make_session()
    batch = session.rollouts(ITEMS)
    launcher = FineTuneLauncher(verifier_group(session), batch, preview_count=2)
    assert len(launcher.examples) == len(ITEMS)  # the verifier spoke in every dialogue
    assert launcher.preview.value.count("<hr>") == 1  # two examples shown
    assert "12 supervised examples for verifier" in launcher.summary.value


def test_expert_iteration_selection_keeps_the_dialogues_the_agent_won():
    session = make_session()
    batch = session.rollouts(ITEMS)
    launcher = FineTuneLauncher(verifier_group(session), batch)
    launcher.select_box.value = True
    won = sum(t.episode_reward("verifier") >= 0.9 for t in batch)
    assert len(launcher.examples) == won < len(ITEMS)


def test_the_launcher_selects_and_builds_the_dataset_as_the_trainer_does():
    from nip.training.algorithms.expert_iteration import select_group_rollouts, sft_dataset

    session = make_session()
    batch = session.rollouts(ITEMS)
    group = verifier_group(session)
    launcher = FineTuneLauncher(group, batch)
    launcher.select_box.value = True
    selected, replaced = select_group_rollouts(
        batch.transcripts, group.agent_wholes, group.hyper_params, launcher.iteration
    )
    assert launcher.examples == sft_dataset(group.agent_wholes, selected, replaced)


def test_launch_is_disabled_with_too_few_examples():
    session = make_session()
    launcher = FineTuneLauncher(verifier_group(session), session.rollouts(ITEMS[:3]))
    assert launcher.launch_button.disabled
    assert "too few examples" in launcher.summary.value


def test_a_dummy_job_goes_from_launch_to_the_new_model():
    session = make_session()
    group = verifier_group(session)
    launcher = FineTuneLauncher(group, session.rollouts(ITEMS), job_name="notebook")
    assert launcher.switch_button.disabled
    launcher.launch_button.click()
    assert launcher.job.status == "succeeded" and launcher.progress.value == 1.0
    assert not launcher.switch_button.disabled
    launcher.switch_button.click()
    assert session.agents["verifier"].model_name == "gpt-4o-mini-2024-07-18:ft-notebook"
    assert "verifier now generates with gpt-4o-mini-2024-07-18:ft-notebook" in launcher.status.value
    assert launcher.switch_button.disabled and launcher.error_text == ""


async def test_watching_a_job_shows_its_progress_and_loss():
    session = make_session()
    jobs = ScriptedJobs(
        ("pending", {}),
        ("running", {"step": 5, "total_steps": 10, "train_loss": 0.75}),
        ("succeeded", {}),
    )
    launcher = FineTuneLauncher(verifier_group(session, jobs), session.rollouts(ITEMS))
    await launcher.launch()
    await launcher.poll()
    await launcher.poll()
    assert launcher.progress.value == 0.5 and "loss 0.75" in launcher.status.value
    assert "poll 1" in launcher.events_view.value
    job = await launcher.watch()
    assert job.status == "succeeded" and not launcher.switch_button.disabled


async def test_the_launcher_can_follow_a_job_it_did_not_launch():
    """E.g. the job a trainer submitted in its create_fine_tune_jobs stage."""
    session = make_session()
    jobs = ScriptedJobs(("running", {"step": 1, "total_steps": 4}), ("succeeded", {}))
    launcher = FineTuneLauncher(verifier_group(session, jobs), session.rollouts(ITEMS))
    job = await launcher.watch("trainer-job-7")
    assert job.id == launcher.job_id == "trainer-job-7" and job.status == "succeeded"
    assert launcher.progress.value == 1.0 and "new model tuned-model" in launcher.status.value


def test_a_failed_job_shows_its_error_and_offers_no_switch():
    session = make_session()
    jobs = ScriptedJobs(("failed", {}))
    launcher = FineTuneLauncher(verifier_group(session, jobs), session.rollouts(ITEMS))
    launcher.launch_button.click()
    assert "out of memory" in launcher.status.value
    assert launcher.progress.bar_style == "danger" and launcher.switch_button.disabled


async def test_a_job_can_be_cancelled_while_it_is_watched():
    session = make_session()
    jobs = ScriptedJobs(("running", {}))
    launcher = FineTuneLauncher(
        verifier_group(session, jobs), session.rollouts(ITEMS), poll_interval_s=0.01
    )
    launcher.launch_button.click()
    await asyncio.sleep(0.05)  # a few polls of the running job
    assert not launcher.cancel_button.disabled
    launcher.cancel_button.click()
    job = await launcher.task
    assert jobs.cancelled and job.status == "cancelled" and launcher.switch_button.disabled


def test_the_launcher_builds_dpo_lines_from_preference_pairs():
    session = make_session()
    prompt = ({"role": "system", "content": "Decide."}, {"role": "user", "content": "Go."})
    pairs = [DpoExample(prompt, chosen="Decision: accept", rejected="Decision: reject")] * 10
    launcher = FineTuneLauncher(verifier_group(session), pairs, method="dpo")
    assert launcher.examples[0]["preferred_output"][0]["content"] == "Decision: accept"
    assert "not preferred" in launcher.preview.value and launcher.select_box.disabled
    launcher.launch_button.click()
    assert launcher.job.status == "succeeded"


async def test_a_dpo_launcher_without_pairs_says_no_job_was_launched_and_why():
    """MALT trees whose siblings all ended alike give no preference pair: nothing to train."""
    session = make_session()
    launcher = FineTuneLauncher(verifier_group(session), [], method="dpo")
    assert launcher.launch_button.disabled and "too few examples" in launcher.summary.value

    assert await launcher.launch() is None
    why = "no job was launched: group 'verifier': too few examples to fine-tune (0 dpo examples"
    assert launcher.no_job_reason.startswith(why)
    assert "no job was launched: group &#x27;verifier&#x27;: too few" in launcher.status.value
    with pytest.raises(FineTuneError, match=r"^verifier: cannot switch to a new model: no job"):
        await launcher.switch()
    with pytest.raises(FineTuneError, match="cannot poll a job: no job was launched: group"):
        await launcher.watch()
    assert "status='no job'" in repr(launcher)


async def test_before_its_launch_a_launcher_says_it_has_no_job_yet():
    session = make_session()
    launcher = FineTuneLauncher(verifier_group(session), session.rollouts(ITEMS))

    assert launcher.no_job_reason == (
        "no job was launched: Launch has not been clicked (or launch() awaited)"
    )
    with pytest.raises(FineTuneError, match="Launch has not been clicked"):
        await launcher.switch()
    await launcher.launch()
    assert launcher.no_job_reason is None


def test_progress_comes_from_steps_or_epochs_and_loss_from_the_job_or_its_events():
    running = FineTuneJob("j", "running")
    epoch_event = FineTuneEvent(0.0, "info", "step 3", {"epoch": 0.5, "loss": 1.25})
    assert job_progress(running, [epoch_event], num_epochs=2) == 0.25
    assert job_loss(running, [epoch_event]) == 1.25
    finished = FineTuneJob("j", "succeeded", training_loss=0.5)
    assert job_progress(finished, [], num_epochs=1) == 1.0 and job_loss(finished, []) == 0.5
