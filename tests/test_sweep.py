"""Sweeps: a grid of runs priced before it starts, run concurrently, resumed after a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nip.cli import main
from nip.errors import InvalidParameterError
from nip.providers.pool import BackendPool
from nip.runs.sweep_dir import sweep_status
from nip.settings import ExperimentSettings
from nip.sweeps.grid import estimate_sweep
from nip.sweeps.run import (
    GridSpec,
    SweepMismatchError,
    open_cell,
    run_sweep,
)
from nip.training.cost_estimate import estimate_cost
from nip.viz.compare_runs import comparison_table

GRID = """
name: tiny
base: base.yaml
axes:
  interaction_protocol: [nip, debate]
  seed: [0, 1]
"""


@pytest.fixture
def grid(dummy_params, tmp_path) -> Path:
    """A 2 x 2 grid (nip and debate, seeds 0 and 1) on the dummy API."""
    dummy_params().save(tmp_path / "base.yaml")
    (tmp_path / "grid.yaml").write_text(GRID)
    return tmp_path / "grid.yaml"


def _settings(**changes) -> ExperimentSettings:
    return ExperimentSettings(show_progress=False, wandb_mode="disabled", **changes)


def test_a_grid_expands_into_named_cells_product_and_zip(grid):
    spec = GridSpec.load(grid)
    assert [c.name for c in spec.cells()] == [
        "nip_seed0",
        "nip_seed1",
        "debate_seed0",
        "debate_seed1",
    ]
    spec.zipped = [{"agents.verifier.temperature": [0.1, 0.2], "rl.num_iterations": [1, 2]}]
    cells = spec.cells()
    assert len(cells) == 8
    assert {
        (c.hyper_params.agents["verifier"].temperature, c.hyper_params.rl.num_iterations)
        for c in cells
    } == {(0.1, 1), (0.2, 2)}


def test_a_bad_axis_is_refused_naming_it(grid):
    spec = GridSpec.load(grid)
    spec.axes["rl.num_iterationz"] = [1]
    with pytest.raises(InvalidParameterError, match=r"rl\.num_iterationz"):
        spec.cells()


def test_the_dry_run_total_is_the_sum_of_the_cells_estimates(dummy_params, tmp_path):
    model = {"model_provider": "OpenAI", "model_name": "gpt-4o-mini-2024-07-18"}
    dummy_params(**model).save(tmp_path / "base.yaml")
    (tmp_path / "grid.yaml").write_text(GRID)
    spec = GridSpec.load(tmp_path / "grid.yaml")
    estimate = estimate_sweep(spec, _settings(), sample_items=1)
    singles = [estimate_cost(c.hyper_params, _settings(), sample_items=1) for c in spec.cells()]
    assert estimate.total_usd == pytest.approx(sum(s.total_usd for s in singles))
    assert estimate.total_usd > 0
    assert estimate.total_calls == sum(s.total_calls for s in singles)
    assert not (tmp_path / "runs").exists()
    text = str(estimate)
    assert "debate_seed1" in text and f"${estimate.total_usd:,.2f}" in text


def _events(sweep_dir: Path) -> list[tuple[str, str]]:
    lines = (sweep_dir / "events.jsonl").read_text().splitlines()
    return [(json.loads(line)["event"], json.loads(line)["cell"]) for line in lines]


def test_cells_run_concurrently_up_to_max_parallel(grid, tmp_path):
    spec = GridSpec.load(grid)
    outcomes = run_sweep(spec, tmp_path / "sweep", _settings(), max_parallel=4, echo=False)
    assert set(outcomes.values()) == {"done"}
    events = _events(tmp_path / "sweep")
    first_end = [e for e, _ in events].index("end")
    assert [e for e, _ in events[:first_end]] == ["start"] * 4  # all four overlapped


def test_max_parallel_one_runs_the_cells_one_after_another(grid, tmp_path):
    spec = GridSpec.load(grid)
    run_sweep(spec, tmp_path / "sweep", _settings(), max_parallel=1, echo=False)
    assert [e for e, _ in _events(tmp_path / "sweep")] == ["start", "end"] * 4


def test_cells_share_one_backend_per_endpoint_and_so_one_rate_limit(grid, tmp_path):
    spec = GridSpec.load(grid)
    pool = BackendPool(_settings())
    nip0, debate1 = (
        open_cell(c, tmp_path / "s", _settings(), backends=pool)
        for c in (spec.cells()[0], spec.cells()[3])
    )
    assert nip0.session.agents["verifier"].backend is debate1.session.agents["verifier"].backend


def test_a_sweep_directory_refuses_another_grid(grid, tmp_path):
    spec = GridSpec.load(grid)
    run_sweep(spec, tmp_path / "sweep", _settings(), echo=False)
    spec.axes["seed"] = [0, 1, 2]
    with pytest.raises(SweepMismatchError):
        run_sweep(spec, tmp_path / "sweep", _settings(), echo=False)


def test_status_and_compare_read_the_sweep_directory(grid, tmp_path, capsys):
    run_sweep(GridSpec.load(grid), tmp_path / "sweep", _settings(), echo=False)
    assert {(c.name, c.stage) for c in sweep_status(tmp_path / "sweep")} == {
        (name, "done") for name in ("nip_seed0", "nip_seed1", "debate_seed0", "debate_seed1")
    }
    table = comparison_table([tmp_path / "sweep"])
    assert set(table["series"]) == {"nip", "debate"} and set(table["runs"]) == {2}
    assert main(["sweep", "status", str(tmp_path / "sweep")]) == 0
    assert "debate_seed1" in capsys.readouterr().out


def _wait_for(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.05)


@pytest.mark.timeout(240)
def test_a_sweep_killed_with_sigkill_resumes_its_unfinished_cells(grid, tmp_path):
    straight = tmp_path / "straight"
    run_sweep(GridSpec.load(grid), straight, _settings(dummy_latency_s=0.1), echo=False)
    killed = tmp_path / "killed"
    command = [sys.executable, "-m", "nip.cli", "sweep", str(grid), "--sweep-dir", str(killed)]
    command += ["--quiet", "--dummy-latency", "0.1", "--max-parallel", "2"]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        _wait_for(lambda: (killed / "cells/nip_seed0/state.json").exists(), 120)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    assert {c.stage for c in sweep_status(killed)} != {"done"}
    resumed = subprocess.run(command, capture_output=True, env=env, timeout=180)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    assert {c.stage for c in sweep_status(killed)} == {"done"}
    for path in sorted(straight.glob("cells/*/rollouts/*.jsonl")):
        relative = path.relative_to(straight)
        assert (killed / relative).read_text() == path.read_text(), relative


def test_the_shipped_paper_grid_is_the_six_presets_times_three_seeds():
    cells = GridSpec.load("paper-ei").cells()
    assert len(cells) == 18
    assert {c.hyper_params.interaction_protocol for c in cells} == {
        "nip",
        "adp",
        "debate",
        "mnip",
        "merlin_arthur",
        "solo_verifier",
    }
    assert {c.hyper_params.seed for c in cells} == {0, 1, 2}
    assert cells[0].name == "nip-ei_seed0"
    assert cells[0].hyper_params.nip_protocol.max_message_rounds == 9  # the preset's own


def test_the_sweep_monitor_shows_each_cell_and_opens_a_cells_dashboard(grid, tmp_path):
    from nip.widgets import RunMonitor, SweepMonitor

    run_sweep(GridSpec.load(grid), tmp_path / "sweep", _settings(), max_parallel=1, echo=False)
    monitor = SweepMonitor(tmp_path / "sweep", start=False)
    assert monitor.finished and "4/4 cells done" in monitor.header.value
    assert "debate_seed1" in monitor.table.value
    monitor.chooser.value = "nip_seed1"  # a click on the cell's name
    (cell,) = monitor.cell_box.children
    assert isinstance(cell, RunMonitor) and cell.snapshot.finished
    monitor.close()


def test_nip_sweep_dry_run_prints_each_cell_and_the_total_and_writes_nothing(
    grid, tmp_path, capsys
):
    assert main(["sweep", str(grid), "--sweep-dir", str(tmp_path / "s"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "nip_seed0" in out and "debate_seed1" in out and "total:" in out
    assert not (tmp_path / "s").exists()


def test_nip_sweep_resume_runs_the_grid_its_directory_was_made_from(grid, tmp_path, capsys):
    from nip.sweeps.run import prepare_sweep

    prepare_sweep(GridSpec.load(grid), tmp_path / "s")  # as a sweep killed before any cell ran
    assert main(["sweep", "resume", str(tmp_path / "s"), "--quiet"]) == 0
    assert {c.stage for c in sweep_status(tmp_path / "s")} == {"done"}
    assert "4/4 cells done" in capsys.readouterr().out


def test_compare_over_seeds_gives_the_mean_of_the_seeds_and_a_t_interval(grid, tmp_path):
    from nip.viz.intervals import seed_interval

    run_sweep(GridSpec.load(grid), tmp_path / "sweep", _settings(), echo=False)
    index = ["series", "iteration"]
    pooled = comparison_table([tmp_path / "sweep"]).set_index(index)
    seeds = comparison_table([tmp_path / "sweep"], over_seeds=True).set_index(index)
    single = comparison_table([tmp_path / "sweep"], pool_seeds=False).set_index(index)
    for protocol in ("nip", "debate"):
        values = [single.loc[(f"{protocol} seed {s}", 1), "accuracy"] for s in (0, 1)]
        assert seeds.loc[(protocol, 1), "accuracy"] == pytest.approx(sum(values) / 2)
        low = seed_interval(values)[1]
        assert seeds.loc[(protocol, 1), "ci_low"] == pytest.approx(low)
        assert pooled.loc[(protocol, 1), "runs"] == 2


def test_a_cell_that_fails_does_not_stop_the_others(grid, tmp_path):
    spec = GridSpec.load(grid)
    cells = spec.cells()
    run_dir = cells[1].run_dir(tmp_path / "sweep")
    run_dir.mkdir(parents=True)
    (run_dir / "state.json").write_text("{not json")  # a cell whose state is damaged
    outcomes = run_sweep(spec, tmp_path / "sweep", _settings(), echo=False)
    assert outcomes[cells[1].name].startswith("NotARunDirectoryError")
    assert [o for n, o in outcomes.items() if n != cells[1].name] == ["done"] * 3
    assert ("error", cells[1].name) in _events(tmp_path / "sweep")
