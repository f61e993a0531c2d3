"""The shipped presets: the paper's code-validation experiments, listed by ``nip presets``."""

from __future__ import annotations

import pytest

from nip.cli import build_parser, main
from nip.cli._args import load_config as _load_config
from nip.configs import UnknownPresetError, get_preset, list_presets, load_preset
from nip.errors import ConfigFileError
from nip.parameters import HyperParameters

PAPER_PROTOCOLS = ("adp", "debate", "merlin_arthur", "nip", "mnip", "solo_verifier")
PAPER_PRESETS = [f"paper/{p}-ei" for p in PAPER_PROTOCOLS] + ["paper/nip-malt", "paper/mnip-malt"]


@pytest.mark.parametrize("preset", list_presets(), ids=lambda preset: preset.name)
def test_every_shipped_preset_loads_validates_and_describes_itself(preset):
    params = preset.load()
    assert isinstance(params, HyperParameters)
    assert HyperParameters.from_dict(params.to_dict()) == params
    assert preset.description and not preset.description.startswith("#")


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_each_paper_experiment_has_a_preset_on_buggy_apps_with_openai_models(name):
    params = load_preset(name)
    assert params.dataset == "lrhammond/buggy-apps"
    assert params.code_validation.apps_difficulty == "interview"
    assert params.code_validation.apps_exclude_flagged
    assert params.trainer == ("pure_text_malt" if name.endswith("-malt") else "pure_text_ei")
    assert name.removeprefix("paper/").rsplit("-", 1)[0] == params.interaction_protocol
    assert {agent.model_provider for agent in params.agents.values()} == {"OpenAI"}
    assert {agent.model_name for agent in params.agents.values()} == {"gpt-4o-mini-2024-07-18"}


@pytest.mark.parametrize("protocol", PAPER_PROTOCOLS)
def test_the_expert_iteration_presets_use_the_values_of_the_papers_script(protocol):
    params = load_preset(f"paper/{protocol}-ei")
    assert (params.rl.num_iterations, params.rl.rollouts_per_iteration) == (8, 200)
    assert params.text_rl.fine_tune_on_all_previous_rollouts
    rounds = {"nip": "nip_protocol", "debate": "debate_protocol", "mnip": "mnip_protocol"}
    if protocol in rounds:
        protocol_params = getattr(params, rounds[protocol])
        assert (protocol_params.min_message_rounds, protocol_params.max_message_rounds) == (1, 9)


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_the_paper_presets_share_one_prover_model_as_the_script(name):
    """scripts/ei_cv.py put both provers in one group (provers_group)."""
    params = load_preset(name)
    provers = [a for a in params.agent_names if a.startswith("prover")]
    groups = {params.agents[a].shared_model_group or a for a in provers}
    assert len(groups) <= 1, groups  # solo_verifier has no prover


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_the_paper_presets_test_inline_ten_times_where_the_script_tested_after_training(name):
    """scripts/ei_cv.py trained with ``test_scheme: none`` and one test pass, and tested the
    saved models afterwards (``rerun_tests``); the presets test before the first and after the
    last iteration, ``rl.num_test_iterations=10`` times (the original's default), without which
    the "always fails" figure means nothing. ``--set text_rl.test_scheme=none`` and ``nip
    retest`` give the script's way."""
    params = load_preset(name)
    assert params.text_rl.test_scheme == "first_and_last"
    assert params.rl.num_test_iterations == 10


def test_nip_presets_lists_every_preset_with_its_description(capsys):
    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for preset in list_presets():
        assert any(line.split(maxsplit=1) == [preset.name, preset.description] for line in lines), (
            preset.name
        )
    assert {p.name for p in list_presets()} >= {*PAPER_PRESETS, "quickstart"}


def test_nip_run_takes_a_preset_name_with_a_slash():
    args = build_parser().parse_args(["run", "paper/nip-ei"])
    params = _load_config(args.config)
    assert params == load_preset("paper/nip-ei")
    assert params.interaction_protocol == "nip"


def test_an_unknown_preset_is_an_error_that_lists_the_shipped_ones():
    with pytest.raises(UnknownPresetError, match="paper/nip-ei"):
        get_preset("paper/nip-ie")
    with pytest.raises(ConfigFileError, match="no config file or preset named 'paper/nip-ie'"):
        _load_config("paper/nip-ie")


# ------------------------------------------------------------ the config file's JSON Schema
@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_a_shipped_preset_validates_against_the_json_schema_of_a_config_file(name):
    import jsonschema
    import yaml

    from nip.parameters import config_json_schema

    check = jsonschema.Draft202012Validator(config_json_schema()).validate
    check(load_preset(name).to_dict())
    check(yaml.safe_load(get_preset(name).text()))  # the file as written


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("agents", "verifier", "dpo_beta"), 5.0),
        (("agents", "verifier", "use_lora"), "yes"),
        (("rl", "num_iterations"), True),
        (("agents", "verifier", "model_provider"), "Anthropic"),
        (("agents", "verifier", "update_schedule", "period"), 0),
        (("rl", "num_iteration"), 3),
    ],
    ids=["out of bounds", "text for a bool", "a bool for an int", "not a choice", "deep", "typo"],
)
def test_the_json_schema_of_a_config_file_refuses_what_loading_it_refuses(path, value):
    import jsonschema

    from nip.errors import NipError
    from nip.parameters import config_json_schema

    data = load_preset("paper/nip-ei").to_dict()
    data["agents"]["verifier"]["update_schedule"] = {"_type": "ContiguousPeriodicUpdateSchedule"}
    jsonschema.validate(data, config_json_schema())
    *parents, key = path
    node = data
    for part in parents:
        node = node[part]
    node[key] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, config_json_schema())
    with pytest.raises(NipError):
        HyperParameters.from_dict(data)


def test_nip_schema_writes_the_schema_an_editor_checks_a_config_file_with(tmp_path, capsys):
    import json

    from nip.cli import main
    from nip.parameters import config_json_schema

    assert main(["schema", "--out", str(tmp_path / "nip.schema.json")]) == 0
    assert json.loads((tmp_path / "nip.schema.json").read_text()) == config_json_schema()
    capsys.readouterr()
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == config_json_schema()
