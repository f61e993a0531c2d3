"""A sweep on a local Ray cluster (2 CPUs, started by the test): each cell a Ray task, and a
cell whose worker is killed mid-run is retried by Ray and resumes from its run directory."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from nip.cli import main
from nip.experiments.sweep import GridSpec, run_sweep, sweep_status
from nip.experiments.sweep_ray import parse_resources
from nip.settings import ExperimentSettings

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
@pytest.mark.timeout(600)
def test_a_sweep_on_a_local_ray_cluster_survives_a_killed_worker(
    dummy_params, tmp_path, monkeypatch
):
    ray = pytest.importorskip("ray")
    # A loaded machine starts the node's agents slowly (15-20 s on a busy 2-core machine).
    # Ray 2.60's raylet waits a fixed 15 s for the dashboard agent's port file and then
    # aborts (the node "timed out during startup": the test skips, saying so); later Ray
    # versions wait RAY_agent_register_timeout_ms instead.
    monkeypatch.setenv("RAY_agent_register_timeout_ms", "120000")
    from nip.experiments.sweep_ray import run_sweep_ray

    dummy_params().save(tmp_path / "base.yaml")
    (tmp_path / "grid.yaml").write_text(GRID)
    spec = GridSpec.load(tmp_path / "grid.yaml")
    settings = ExperimentSettings(show_progress=False, wandb_mode="disabled", dummy_latency_s=0.1)
    run_sweep(spec, tmp_path / "straight", settings, echo=False)
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as error:  # a node's agents too slow to start on an overloaded machine
        if "timed out during startup" not in str(error):
            raise
        pytest.skip(f"Ray could not start a local node here: {error}")
    try:
        outcomes: dict[str, str] = {}
        sweep_dir = tmp_path / "ray"
        thread = threading.Thread(
            target=lambda: outcomes.update(
                run_sweep_ray(spec, sweep_dir, settings, address=None, echo=False)
            ),
            daemon=True,
        )
        thread.start()
        cell = sweep_dir / "cells" / "nip_seed0"
        deadline = time.monotonic() + 300
        while not (cell / "state.json").exists():  # the cell is under way
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.05)
        os.kill(int((cell / "ray_attempts.txt").read_text().split()[0]), signal.SIGKILL)
        thread.join(timeout=400)
        assert not thread.is_alive()
    finally:
        ray.shutdown()
    assert outcomes == {c.name: "done" for c in spec.cells()}
    assert len((cell / "ray_attempts.txt").read_text().split()) == 2  # Ray ran it again
    assert {c.stage for c in sweep_status(sweep_dir)} == {"done"}
    straight = tmp_path / "straight"
    for path in sorted(straight.glob("cells/*/rollouts/*.jsonl")):
        relative = path.relative_to(straight)
        assert (sweep_dir / relative).read_text() == path.read_text(), relative
    assert Path(sweep_dir / "sweep.json").exists()
