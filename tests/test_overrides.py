"""Overrides: a configuration changed by dotted path, from Python and from ``--set``."""

from __future__ import annotations

import json

import pytest

from nip.cli import main
from nip.configs import load_preset
from nip.errors import InvalidParameterError
from nip.parameters import HyperParameters, PureTextAgentParameters, RlParameters
from nip.parameters.overrides import changed_paths, parse_override
from nip.runs.changes import SavedParametersChangedError, change_saved_parameters
from nip.settings import ExperimentSettings
from nip.training.trainer import build_trainer


def test_overrides_return_a_new_validated_object_and_leave_the_original_alone():
    base = load_preset("paper/nip-ei")
    changed = base.with_overrides(
        {"agents.prover.model_name": "gpt-4o-2024-08-06", "rl.num_iterations": 4, "seed": 3}
    )
    assert changed.agents["prover"].model_name == "gpt-4o-2024-08-06"
    assert (changed.rl.num_iterations, changed.seed) == (4, 3)
    assert (base.rl.num_iterations, base.seed) == (8, 6198)


def test_command_line_text_is_read_with_yaml_scalar_rules_but_text_fields_stay_text():
    base = load_preset("paper/nip-ei")
    changed = base.with_overrides(
        {
            "rl.num_iterations": "4",
            "agents.verifier.temperature": "0.5",
            "agents.prover.freeze_agent": "true",
            "agents.prover.model_name": "2024",
        },
        from_text=True,
    )
    assert changed.rl.num_iterations == 4 and changed.agents["verifier"].temperature == 0.5
    assert changed.agents["prover"].freeze_agent is True
    assert changed.agents["prover"].model_name == "2024"
    assert parse_override("text_rl.test_scheme=all") == ("text_rl.test_scheme", "all")


@pytest.mark.parametrize(("text", "value"), [("1e-1", 0.1), ("5E-1", 0.5), ("+25e-2", 0.25)])
def test_set_reads_exponent_notation_as_a_float_where_the_field_is_a_float(
    text, value, make_tiny_dataset, tmp_path
):
    config = tmp_path / "config.yaml"
    _tiny(make_tiny_dataset()).save(config)
    run_dir = tmp_path / "run"
    args = ["run", str(config), "--run-dir", str(run_dir), "--quiet"]
    assert main([*args, "--set", f"agents.prover.temperature={text}"]) == 0
    saved = json.loads((run_dir / "hyper_params.json").read_text())
    assert saved["agents"]["prover"]["temperature"] == value


def test_a_config_file_reads_exponent_notation_as_a_float_but_text_fields_keep_it():
    params = HyperParameters.from_yaml("rl: {lr: 1e-4}\nagents: {verifier: {model_name: 1e-4}}")
    assert params.rl.lr == 1e-4 and params.agents["verifier"].model_name == "1e-4"


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"rl.num_iterationz": 3}, "rl.num_iterationz"),
        ({"agents.judge.model_name": "x"}, "agents.judge.model_name"),
        ({"seed.x": 1}, "seed.x"),
        ({"rl.num_iterations": -1}, "rl.num_iterations"),
        ({"agents.prover.temperature": "hot"}, "agents.prover.temperature"),
        ({"interaction_protocol": "no such-protocol"}, "interaction_protocol"),
    ],
)
def test_a_bad_path_or_value_is_refused_naming_it(overrides, named):
    with pytest.raises(InvalidParameterError) as caught:
        load_preset("paper/nip-ei").with_overrides(overrides, from_text=True)
    assert str(caught.value).startswith(named)


def test_changing_the_protocol_gives_its_agents_the_parameters_of_the_same_role():
    base = load_preset("paper/nip-ei").with_overrides({"agents.prover.model_name": "p-model"})
    debate = base.with_overrides({"interaction_protocol": "debate"})
    assert list(debate.agents) == ["prover0", "prover1", "verifier"]
    assert {debate.agents[p].model_name for p in ("prover0", "prover1")} == {"p-model"}
    assert list(base.with_overrides({"interaction_protocol": "solo_verifier"}).agents) == [
        "verifier"
    ]


def test_a_set_without_an_equals_sign_is_refused():
    with pytest.raises(InvalidParameterError, match="PATH=VALUE"):
        parse_override("rl.num_iterations")


def _tiny(dataset) -> HyperParameters:
    dummy = PureTextAgentParameters(use_dummy_api=True)
    return HyperParameters(
        dataset=str(dataset),
        agents={"prover": dummy, "verifier": dummy},
        rl=RlParameters(num_iterations=1, rollouts_per_iteration=2),
        text_rl={"test_scheme": "none"},
    )


def test_nip_run_sets_fields_and_the_seed_from_the_command_line(make_tiny_dataset, tmp_path):
    config = tmp_path / "config.yaml"
    _tiny(make_tiny_dataset()).save(config)
    run_dir = tmp_path / "run"
    args = ["run", str(config), "--run-dir", str(run_dir), "--quiet"]
    assert main([*args, "--set", "rl.rollouts_per_iteration=3", "--seed", "11"]) == 0
    saved = json.loads((run_dir / "hyper_params.json").read_text())
    assert saved["seed"] == 11 and saved["rl"]["rollouts_per_iteration"] == 3


def test_nip_run_refuses_a_bad_override_naming_it(make_tiny_dataset, tmp_path, capsys):
    config = tmp_path / "config.yaml"
    _tiny(make_tiny_dataset()).save(config)
    code = main(["run", str(config), "--dry-run", "--set", "rl.rollouts=3"])
    assert code == 2 and "rl.rollouts" in capsys.readouterr().err


def test_resume_refuses_overrides_that_change_the_saved_run_unless_accepted(
    make_tiny_dataset, tmp_path
):
    run_dir = tmp_path / "run"
    hp = _tiny(make_tiny_dataset())
    build_trainer(hp, ExperimentSettings(run_dir=run_dir, show_progress=False))
    assert change_saved_parameters(run_dir, {"seed": hp.seed}) == {}  # the same: allowed
    with pytest.raises(SavedParametersChangedError, match="seed"):
        change_saved_parameters(run_dir, {"seed": 5})
    assert change_saved_parameters(run_dir, {"seed": 5}, accept=True) == {"seed": (hp.seed, 5)}
    assert json.loads((run_dir / "hyper_params.json").read_text())["seed"] == 5
    assert json.loads((run_dir / "hyper_params.before-0.json").read_text())["seed"] == hp.seed
    assert main(["resume", str(run_dir), "--quiet", "--seed", "6"]) == 2


def test_changed_paths_lists_what_differs():
    before = {"a": {"b": 1, "c": 2}, "_v": 1}
    assert changed_paths(before, {"a": {"b": 1, "c": 3}, "_v": 2}) == {"a.c": (2, 3)}


def test_a_mapping_sets_several_fields_of_an_agent_and_keeps_the_others():
    base = HyperParameters(agents={"verifier": {"supervisor_name": "Referee", "temperature": 0.5}})
    moved = base.with_overrides(
        {"agents.verifier": "{model_provider: TogetherAI, model_name: m}"}, from_text=True
    )
    verifier = moved.agents["verifier"]
    assert (verifier.model_provider, verifier.model_name) == ("TogetherAI", "m")
    assert (verifier.supervisor_name, verifier.temperature) == ("Referee", 0.5)


@pytest.mark.parametrize("protocol", ["nip", "debate", "solo_verifier"])
def test_agents_star_sets_every_agent_of_the_protocol(protocol):
    base = HyperParameters(interaction_protocol=protocol)
    moved = base.with_overrides({"agents.*.temperature": "0.2"}, from_text=True)
    assert {a.temperature for a in moved.agents.values()} == {0.2}
    assert set(moved.agents) == set(base.agents)


def test_a_sweep_grid_moves_every_cell_to_another_provider_with_one_setting():
    from nip.sweeps.grid import GridSpec

    agent = {"model_provider": "TogetherAI", "model_name": "meta-llama/Llama-3.3-70B-Instruct"}
    grid = GridSpec.from_dict(
        {"axes": {"base": ["paper/nip-ei", "paper/debate-ei"]}, "set": {"agents.*": agent}}
    )
    cells = grid.cells()
    assert len(cells) == 2
    for cell in cells:  # the debate cell's two provers stay in their shared group
        assert {a.model_provider for a in cell.hyper_params.agents.values()} == {"TogetherAI"}
