"""``nip sweep GRID --ray ADDRESS --serve``: one server slot per Ray node, cells beside it.

The placement of cells over slots is a pure function, tested on its own. The slow test runs a
2-cell grid on a local Ray cluster of two nodes (the machine's own processes: Ray's test
cluster), removes the node of one cell while that cell is paused between stages, and checks
that its slot's server started again on the other node and the cell resumed beside it.
"""

from __future__ import annotations

import json
import threading

import pytest
import yaml

from nip.cli import main
from nip.sweeps.ray_servers import _fits, place_cells
from tests.doubles.processes import processes_with, wait_until

WAIT_S = 240.0


def test_cells_are_spread_evenly_over_one_slot_per_node():
    placement = place_cells({f"c{i}": {"qwen"} for i in range(18)}, nodes=2)
    assert {slot: len(cells) for slot, cells in placement.slots.items()} == {
        "slot-0": 9,
        "slot-1": 9,
    }
    assert placement.slots["slot-0"][:3] == ["c0", "c2", "c4"]  # alternating: work is mixed
    assert placement.models == {"slot-0": ["qwen"], "slot-1": ["qwen"]}


def test_a_node_serves_one_base_model_where_the_grid_allows():
    placement = place_cells({"a": {"7b"}, "b": {"14b"}, "c": {"7b"}, "d": {"14b"}}, nodes=2)
    assert placement.models == {"slot-0": ["7b"], "slot-1": ["14b"]}
    assert placement.slot_of("c") == "slot-0" and placement.slot_of("d") == "slot-1"


def test_a_resumed_sweep_keeps_each_cell_beside_the_storage_of_its_adapters():
    saved = {"a": "slot-1", "b": "slot-3"}  # the cluster had four nodes before
    placement = place_cells({"a": {"m"}, "b": {"m"}, "c": {"m"}}, nodes=2, saved=saved)
    assert placement.slot_of("a") == "slot-1" and placement.slot_of("b") == "slot-3"
    assert placement.slot_of("c") == "slot-0"


def test_a_cell_without_self_hosted_agents_gets_no_slot():
    placement = place_cells({"api": set(), "hosted": {"m"}}, nodes=3)
    assert placement.slot_of("api") is None and placement.slots == {"slot-0": ["hosted"]}


def test_a_slot_needs_a_live_node_with_the_servers_resources():
    node = {"Alive": True, "Resources": {"CPU": 8.0, "GPU": 1.0, "memory": 2**34}}
    assert _fits(node, {"num_gpus": 1.0})
    assert not _fits(node, {"num_gpus": 2.0})
    assert not _fits({**node, "Alive": False}, {"num_cpus": 1.0})
    assert not _fits(node, {"resources": {"a100": 1.0}})


def test_bad_server_resources_are_one_line_exit_two_before_ray_starts(tmp_path, capsys):
    code = main(
        [
            "sweep",
            "paper-ei",
            "--sweep-dir",
            str(tmp_path / "s"),
            "--ray",
            "auto",
            "--serve",
            "--server-resources",
            "gpu",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--cell-resources" not in err
    assert "gpu" in err and not (tmp_path / "s").exists()


# ------------------------------------------------------------------ slow: a Ray cluster
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_node_that_dies_takes_its_server_and_its_cell_resumes_beside_the_slots_new_node(
    tmp_path, monkeypatch
):
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from nip.runs.control import read_status, request
    from nip.settings import ExperimentSettings
    from nip.sweeps.grid import GridSpec
    from nip.sweeps.ray_servers import run_sweep_ray_served
    from tests.doubles.tiny_model import build_tiny_chat_model

    # The nodes' dashboard agents start without rfc3987_syntax (tests/conftest.py: 1 s of CPU
    # instead of 4.5), so Ray 2.60's fixed 15 s wait for them holds on a loaded 2-core machine
    # too; as in nip's own local cluster (nip.sweeps.ray_cluster), the raylet's wait for its
    # agents is raised.
    monkeypatch.setenv("RAY_agent_register_timeout_ms", "300000")
    model = str(build_tiny_chat_model(tmp_path / "tiny-chat", max_positions=8192))
    agent = {
        "model_provider": "SelfHosted",
        "model_name": model,
        "max_response_words": 8,
        "num_invalid_generation_retries": 0,
    }
    base = {
        "interaction_protocol": "nip",
        "nip_protocol": {"max_message_rounds": 3},
        "rl": {"num_iterations": 1, "rollouts_per_iteration": 2},
        "text_rl": {"test_scheme": "none"},
        "agents": {"prover": agent, "verifier": agent},
    }
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "grid.yaml").write_text("base: base.yaml\naxes:\n  seed: [0, 1]\n")
    (tmp_path / "server.yaml").write_text("engine: transformers\ndevice: cpu\n")
    sweep = tmp_path / "sweep"
    for seed in (0, 1):  # each cell pauses after its first stage, until told to go on
        request(sweep / "cells" / f"seed{seed}", "pause")
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 4, "include_dashboard": False}
    )
    worker = cluster.add_node(num_cpus=2, include_dashboard=False)
    cluster.wait_for_nodes()
    outcomes: dict[str, str] = {}
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        settings = ExperimentSettings(
            show_progress=False,
            serve=True,
            serve_config=tmp_path / "server.yaml",
            cache="off",
            wandb_mode="disabled",
        )
        spec = GridSpec.load(tmp_path / "grid.yaml")
        thread = threading.Thread(
            target=lambda: outcomes.update(
                run_sweep_ray_served(
                    spec,
                    sweep,
                    settings,
                    address=None,
                    resources="cpu=1",
                    server_resources="cpu=1",
                    echo=False,
                )
            ),
            daemon=True,
        )
        thread.start()
        cells = {seed: sweep / "cells" / f"seed{seed}" for seed in (0, 1)}
        wait_until(
            lambda: all(read_status(c).get("status") == "paused" for c in cells.values()),
            "both cells paused after their first stage",
            WAIT_S,
        )
        placement = json.loads((sweep / "serve" / "placement.json").read_text())
        assert sorted(len(c) for c in placement["slots"].values()) == [1, 1]  # one per node
        on_worker = {}
        for slot, slot_cells in placement["slots"].items():
            node = json.loads((sweep / "serve" / slot / "node.json").read_text())["node_id"]
            if node == worker.node_id:
                on_worker = {"slot": slot, "cell": slot_cells[0]}
        assert on_worker, "no slot was placed on the worker node"
        moved = sweep / "cells" / on_worker["cell"]
        cluster.remove_node(worker)  # the node dies: its actor, its server, its cell's worker
        for cell in cells.values():
            request(cell, "run")
        thread.join(WAIT_S * 2)
        assert not thread.is_alive()
        assert outcomes == {"seed0": "done", "seed1": "done"}
        attempts = (moved / "ray_attempts.txt").read_text().split()
        assert len(attempts) == 2  # run again, from its run directory, elsewhere
        slot_node = json.loads((sweep / "serve" / on_worker["slot"] / "node.json").read_text())
        assert slot_node["node_id"] != worker.node_id  # the slot's server moved with it
        assert json.loads((moved / "state.json").read_text())["stage"] == "done"
    finally:
        ray.shutdown()
        cluster.shutdown()
    gone = lambda: not processes_with("--owner-pid", str(sweep))  # noqa: E731
    wait_until(gone, "every server gone", 120)
