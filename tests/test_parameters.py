"""Configuration: typed dataclasses that validate, round-trip and look up by address."""

from __future__ import annotations

import copy
import json
import pickle
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nip.errors import (
    IncompatibleParametersError,
    InvalidParameterError,
    SharedModelGroupError,
    UnknownKeyError,
)
from nip.parameters import (
    AlternatingPeriodicUpdateSchedule,
    BaseParameters,
    CodeValidationParameters,
    CommonProtocolParameters,
    ConstantUpdateSchedule,
    ContiguousPeriodicUpdateSchedule,
    DebateProtocolParameters,
    HyperParameters,
    MnipProtocolParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    PureTextEiParameters,
    PureTextMaltParameters,
    RlParameters,
    TextRlParameters,
    check_compatibility,
)

ALL_CLASSES = [
    HyperParameters,
    PureTextAgentParameters,
    PureTextMaltParameters,
    PureTextEiParameters,
    TextRlParameters,
    RlParameters,
    CommonProtocolParameters,
    NipProtocolParameters,
    DebateProtocolParameters,
    MnipProtocolParameters,
    CodeValidationParameters,
    ConstantUpdateSchedule,
    ContiguousPeriodicUpdateSchedule,
    AlternatingPeriodicUpdateSchedule,
]


# ----------------------------------------------------------------------- seed defaults
def test_agent_parameters_keep_the_seed_names_and_defaults():
    params = PureTextAgentParameters()
    seed_defaults = {
        "model_provider": "OpenAI",
        "model_name": "gpt-4o-mini-2024-07-18",
        "language_model_server_scheme_host": "http://localhost",
        "language_model_server_port": 5000,
        "vllm_server_port": 8000,
        "use_dummy_api": False,
        "shared_model_group": None,
        "temperature": None,
        "top_p": None,
        "repetition_penalty": None,
        "fine_tune_from_scratch": True,
        "freeze_agent": False,
        "quantization": "none",
        "num_epochs": None,
        "dpo_beta": None,
        "use_lora": True,
        "lora_rank": 64,
        "lora_alpha": None,
        "lora_alpha_scale": 1.0,
        "lora_dropout": 0.05,
        "stack_lora_adapters": False,
        "per_device_train_batch_size": 2,
        "system_prompt_template_path": None,
        "use_supervisor_message": "none",
        "supervisor_name": "Supervisor",
        "max_response_words": 150,
        "max_tokens_per_message": None,
        "num_invalid_generation_retries": 20,
        "load_checkpoint_and_parameters": False,
        "checkpoint_run_id": None,
        "checkpoint_version": "latest",
        "update_schedule": ConstantUpdateSchedule(),
    }
    assert {name: getattr(params, name) for name in seed_defaults} == seed_defaults


def test_malt_parameters_are_the_seed_plus_the_expected_reward_estimator():
    """The estimator is nip's: ``leaf_mean`` reproduces the original exactly."""
    assert PureTextMaltParameters().to_dict() == {
        "_type": "PureTextMaltParameters",
        "num_responses_per_timestep": 2,
        "frozen_agents_generate_one_response": True,
        "pair_selection_method": "positive_negative",
        "interval_threshold_proportion": 0.1,
        "num_initial_ei_iterations": 0,
        "expected_reward_estimator": "recursive_mean",
    }


def test_run_length_defaults_are_small_and_safe():
    rl = HyperParameters().rl
    assert rl.num_iterations <= 5
    assert rl.rollouts_per_iteration <= 32
    assert rl.num_test_iterations == 1


def test_max_tokens_per_message_is_derived_from_the_word_limit_when_unset():
    assert PureTextAgentParameters().effective_max_tokens_per_message == 225
    assert PureTextAgentParameters(max_tokens_per_message=40).effective_max_tokens_per_message == 40


def test_lora_alpha_is_computed_from_the_scale_when_not_given():
    lora = PureTextAgentParameters.local_default
    assert lora(lora_rank=16, lora_alpha_scale=2.0).computed_lora_alpha == 32
    params = lora(lora_rank=16, lora_alpha=8, lora_alpha_scale=None)
    assert params.computed_lora_alpha == 8


def test_missing_agents_get_default_parameters_for_the_protocol():
    params = HyperParameters(interaction_protocol="debate")
    assert set(params.agents) == {"prover0", "prover1", "verifier"}
    assert params.agent_names == ("prover0", "prover1", "verifier")


# ------------------------------------------------------------------------ round trips
@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_every_class_round_trips_through_a_dict(cls: type[BaseParameters]):
    for params in (cls(), cls.construct_test_params()):
        assert cls.from_dict(params.to_dict()) == params


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_every_class_round_trips_through_yaml_and_json(cls: type[BaseParameters]):
    params = cls.construct_test_params()
    assert cls.from_yaml(params.to_yaml()) == params
    assert cls.from_json(params.to_json()) == params


def test_a_saved_file_loads_back_equal(tmp_path):
    params = HyperParameters(
        interaction_protocol="mnip",
        seed=7,
        agents={"verifier": PureTextAgentParameters(temperature=0.3)},
    )
    for name in ("run.yaml", "run.json"):
        path = params.save(tmp_path / name)
        assert HyperParameters.load(path) == params


def test_from_dict_does_not_modify_its_input():
    data = HyperParameters().to_dict()
    snapshot = json.loads(json.dumps(data))
    HyperParameters.from_dict(data)
    assert data == snapshot


def test_the_type_tag_rebuilds_the_right_update_schedule():
    params = PureTextAgentParameters(
        update_schedule=AlternatingPeriodicUpdateSchedule(period=3, first_on=False)
    )
    rebuilt = PureTextAgentParameters.from_dict(params.to_dict())
    assert isinstance(rebuilt.update_schedule, AlternatingPeriodicUpdateSchedule)
    assert rebuilt == params


@settings(max_examples=60, deadline=None)
@given(
    temperature=st.one_of(st.none(), st.floats(0.0, 2.0)),
    lora_rank=st.integers(1, 256),
    lora_dropout=st.floats(0.0, 0.99),
    dpo_beta=st.one_of(st.none(), st.floats(0.01, 2.0)),
    provider=st.sampled_from(["SelfHosted", "Local", "TogetherAI"]),  # where LoRA acts
    supervisor=st.sampled_from(["none", "all", "first", "all_but_first"]),
    group=st.one_of(st.none(), st.text(min_size=1, max_size=12)),
)
def test_any_valid_agent_parameters_round_trip(
    temperature, lora_rank, lora_dropout, dpo_beta, provider, supervisor, group
):
    params = PureTextAgentParameters(
        temperature=temperature,
        lora_rank=lora_rank,
        lora_dropout=lora_dropout,
        dpo_beta=dpo_beta,
        model_provider=provider,
        use_supervisor_message=supervisor,
        shared_model_group=group,
    )
    assert PureTextAgentParameters.from_dict(params.to_dict()) == params
    assert PureTextAgentParameters.from_yaml(params.to_yaml()) == params


def test_saved_hyper_parameters_carry_a_version_stamp():
    data = HyperParameters().to_dict()
    assert data["_schema_version"] == "1.1"
    assert "_nip_version" in data


def test_a_malt_run_saved_with_schema_1_0_keeps_the_leaf_mean_it_was_trained_with():
    data = HyperParameters(trainer="pure_text_malt").to_dict()
    data["_schema_version"] = "1.0"
    del data["pure_text_malt"]["expected_reward_estimator"]
    with pytest.warns(UserWarning, match="1.0"):
        loaded = HyperParameters.from_dict(data)
    assert loaded.pure_text_malt.expected_reward_estimator == "leaf_mean"
    assert HyperParameters().pure_text_malt.expected_reward_estimator == "recursive_mean"


def test_a_different_major_schema_version_is_incompatible():
    data = HyperParameters().to_dict()
    data["_schema_version"] = "2.0"
    with pytest.raises(IncompatibleParametersError, match=r"schema 2\.0"):
        check_compatibility(data)


def test_a_different_minor_schema_version_loads_with_a_warning():
    data = HyperParameters().to_dict()
    data["_schema_version"] = "1.7"
    with pytest.warns(UserWarning, match="1.7"):
        check_compatibility(data)


def test_the_current_schema_version_is_compatible_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_compatibility(HyperParameters().to_dict())


def test_from_dict_refuses_a_different_major_schema_version():
    data = HyperParameters().to_dict()
    data["_schema_version"] = "2.0"
    with pytest.raises(IncompatibleParametersError, match=r"schema 2\.0"):
        HyperParameters.from_dict(data)


def test_force_loads_a_different_major_schema_version_anyway():
    data = HyperParameters(seed=3).to_dict()
    data["_schema_version"] = "2.0"
    assert HyperParameters.from_dict(data, force=True).seed == 3


def test_from_dict_warns_about_a_different_minor_schema_version():
    data = HyperParameters(seed=3).to_dict()
    data["_schema_version"] = "1.7"
    with pytest.warns(UserWarning, match="1.7"):
        assert HyperParameters.from_dict(data).seed == 3


def test_a_dict_without_a_version_stamp_loads_unchecked():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert HyperParameters.from_dict({"seed": 3}).seed == 3


def test_load_checks_the_schema_version_of_a_saved_file(tmp_path):
    data = HyperParameters().to_dict()
    data["_schema_version"] = "2.0"
    path = tmp_path / "params.json"
    path.write_text(json.dumps(data))
    with pytest.raises(IncompatibleParametersError, match=r"schema 2\.0"):
        HyperParameters.load(path)
    assert HyperParameters.load(path, force=True) == HyperParameters()


# ------------------------------------------------------------- dicts from the original nip
def test_the_originals_always_false_is_random_key_of_an_agent_is_dropped():
    data = HyperParameters().to_dict()
    data["agents"]["verifier"]["is_random"] = False
    assert HyperParameters.from_dict(data) == HyperParameters()


def test_a_random_agent_is_still_refused():
    """Text agents are never random; an ``is_random: true`` agent is not silently changed."""
    data = HyperParameters().to_dict()
    data["agents"]["verifier"]["is_random"] = True
    with pytest.raises(UnknownKeyError, match="is_random"):
        HyperParameters.from_dict(data)


def test_load_from_wandb_config_drops_keys_nip_has_no_field_for():
    """A W&B config logged by the original holds tensor-agent fields text agents lack."""
    config = {"temperature": 0.5, "agent_lr_factor": None, "is_random": False}
    agent = PureTextAgentParameters.load_from_wandb_config(config)
    assert agent == PureTextAgentParameters(temperature=0.5)
    hyper = HyperParameters.load_from_wandb_config({"seed": 3, "agents": {"verifier": config}})
    assert hyper.agents["verifier"].temperature == 0.5 and hyper.seed == 3


# ----------------------------------------------------------------------------- lookup
def test_get_follows_a_dotted_address():
    params = HyperParameters(agents={"verifier": PureTextAgentParameters(temperature=0.5)})
    assert params.get("agents.verifier.temperature") == 0.5
    assert params.get("pure_text_malt.num_responses_per_timestep") == 2
    assert params.get("rl") == params.rl


def test_get_raises_key_error_for_an_unknown_name():
    with pytest.raises(KeyError, match="no parameter 'tempreature'"):
        HyperParameters().get("agents.verifier.tempreature")


def test_get_raises_key_error_for_an_address_past_a_value():
    with pytest.raises(KeyError, match="is a value"):
        HyperParameters().get("seed.something")


# -------------------------------------------------------------------------- bad input
def test_a_wrong_literal_names_the_field_the_value_and_the_choices():
    with pytest.raises(InvalidParameterError) as info:
        PureTextAgentParameters(model_provider="Anthropic")
    error = info.value
    assert error.field == "model_provider"
    assert error.value == "Anthropic"
    assert "'OpenAI'" in str(error) and "'Local'" in str(error)


def test_an_unknown_protocol_is_rejected_with_the_choices():
    with pytest.raises(InvalidParameterError, match=r"interaction_protocol='socratic'.*'debate'"):
        HyperParameters(interaction_protocol="socratic")


def test_setting_both_temperature_and_top_p_is_an_error():
    with pytest.raises(InvalidParameterError, match="only one"):
        PureTextAgentParameters(temperature=0.7, top_p=0.9)


@pytest.mark.parametrize(
    ("lora_alpha", "lora_alpha_scale"), [(16, 1.0), (None, None)], ids=["both", "neither"]
)
def test_exactly_one_of_lora_alpha_and_its_scale_must_be_set(lora_alpha, lora_alpha_scale):
    with pytest.raises(InvalidParameterError, match="lora_alpha"):
        PureTextAgentParameters(lora_alpha=lora_alpha, lora_alpha_scale=lora_alpha_scale)


@pytest.mark.parametrize("beta", [0.0, -0.1, 2.5])
def test_dpo_beta_must_lie_in_zero_to_two(beta):
    with pytest.raises(InvalidParameterError, match="dpo_beta"):
        PureTextAgentParameters(dpo_beta=beta)


def test_a_negative_number_of_rounds_is_rejected_with_the_full_address():
    with pytest.raises(InvalidParameterError) as info:
        HyperParameters.from_dict({"nip_protocol": {"max_message_rounds": -3}})
    assert info.value.field == "nip_protocol.max_message_rounds"
    assert ">= 1" in str(info.value)


def test_a_bad_nested_agent_value_is_reported_with_its_address():
    with pytest.raises(InvalidParameterError) as info:
        HyperParameters.from_dict({"agents": {"verifier": {"top_p": 3.0}}})
    assert info.value.field == "agents.verifier.top_p"


def test_an_agent_the_protocol_does_not_have_is_an_error():
    with pytest.raises(InvalidParameterError, match="'nip' has no agent 'prover0'"):
        HyperParameters(agents={"prover0": PureTextAgentParameters()})


def test_a_wrong_type_is_an_error():
    with pytest.raises(InvalidParameterError, match="max_response_words='many'"):
        PureTextAgentParameters(max_response_words="many")
    with pytest.raises(InvalidParameterError, match="use_lora"):
        PureTextAgentParameters(use_lora="yes")


def test_unknown_keys_are_an_error_unless_ignored():
    data = {"temperature": 0.2, "temprature": 0.3}
    with pytest.raises(UnknownKeyError, match="temprature"):
        PureTextAgentParameters.from_dict(data)
    params = PureTextAgentParameters.from_dict(data, ignore_extra_keys=True)
    assert params.temperature == 0.2


def test_assigning_a_bad_value_raises_and_keeps_the_old_one():
    params = PureTextAgentParameters(temperature=0.5)
    with pytest.raises(InvalidParameterError):
        params.temperature = 7.0
    assert params.temperature == 0.5
    with pytest.raises(InvalidParameterError, match="only one"):
        params.top_p = 0.9
    assert params.top_p is None


def test_assigning_a_good_value_is_validated_and_converted():
    params = PureTextAgentParameters()
    params.temperature = 1
    assert params.temperature == 1.0 and isinstance(params.temperature, float)


def test_malt_initial_ei_iterations_cannot_exceed_the_run():
    with pytest.raises(InvalidParameterError, match="num_initial_ei_iterations"):
        HyperParameters(
            trainer="pure_text_malt",
            rl=RlParameters(num_iterations=2),
            pure_text_malt=PureTextMaltParameters(num_initial_ei_iterations=3),
        )


def test_malt_needs_at_least_two_responses_per_node():
    with pytest.raises(InvalidParameterError, match="num_responses_per_timestep"):
        PureTextMaltParameters(num_responses_per_timestep=1)


# ------------------------------------------------- configs that would otherwise fail late
def test_a_trainable_openrouter_agent_is_refused_before_any_sampling():
    """OpenRouter cannot fine-tune; the job would fail only after an iteration of paid
    sampling, so the configuration is refused, naming the agent's field and the fix."""
    with pytest.raises(InvalidParameterError, match="freeze_agent=True") as caught:
        HyperParameters(
            agents={"prover": PureTextAgentParameters(model_provider="OpenRouter")},
            rl=RlParameters(num_iterations=2),
        )
    assert caught.value.field == "agents.prover.freeze_agent"


def test_a_frozen_openrouter_agent_is_allowed():
    agent = PureTextAgentParameters(model_provider="OpenRouter", freeze_agent=True)
    HyperParameters(agents={"prover": agent}, rl=RlParameters(num_iterations=2))


def test_a_trainable_openrouter_agent_is_allowed_for_a_single_iteration():
    """The last iteration submits no fine-tuning job, so one iteration never fine-tunes."""
    agent = PureTextAgentParameters(model_provider="OpenRouter")
    HyperParameters(agents={"prover": agent}, rl=RlParameters(num_iterations=1))


def test_a_dataset_that_is_neither_shipped_nor_a_file_is_refused(tmp_path):
    with pytest.raises(
        InvalidParameterError, match="no such shipped dataset, file or folder"
    ) as caught:
        HyperParameters(dataset=str(tmp_path / "missing.jsonl"))
    assert caught.value.field == "dataset"


def test_a_dataset_may_be_a_shipped_name_or_an_existing_file(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text("")
    assert HyperParameters(dataset="humaneval_cv").dataset == "humaneval_cv"
    assert HyperParameters(dataset=str(path)).dataset == str(path)


def test_a_missing_system_prompt_template_is_refused(tmp_path):
    missing = str(tmp_path / "verifier.txt")
    with pytest.raises(InvalidParameterError, match="no such file") as caught:
        HyperParameters(
            agents={"verifier": PureTextAgentParameters(system_prompt_template_path=missing)}
        )
    assert caught.value.field == "agents.verifier.system_prompt_template_path"


def test_the_shipped_presets_pass_validation():
    from importlib import resources

    preset = resources.files("nip.configs") / "quickstart.yaml"
    HyperParameters.from_yaml(preset.read_text(encoding="utf-8"))
    HyperParameters.construct_test_params()


# ---------------------------------------------------------------------- update schedules
def test_update_schedules_say_which_iterations_train():
    assert all(ConstantUpdateSchedule().is_update_iteration(i) for i in range(5))
    contiguous = ContiguousPeriodicUpdateSchedule(period=3, update_iterations=2, start=1)
    assert [contiguous.is_update_iteration(i) for i in range(7)] == [
        False,
        True,
        True,
        False,
        True,
        True,
        False,
    ]
    alternating = AlternatingPeriodicUpdateSchedule(period=2, first_on=False)
    assert [alternating.is_update_iteration(i) for i in range(6)] == [
        False,
        False,
        True,
        True,
        False,
        False,
    ]


# ---------------------------------------------------------------------------- display
def test_parameters_render_as_an_html_table_with_docs():
    html = HyperParameters(seed=1)._repr_html_()
    assert "<table>" in html and "seed" in html
    assert "Seed of every random choice" in html


# ------------------------------------------------------------- more bad configurations
@pytest.mark.parametrize(
    ("cls", "key"),
    [
        (NipProtocolParameters, "nip_protocol"),
        (DebateProtocolParameters, "debate_protocol"),
        (MnipProtocolParameters, "mnip_protocol"),
    ],
)
def test_min_message_rounds_may_not_exceed_max_message_rounds(cls, key):
    with pytest.raises(InvalidParameterError) as info:
        cls(min_message_rounds=6, max_message_rounds=5)
    assert (info.value.field, info.value.value) == ("min_message_rounds", 6)
    assert "at most max_message_rounds=5" in str(info.value)
    with pytest.raises(InvalidParameterError, match=rf"{key}\.min_message_rounds=6"):
        HyperParameters.from_dict({key: {"min_message_rounds": 6, "max_message_rounds": 5}})


def test_min_message_rounds_equal_to_max_message_rounds_is_allowed():
    assert NipProtocolParameters(min_message_rounds=5, max_message_rounds=5).min_message_rounds == 5


def test_a_periodic_schedule_cannot_update_more_iterations_than_its_period():
    with pytest.raises(InvalidParameterError) as info:
        ContiguousPeriodicUpdateSchedule(period=2, update_iterations=3)
    assert (info.value.field, info.value.value) == ("update_iterations", 3)
    assert "at most period=2" in str(info.value)


def test_a_bad_update_schedule_in_an_agent_is_reported_with_its_address():
    schedule = {"_type": "ContiguousPeriodicUpdateSchedule", "period": 2, "update_iterations": 5}
    with pytest.raises(InvalidParameterError) as info:
        HyperParameters.from_dict({"agents": {"verifier": {"update_schedule": schedule}}})
    assert info.value.field == "agents.verifier.update_schedule.update_iterations"


@pytest.mark.parametrize(
    ("cls", "type_name"),
    [
        (ContiguousPeriodicUpdateSchedule, "WeeklyUpdateSchedule"),
        # a real class, but not the one asked for nor a subclass of it
        (ContiguousPeriodicUpdateSchedule, "AlternatingPeriodicUpdateSchedule"),
        (HyperParameters, "PureTextAgentParameters"),
    ],
)
def test_a_type_tag_that_names_no_matching_class_is_an_error(cls, type_name):
    with pytest.raises(InvalidParameterError) as info:
        cls.from_dict({"_type": type_name})
    assert (info.value.field, info.value.value) == ("_type", type_name)
    assert f"{cls.__name__} or one of its subclasses" in str(info.value)


def test_a_bad_type_tag_deep_in_a_config_is_reported_with_its_address():
    agents = {"verifier": {"update_schedule": {"_type": "WeeklyUpdateSchedule"}}}
    with pytest.raises(
        InvalidParameterError,
        match=r"agents\.verifier\.update_schedule\._type='WeeklyUpdateSchedule'",
    ):
        HyperParameters.from_dict({"agents": agents})


@pytest.mark.parametrize(
    ("field", "first", "second"),
    [
        ("model_provider", "OpenAI", "SelfHosted"),
        ("model_name", "gpt-4o-mini", "gpt-4o"),
        ("freeze_agent", True, False),
        ("lora_rank", 8, 16),
        ("dpo_beta", 0.1, 0.5),
    ],
)
def test_members_of_a_shared_model_group_must_agree_on_the_model(field, first, second):
    on = {} if field == "model_provider" else {"model_provider": "TogetherAI"}
    with pytest.raises(SharedModelGroupError) as info:
        HyperParameters(
            interaction_protocol="debate",
            agents={
                "prover0": PureTextAgentParameters(
                    shared_model_group="provers", **{**on, field: first}
                ),
                "prover1": PureTextAgentParameters(
                    shared_model_group="provers", **{**on, field: second}
                ),
            },
        )
    message = str(info.value)
    assert "'prover0' and 'prover1'" in message and "model group 'provers'" in message
    assert f"differ in {field} ({first!r} vs {second!r})" in message


def test_members_of_a_shared_model_group_may_sample_differently():
    """Sampling settings are per agent, not part of the model."""
    hp = HyperParameters(
        interaction_protocol="debate",
        agents={
            "prover0": PureTextAgentParameters(shared_model_group="provers", temperature=0.2),
            "prover1": PureTextAgentParameters(shared_model_group="provers", temperature=0.9),
        },
    )
    assert hp.agents["prover1"].temperature == 0.9


@pytest.mark.parametrize("provider", ["Local", "SelfHosted"])
def test_full_fine_tuning_of_a_local_or_self_hosted_agent_is_refused_naming_use_lora(provider):
    """Both train LoRA adapters only; use_lora=False would otherwise be ignored."""
    with pytest.raises(InvalidParameterError, match="full fine-tuning is not supported") as caught:
        PureTextAgentParameters(model_provider=provider, use_lora=False)
    assert caught.value.field == "use_lora"


@pytest.mark.parametrize("provider", ["Local", "SelfHosted"])
def test_a_frozen_local_or_self_hosted_agent_may_leave_use_lora_off(provider):
    PureTextAgentParameters(model_provider=provider, use_lora=False, freeze_agent=True)


# ------------------------------------------------------------- nested assignment
def test_an_error_in_a_nested_object_names_its_full_address():
    hp = HyperParameters()
    with pytest.raises(InvalidParameterError) as info:
        hp.agents["verifier"].temperature = 5.0
    assert info.value.field == "agents.verifier.temperature"
    assert str(info.value).startswith("agents.verifier.temperature=5.0 is not allowed")
    assert hp.agents["verifier"].temperature == PureTextAgentParameters().temperature
    with pytest.raises(InvalidParameterError, match=r"^rl\.num_iterations=0 "):
        hp.rl.num_iterations = 0


def debate_with_shared_provers() -> HyperParameters:
    return HyperParameters(
        interaction_protocol="debate",
        agents={
            "prover0": PureTextAgentParameters(shared_model_group="provers"),
            "prover1": PureTextAgentParameters(shared_model_group="provers"),
        },
    )


def test_a_nested_assignment_keeps_a_shared_model_group_in_agreement():
    hp = debate_with_shared_provers()
    with pytest.raises(SharedModelGroupError, match="differ in model_name"):
        hp.agents["prover0"].model_name = "gpt-4o"
    assert hp.agents["prover0"].model_name == hp.agents["prover1"].model_name  # undone
    hp.agents["prover0"].temperature = 0.2  # sampling is per agent: allowed


def test_copies_and_pickles_know_their_own_nesting():
    hp = HyperParameters()
    for other in (copy.deepcopy(hp), pickle.loads(pickle.dumps(hp))):
        with pytest.raises(InvalidParameterError, match=r"^agents\.verifier\.top_p="):
            other.agents["verifier"].top_p = 2.0
        other.agents["verifier"].temperature = 0.1
    assert hp.agents["verifier"].temperature != 0.1  # the copies are independent


def test_an_object_taken_out_of_its_holder_is_checked_on_its_own():
    hp = HyperParameters()
    agent = hp.agents["verifier"]
    hp.agents["verifier"] = PureTextAgentParameters()  # `agent` is no longer held by hp
    with pytest.raises(InvalidParameterError) as info:
        agent.temperature = 5.0
    assert info.value.field == "temperature"


def test_an_agent_set_as_a_plain_dict_is_converted_and_checked_in_place():
    hp = HyperParameters()

    hp.agents["verifier"] = {"model_name": "gpt-4o", "temperature": 0.3}

    assert isinstance(hp.agents["verifier"], PureTextAgentParameters)
    assert hp.agents["verifier"].temperature == 0.3
    with pytest.raises(InvalidParameterError) as info:
        hp.agents["verifier"].temperature = 5.0  # linked: the error names where it sits
    assert info.value.field == "agents.verifier.temperature"


def test_a_bad_agent_value_names_its_full_address_and_changes_nothing():
    hp = HyperParameters()
    before = hp.agents["verifier"]

    with pytest.raises(InvalidParameterError) as info:
        hp.agents["verifier"] = {"temperature": 5.0}

    assert info.value.field == "agents.verifier.temperature"
    assert hp.agents["verifier"] is before


def test_an_agent_the_protocol_does_not_have_is_refused_and_not_added():
    hp = HyperParameters(interaction_protocol="nip")

    with pytest.raises(InvalidParameterError, match="'nip' has no agent 'judge'"):
        hp.agents["judge"] = PureTextAgentParameters()
    with pytest.raises(InvalidParameterError, match="has no agent 'judge'"):
        hp.agents.update(judge=PureTextAgentParameters())

    assert sorted(hp.agents) == ["prover", "verifier"]


def test_replacing_a_shared_model_group_member_must_keep_the_group_in_agreement():
    hp = debate_with_shared_provers()
    with pytest.raises(SharedModelGroupError, match="differ in model_name"):
        hp.agents["prover0"] = PureTextAgentParameters(
            shared_model_group="provers", model_name="gpt-4o"
        )
    assert hp.agents["prover0"].model_name == hp.agents["prover1"].model_name  # undone


def test_item_assignment_survives_copies_pickles_and_yaml():
    hp = HyperParameters()
    hp.agents["verifier"] = {"temperature": 0.3}
    for other in (copy.deepcopy(hp), pickle.loads(pickle.dumps(hp))):
        assert other == hp
        with pytest.raises(InvalidParameterError, match="has no agent 'judge'"):
            other.agents["judge"] = {}
    assert HyperParameters.from_yaml(hp.to_yaml()) == hp
