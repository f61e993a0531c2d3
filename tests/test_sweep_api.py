"""A sweep from Python: the grid of ``nip sweep`` priced, run, watched and compared in cells,
with settings for every agent of every cell."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

import nip
from nip.cli import main
from nip.errors import InvalidParameterError
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.settings import ExperimentSettings
from nip.sweeps.run import GridSpec

#: A 2 x 2 grid, written to grid.yaml.
GRID = {
    "name": "tiny",
    "base": "base.yaml",
    "axes": {"interaction_protocol": ["nip", "debate"], "seed": [0, 1]},
}

#: Two protocols whose agents differ: nip has a prover, debate prover0 and prover1.
PROTOCOL_GRID = {"base": "base.yaml", "axes": {"interaction_protocol": ["nip", "debate"]}}


@pytest.fixture
def folder(make_tiny_dataset, tmp_path, monkeypatch) -> Path:
    """A folder (the working directory) with a base config for paid OpenAI agents, a 2 x 2
    grid on it (nip and debate, seeds 0 and 1), and nothing run."""
    agent = PureTextAgentParameters(model_provider="OpenAI", model_name="gpt-4o-mini-2024-07-18")
    HyperParameters(
        dataset=str(make_tiny_dataset()),
        agents={"prover": agent, "verifier": agent},
        rl={"num_iterations": 2, "rollouts_per_iteration": 4},
        text_rl={"min_fine_tune_examples": 1, "test_scheme": "all"},
        nip_protocol={"max_message_rounds": 3},
        debate_protocol={"max_message_rounds": 3},
    ).save(tmp_path / "base.yaml")
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(GRID))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _settings(**changes) -> ExperimentSettings:
    return ExperimentSettings(show_progress=False, wandb_mode="disabled", **changes)


def _dummy(folder: Path, **options) -> nip.Sweep:
    """The grid on the dummy backend, as a notebook says it."""
    changes = {"agents.*.use_dummy_api": True}
    return nip.sweep("grid.yaml", set=changes, settings=_settings(), **options)


# ------------------------------------------------------------ settings for every agent
def test_agents_star_sets_a_field_of_every_agent_of_every_cell(folder):
    spec = GridSpec.from_dict({**PROTOCOL_GRID, "set": {"agents.*.use_dummy_api": True}})
    spec.folder = folder
    cells = spec.cells()
    agents = {(c.name, n): a.use_dummy_api for c in cells for n, a in c.hyper_params.agents.items()}
    assert agents == {
        ("nip", "prover"): True,
        ("nip", "verifier"): True,
        ("debate", "prover0"): True,
        ("debate", "prover1"): True,
        ("debate", "verifier"): True,
    }


def test_a_path_naming_one_agent_wins_over_agents_star(folder):
    spec = GridSpec.from_dict(
        {
            **PROTOCOL_GRID,
            "set": {
                "agents.verifier.model_name": "gpt-4o-2024-08-06",
                "agents.*.model_name": "x",
            },
        },
        folder=folder,
    )
    for cell in spec.cells():
        names = {n: a.model_name for n, a in cell.hyper_params.agents.items()}
        assert names.pop("verifier") == "gpt-4o-2024-08-06" and set(names.values()) == {"x"}


def test_one_agents_path_is_refused_for_a_protocol_without_that_agent_saying_so_once(folder):
    spec = GridSpec.from_dict(
        {**PROTOCOL_GRID, "set": {"agents.prover.use_dummy_api": True}}, folder=folder
    )
    with pytest.raises(InvalidParameterError) as refused:
        spec.cells()
    message = str(refused.value)
    assert refused.value.field == "agents.prover.use_dummy_api"
    assert message.startswith("cell debate: agents.prover.use_dummy_api=True is not allowed")
    assert "debate has no agent 'prover' (its agents: prover0, prover1, verifier)" in message
    assert "agents.*.use_dummy_api sets every agent's" in message
    assert message.count("is not allowed") == 1 and message.count("(allowed:") == 1


@pytest.mark.parametrize(
    ("change", "named", "says"),
    [
        ({"agents.*.use_dummy_apii": True}, "agents.*.use_dummy_apii", "did you mean"),
        ({"agents.*": True}, "agents.*", "a mapping of agent settings"),
        ({"agents.*": {"model_nam": "x"}}, "agents.*", "did you mean agents.*.model_name"),
        ({"agents.*.temperature": "hot"}, "agents.*.temperature", "agents.prover.temperature"),
    ],
)
def test_a_meaningless_agents_star_setting_is_refused_naming_it(folder, change, named, says):
    with pytest.raises(InvalidParameterError) as refused:
        HyperParameters.load(folder / "base.yaml").with_overrides(change)
    assert refused.value.field == named and str(refused.value).startswith(named)
    assert says in str(refused.value)


def test_nip_sweep_set_reaches_every_cell(folder, capsys):
    command = ["sweep", "grid.yaml", "--dry-run", "--set", "agents.*.use_dummy_api=true"]
    assert main([*command, "--set", "rl.num_iterations=1"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith(("nip_", "debate_"))]
    assert [(row[2], row[-1]) for row in rows] == [("1", "0.00")] * 4  # 1 iteration, free
    assert not (folder / "runs").exists()


# ------------------------------------------------------------------- the Python API
def test_the_api_and_the_grid_file_make_the_same_cells_in_the_same_directory(folder):
    sweep = nip.sweep("grid.yaml")
    from_file = GridSpec.load("grid.yaml").cells()
    assert [c.name for c in sweep.cells] == [c.name for c in from_file]
    assert [c.hyper_params for c in sweep.cells] == [c.hyper_params for c in from_file]
    assert sweep.directory == Path("runs/sweeps/tiny")  # where `nip sweep grid.yaml` puts it


def test_seeds_axes_and_a_name_change_the_grid(folder):
    sweep = nip.sweep("grid.yaml", seeds=[5], axes={"interaction_protocol": ["adp"]}, name="other")
    assert [c.name for c in sweep.cells] == ["adp_seed5"]
    assert sweep.directory == Path("runs/sweeps/other")


def test_a_grid_refused_by_the_api_names_the_cell_and_the_field(folder):
    with pytest.raises(InvalidParameterError, match=r"^cell debate_seed0: agents\.prover"):
        nip.sweep("grid.yaml", set={"agents.prover.temperature": 0.5})


def test_the_dry_run_is_a_table_of_cells_whose_total_is_the_sum(folder):
    estimate = nip.sweep("grid.yaml", settings=_settings()).dry_run(sample_items=1)
    frame = estimate.to_dataframe()
    assert list(frame["cell"]) == ["nip_seed0", "nip_seed1", "debate_seed0", "debate_seed1"]
    assert list(frame["seed"]) == [0, 1, 0, 1] and set(frame["protocol"]) == {"nip", "debate"}
    assert frame["usd"].sum() == pytest.approx(estimate.total_usd) and estimate.total_usd > 0
    assert "debate_seed1" in estimate._repr_html_() and estimate.total in estimate._repr_html_()
    assert not (folder / "runs").exists()


def test_a_sweep_runs_and_compares_from_python_as_from_the_command_line(folder):
    sweep = _dummy(folder)
    assert set(sweep.run(max_parallel=2, echo=False).values()) == {"done"}
    figure, table = sweep.compare()
    assert [trace.name for trace in figure.data] == ["debate", "nip"]
    assert set(table["runs"]) == {2}
    _, seeds = sweep.compare(pool_seeds=False)
    assert set(seeds["series"]) == {"nip seed 0", "nip seed 1", "debate seed 0", "debate seed 1"}
    status = sweep.status()
    assert list(status["stage"]) == ["done"] * 4 and list(status["seed"]) == [0, 1, 0, 1]
    reopened = nip.sweep("runs/sweeps/tiny")  # a sweep directory is the sweep it holds
    assert [c.hyper_params for c in reopened.cells] == [c.hyper_params for c in sweep.cells]


def test_a_retest_of_one_cell_is_its_own_series_in_the_comparison(folder):
    sweep = _dummy(folder)
    sweep.run(echo=False)
    out = sweep.retest("nip_seed1", passes=2)
    assert out == sweep.run_dir("nip_seed1") / "retest" / "test-2x"
    _, table = sweep.compare()
    retest = table[table["series"] == "nip (retest test-2x)"]
    assert list(retest["dialogues"]) == [8, 8] and set(retest["runs"]) == {1}
    with pytest.raises(KeyError, match="no cell 'nip_seed9'"):
        sweep.run_dir("nip_seed9")


# ------------------------------------------------------------------ the sweep monitor
def test_the_monitor_of_a_sweep_not_started_lists_its_cells_as_not_started(folder):
    from nip.widgets import SweepMonitor

    monitor = SweepMonitor(_dummy(folder), start=False)
    assert "sweep tiny</b>: not started (4 cells)" in monitor.header.value
    assert monitor.table.value.count("not started") == 4 and not monitor.finished
    assert "appears once a cell has saved test dialogues" in monitor.comparison_note.value
    assert monitor.open_cell("nip_seed0") is None
    assert "nip_seed0 has not started" in monitor.cell_box.children[0].value
    by_path = SweepMonitor(folder / "runs" / "nowhere", start=False)  # no error: it waits
    assert "not started" in by_path.header.value


def test_the_monitor_fills_its_table_and_comparison_as_the_cells_finish(folder):
    from nip.widgets import SweepMonitor

    sweep = _dummy(folder, name="watched")
    sweep.settings.dummy_latency_s = 0.02
    monitor = SweepMonitor(sweep, start=False)
    seen: list[tuple[int, int]] = []

    async def run_and_watch():
        running = asyncio.create_task(sweep.run_async(max_parallel=1, echo=False))
        while not running.done():
            monitor.refresh()
            done = sum(s.finished for s in monitor.snapshots.values())
            seen.append((done, len(monitor.comparison.figure.data)))
            await asyncio.sleep(0.05)
        await running
        monitor.refresh()
        seen.append((4, len(monitor.comparison.figure.data)))

    asyncio.run(run_and_watch())
    assert seen[0] == (0, 0) and seen[-1] == (4, 2)  # nothing, then both protocols
    assert any(0 < done < 4 for done, _ in seen), seen  # the cells finish one by one
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert monitor.finished
    for cell in ("nip_seed0", "debate_seed1"):
        assert cell in monitor.table.value
    assert ">debate<" in monitor.table.value and ">finished<" in monitor.table.value
    assert "% (test)" in monitor.table.value and "$0.00" in monitor.table.value


def test_the_monitor_says_in_words_why_a_cell_failed(folder):
    from nip.widgets import SweepMonitor

    sweep = _dummy(folder)
    broken = sweep.run_dir("nip_seed1")
    broken.mkdir(parents=True)
    (broken / "state.json").write_text("{not json")  # a cell whose state is damaged
    outcomes = sweep.run(echo=False)
    monitor = SweepMonitor(sweep, start=False)
    assert "3/4 cells done, 1 failed" in monitor.header.value and monitor.finished
    assert f"failed: {outcomes['nip_seed1']}"[:40] in monitor.table.value
    assert sweep.status().set_index("cell").loc["nip_seed1", "error"] == outcomes["nip_seed1"]


def test_the_monitor_is_saved_small(folder):
    from ipywidgets.embed import dependency_state

    from nip.widgets import SweepMonitor

    sweep = _dummy(folder)
    sweep.run(echo=False)
    monitor = SweepMonitor(sweep, start=False)
    monitor.open_cell("debate_seed0")
    size = len(json.dumps(dependency_state(monitor, drop_defaults=False)))
    assert size < 300_000, f"{size:,} bytes of widget state"


def test_import_nip_stays_light_with_the_sweep_api():
    import subprocess
    import sys

    heavy = "{'pandas', 'plotly', 'ipywidgets'}"
    code = f"import sys, nip; nip.sweep; print(sorted({heavy} & set(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "[]", result.stderr


def test_a_sweep_started_in_a_shell_is_watched_and_compared_from_python(folder):
    command = ["sweep", "grid.yaml", "--set", "agents.*.use_dummy_api=true", "--quiet"]
    assert main(command) == 0
    sweep = nip.sweep("runs/sweeps/tiny")
    assert list(sweep.status()["stage"]) == ["done"] * 4
    assert set(sweep.compare()[1]["series"]) == {"nip", "debate"}


def test_the_monitor_counts_its_comparisons_points_and_runs_in_words(folder):
    """One cell of one iteration: one point from one run, said in the singular."""
    from nip.widgets import SweepMonitor

    changes = {"agents.*.use_dummy_api": True, "rl.num_iterations": 1}
    axes = {"interaction_protocol": ["nip"]}
    one = nip.sweep("grid.yaml", set=changes, axes=axes, seeds=[0], settings=_settings())
    monitor = SweepMonitor(one, start=False)
    one.run(echo=False)
    monitor.refresh()
    assert "1 point from 1 run at most per protocol" in monitor.comparison_note.value
