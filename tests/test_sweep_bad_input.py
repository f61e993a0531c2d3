"""A sweep refuses a bad grid before any cell starts, says how far each cell got, and takes
an extended cell as part of itself. (Every command's bad input: ``test_cli_bad_input.py``.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nip.cli import main
from nip.errors import InvalidParameterError, UnknownProtocolError
from nip.runs.sweep_dir import sweep_status
from nip.settings import ExperimentSettings
from nip.sweeps.run import (
    GridSpec,
    SweepMismatchError,
    prepare_sweep,
    run_sweep,
)
from nip.viz.compare_runs import comparison_table

GRID = """
name: tiny
base: base.json
axes:
  interaction_protocol: [nip, debate]
  seed: [0, 1]
"""
CELLS = ["nip_seed0", "nip_seed1", "debate_seed0", "debate_seed1"]


@pytest.fixture
def grid(dummy_params, tmp_path) -> Path:
    dummy_params().save(tmp_path / "base.json")
    (tmp_path / "grid.yaml").write_text(GRID)
    return tmp_path / "grid.yaml"


def _settings() -> ExperimentSettings:
    return ExperimentSettings(show_progress=False, wandb_mode="disabled")


def test_a_grid_with_an_unknown_protocol_is_refused_before_any_cell_starts(grid, tmp_path):
    spec = GridSpec.load(grid)
    spec.axes["interaction_protocol"] = ["nip", "nipp"]
    with pytest.raises(UnknownProtocolError, match="cell nipp_seed0: unknown interaction"):
        run_sweep(spec, tmp_path / "sweep", _settings(), echo=False)
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("max_parallel", [0, -1])
def test_max_parallel_below_one_is_refused_as_in_the_grid_before_anything_is_written(
    grid, tmp_path, max_parallel
):
    with pytest.raises(InvalidParameterError, match=f"max_parallel={max_parallel} is not"):
        run_sweep(GridSpec.load(grid), tmp_path / "s", _settings(), max_parallel=max_parallel)
    grid.write_text(GRID + f"max_parallel: {max_parallel}\n")
    with pytest.raises(InvalidParameterError, match=f"max_parallel={max_parallel} is not"):
        GridSpec.load(grid)
    assert not (tmp_path / "s").exists()


def test_an_unknown_path_is_named_once(grid, capsys):
    grid.write_text(GRID + "set:\n  rl.num_iterationz: 1\n")
    assert main(["sweep", str(grid), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("rl.num_iterationz=1 is not allowed") == 1
    assert err.count("(allowed: the dotted path of a parameter)") == 1
    assert err.startswith("nip: error: InvalidParameterError: cell nip_seed0: rl.num_iterationz")


@pytest.mark.parametrize(
    ("grid_text", "named"),
    [
        ("base: base.json\naxes: [seed, 0, 1]\n", "axes=['seed', 0, 1]"),
        ("base: base.json\nzip:\n  seed: [0, 1]\n", "zip={'seed': [0, 1]}"),
        ("base: base.json\nzip:\n  - [0, 1]\n", "zip=[0, 1]"),
        ("base: base.json\nset: [rl.num_iterations, 2]\n", "set="),
    ],
)
def test_a_malformed_grid_is_one_error_naming_its_key(grid, grid_text, named, capsys):
    grid.write_text(grid_text)
    assert main(["sweep", str(grid), "--sweep-dir", str(grid.parent / "s")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nip: error: InvalidParameterError: ") and named in err
    assert err.count("\n") == 1 and not (grid.parent / "s").exists()


def test_status_shows_cells_that_have_not_started_as_not_started(grid, tmp_path, capsys):
    prepare_sweep(GridSpec.load(grid), tmp_path / "s")  # killed before any cell ran
    assert main(["sweep", "status", str(tmp_path / "s")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{tmp_path / 's'}: not running"
    assert [line.split() for line in lines[1:]] == [[c, "not", "started"] for c in CELLS]
    assert [c.num_iterations for c in sweep_status(tmp_path / "s")] == [2] * 4


def test_status_shows_a_cell_that_failed_with_its_error(grid, tmp_path, capsys):
    spec = GridSpec.load(grid)
    cell = spec.cells()[1]
    cell.run_dir(tmp_path / "s").mkdir(parents=True)
    cell.hyper_params.save(cell.run_dir(tmp_path / "s") / "hyper_params.json")
    (cell.run_dir(tmp_path / "s") / "state.json").write_text("{damaged")
    run_sweep(spec, tmp_path / "s", _settings(), echo=False)
    assert main(["sweep", "status", str(tmp_path / "s")]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "failed" in rows["nip_seed1"] and "not valid JSON" in rows["nip_seed1"]
    assert rows["nip_seed0"].split()[1:4] == ["finished", "iteration", "2/2"]


def test_compare_shows_the_cells_that_ran_and_marks_those_that_have_not(grid, tmp_path, capsys):
    spec = GridSpec.load(grid)
    prepare_sweep(spec, tmp_path / "s")
    assert main(["compare", str(tmp_path / "s")]) == 2  # nothing to compare yet
    err = capsys.readouterr().err
    assert "no" in err and all(f"{c} (not started)" in err for c in CELLS)
    spec.axes["interaction_protocol"] = ["nip"]  # the nip cells run, the debate ones do not
    run_sweep(spec, tmp_path / "nip-only", _settings(), echo=False)
    for cell in ("nip_seed0", "nip_seed1"):
        source = tmp_path / "nip-only" / "cells" / cell
        (tmp_path / "s" / "cells").mkdir(exist_ok=True)
        source.rename(tmp_path / "s" / "cells" / cell)
    _stop_after_first_stage(GridSpec.load(grid).cells()[2], tmp_path / "s")
    table = comparison_table([tmp_path / "s"])
    assert set(table["series"]) == {"nip"}
    assert table.attrs["incomplete"] == [
        "debate_seed0 (log_stats, iteration 1/2, no test dialogues yet)",
        "debate_seed1 (not started)",
    ]
    assert main(["compare", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert "nip " in out and "debate_seed1 (not started)" in out.splitlines()[-1]


def _stop_after_first_stage(cell, sweep_dir: Path) -> None:
    from nip.sweeps.run import open_cell

    open_cell(cell, sweep_dir, _settings()).train(max_stages=1)


def test_an_extended_cell_is_part_of_its_sweep_which_resumes(grid, tmp_path, capsys):
    run_sweep(GridSpec.load(grid), tmp_path / "s", _settings(), echo=False)
    cell = tmp_path / "s" / "cells" / "nip_seed0"
    assert main(["extend", str(cell), "--iterations", "1", "--quiet"]) == 0
    assert main(["sweep", "resume", str(tmp_path / "s"), "--quiet"]) == 0
    capsys.readouterr()
    assert {c.name: (c.stage, c.num_iterations) for c in sweep_status(tmp_path / "s")} == {
        "nip_seed0": ("done", 3),
        "nip_seed1": ("done", 2),
        "debate_seed0": ("done", 2),
        "debate_seed1": ("done", 2),
    }
    saved = json.loads((cell / "hyper_params.json").read_text())
    assert saved["rl"]["num_iterations"] == 3


def test_a_cell_run_with_other_parameters_than_the_grids_is_still_refused(grid, tmp_path):
    run_sweep(GridSpec.load(grid), tmp_path / "s", _settings(), echo=False)
    grid.write_text(GRID + "set:\n  rl.rollouts_per_iteration: 6\n")
    with pytest.raises(SweepMismatchError, match=r"rl\.rollouts_per_iteration: 4 -> 6"):
        run_sweep(GridSpec.load(grid), tmp_path / "s", _settings(), echo=False)
