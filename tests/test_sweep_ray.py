"""A sweep on a local Ray cluster (``--ray local``: started for the sweep, stopped after it):
each cell a Ray task, and a cell whose worker is killed mid-run is retried by Ray and resumes
from its run directory."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from nip.cli import main
from nip.runs.sweep_dir import sweep_status
from nip.settings import ExperimentSettings
from nip.sweeps.ray import parse_resources
from nip.sweeps.run import GridSpec, run_sweep

GRID = """
base: base.yaml
axes:
  interaction_protocol: [nip, debate]
  seed: [0, 1]
"""


def test_cell_resources_become_ray_task_options():
    assert parse_resources("cpu=1,gpu=0.5,memory_gb=2,node_a=1") == {
        "num_cpus": 1.0,
        "num_gpus": 0.5,
        "memory": 2 * 2**30,
        "resources": {"node_a": 1.0},
    }


def test_without_ray_the_ray_option_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    (tmp_path / "grid.yaml").write_text("base: quickstart\naxes:\n  seed: [0]\n")
    code = main(
        ["sweep", str(tmp_path / "grid.yaml"), "--sweep-dir", str(tmp_path / "s"), "--ray", "auto"]
    )
    error = capsys.readouterr().err.strip()
    assert code == 2 and len(error.splitlines()) == 1 and "pip install 'nip[ray]'" in error


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_sweep_on_a_local_ray_cluster_survives_a_killed_worker(dummy_params, tmp_path):
    """``--ray local``'s cluster comes up on a loaded 2-core machine too (Ray's own
    ``ray.init()`` did not: the test skipped there); it is stopped when the sweep ends."""
    pytest.importorskip("ray")  # the one reason to skip: Ray is not installed
    from nip.sweeps.ray import run_sweep_ray

    dummy_params().save(tmp_path / "base.yaml")
    (tmp_path / "grid.yaml").write_text(GRID)
    spec = GridSpec.load(tmp_path / "grid.yaml")
    settings = ExperimentSettings(show_progress=False, wandb_mode="disabled", dummy_latency_s=0.1)
    run_sweep(spec, tmp_path / "straight", settings, echo=False)
    sweep_dir = tmp_path / "ray"
    outcomes: dict[str, str] = {}
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            outcomes.update(run_sweep_ray(spec, sweep_dir, settings, address="local", echo=False))
        except BaseException as error:  # shown by the assertions below
            errors.append(error)

    thread = threading.Thread(target=sweep, daemon=True)
    thread.start()
    cell = sweep_dir / "cells" / "nip_seed0"
    deadline = time.monotonic() + 420  # the cluster's start (up to 300 s) and the cell's
    while not (cell / "state.json").exists():  # the cell is under way
        assert time.monotonic() < deadline and thread.is_alive(), errors
        time.sleep(0.05)
    os.kill(int((cell / "ray_attempts.txt").read_text().split()[0]), signal.SIGKILL)
    thread.join(timeout=400)
    assert not thread.is_alive() and not errors, errors
    assert outcomes == {c.name: "done" for c in spec.cells()}
    assert len((cell / "ray_attempts.txt").read_text().split()) == 2  # Ray ran it again
    assert {c.stage for c in sweep_status(sweep_dir)} == {"done"}
    straight = tmp_path / "straight"
    for path in sorted(straight.glob("cells/*/rollouts/*.jsonl")):
        relative = path.relative_to(straight)
        assert (sweep_dir / relative).read_text() == path.read_text(), relative
    assert Path(sweep_dir / "sweep.json").exists()
    worker = int((cell / "ray_attempts.txt").read_text().split()[1])
    assert _gone(worker, within_s=60)  # the cluster stopped with the sweep, its workers too


def _gone(pid: int, within_s: float) -> bool:
    """Whether process ``pid`` ends (or is a zombie nobody reaps) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        if stat.rpartition(")")[2].split()[0] == "Z":
            return True
        time.sleep(0.2)
    return False
