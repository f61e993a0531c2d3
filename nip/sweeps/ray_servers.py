"""A sweep on a Ray cluster that owns its servers (``nip sweep GRID --ray ADDRESS --serve``).

::

    run_sweep_ray_served(GridSpec.load("open-ei"), "/shared/sweeps/open-ei",
                         ExperimentSettings(serve=True), address="auto",
                         server_resources="gpu=1")

One server slot per node with ``server_resources``: a Ray actor (:class:`NodeServers`) running
the ``nip serve`` of each base model its cells use. Each cell (placed by :func:`place_cells`,
saved in ``serve/placement.json``) runs as a task pinned to its slot's node. Slot storage is on
the sweep directory, so when a node dies Ray restarts the actor elsewhere, every adapter is
served again and the cells resume; when the sweep ends or its driver dies, the servers go too.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nip.runs.sweep_dir import SERVE  # the slots' storage and the cells' slots
from nip.settings import ExperimentSettings
from nip.sweeps.grid import GridSpec
from nip.sweeps.ray import RayClusterError

__all__ = ["NodeServers", "Placement", "place_cells", "run_sweep_ray_served"]

PLACEMENT_FILE = "placement.json"
#: In a slot's storage: the node its servers run on now, and their URLs there.
NODE_FILE = "node.json"


@dataclass
class Placement:
    """Which server slot each cell runs beside (``slots``: ``slot-0``: ``["nip-ei_seed0", ...]``),
    and which base models each slot serves (``models``, one server each)."""

    slots: dict[str, list[str]] = field(default_factory=dict)
    models: dict[str, list[str]] = field(default_factory=dict)

    def slot_of(self, cell: str) -> str | None:
        """The slot of ``cell``; None for a cell without self-hosted agents."""
        return next((slot for slot, cells in self.slots.items() if cell in cells), None)


def place_cells(
    cell_models: Mapping[str, Collection[str]],
    nodes: int,
    saved: Mapping[str, str] | None = None,
) -> Placement:
    """Spread the cells over one slot per node (``slot-0`` ... ``slot-{nodes-1}``).

    A cell keeps its ``saved`` slot; each other goes, in order, to a slot with room (at most
    ``ceil(cells / slots)``), preferring one that needs no second base model, then the emptiest.
    A cell without base models in ``cell_models`` (no self-hosted agents) gets no slot.
    """
    saved = dict(saved or {})
    names = [f"slot-{i}" for i in range(max(1, nodes))]
    names += sorted({s for s in saved.values() if s not in names}, key=_slot_number)
    slots: dict[str, list[str]] = {name: [] for name in names}
    models: dict[str, set[str]] = {name: set() for name in names}
    served = {cell: set(found) for cell, found in cell_models.items() if found}
    room = math.ceil(len(served) / len(names)) if served else 0
    for cell, needed in served.items():
        if cell in saved:
            slots[saved[cell]].append(cell)
            models[saved[cell]] |= needed
    for cell, needed in served.items():
        if cell in saved:
            continue
        open_slots = [s for s in names if len(slots[s]) < room] or names
        best = min(
            open_slots,
            key=lambda s: (
                bool(models[s] and needed - models[s]),  # a second model's server there
                len(slots[s]),
                _slot_number(s),
            ),
        )
        slots[best].append(cell)
        models[best] |= needed
    return Placement(
        slots={s: cells for s, cells in slots.items() if cells},
        models={s: sorted(models[s]) for s, cells in slots.items() if cells},
    )


def _slot_number(slot: str) -> int:
    return int(slot.rsplit("-", 1)[-1])


class NodeServers:
    """The Ray actor of one server slot: the ``nip serve`` of each of ``models`` on its node, with
    storage under ``storage`` (shared), until :meth:`stop`; each start writes the node and URLs to
    the slot's ``node.json``. ``settings``: :class:`~nip.settings.ExperimentSettings` as a dict."""

    def __init__(self, models: list[str], storage: str, settings: dict[str, Any]):
        import ray

        from nip.server.run_servers import serving_models

        self._stack = contextlib.ExitStack()
        quiet = ExperimentSettings(**{**settings, "show_progress": False})
        served = self._stack.enter_context(serving_models(models, quiet, storage, echo=False))
        self.servers = served.servers
        self.node_id = ray.get_runtime_context().get_node_id()
        where = {"node_id": self.node_id, "servers": self.servers, "started": time.time()}
        (Path(storage) / NODE_FILE).write_text(json.dumps(where), encoding="utf-8")

    def address(self) -> tuple[str, dict[str, str]]:
        """(the node it runs on, each model's server URL on that node's loopback)."""
        return self.node_id, dict(self.servers)

    def stop(self) -> None:
        """Stop its servers (they also stop when the actor's process ends)."""
        self._stack.close()


def _load_saved(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {cell: slot for slot, cells in data.get("slots", {}).items() for cell in cells}


def _fits(node: Mapping[str, Any], options: Mapping[str, Any]) -> bool:
    """Whether a node's total resources hold one server slot."""
    have = node.get("Resources", {})
    wants = {
        "CPU": options.get("num_cpus", 0),
        "GPU": options.get("num_gpus", 0),
        "memory": options.get("memory", 0),
        **options.get("resources", {}),
    }
    return bool(node.get("Alive")) and all(have.get(k, 0) >= v for k, v in wants.items() if v)


def run_sweep_ray_served(
    spec: GridSpec,
    sweep_dir: str | Path,
    settings: ExperimentSettings | None = None,
    *,
    address: str | None = "auto",
    resources: str | dict[str, float] | None = "cpu=1",
    server_resources: str | dict[str, float] | None = "gpu=1",
    max_retries: int = 3,
    echo: bool = True,
) -> dict[str, str]:
    """Run every unfinished cell as a Ray task beside a server of its base model; returns
    each cell's outcome (``done``, ``stopped``, or the error that ended it).

    Args as :func:`~nip.sweeps.ray.run_sweep_ray` (``resources``: each cell task's, its server
    holding the GPUs), and ``server_resources``: each server slot's (``gpu=1``; ``cpu=1`` on a CPU
    cluster), one slot per node that has them.

    Raises:
        InvalidParameterError: A resources string is not ``NAME=NUMBER,...``.
        RayClusterError: The cluster cannot be reached, or no node has ``server_resources``.
        RayNotInstalledError: Ray is not installed.
    """
    from nip.server.run_servers import served_models
    from nip.sweeps.ray import _run_cell, joined_cluster, parse_resources
    from nip.sweeps.run import cell_settings, prepare_sweep

    cell_options = parse_resources(resources)  # bad input refused before anything starts
    server_options = parse_resources(server_resources, "--server-resources")
    with joined_cluster(address) as ray:  # a local cluster is stopped when the sweep ends
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        sweep_dir = Path(sweep_dir).resolve()
        cells = prepare_sweep(spec, sweep_dir)
        settings = cell_settings(spec, settings, parallel=2)
        plain = {k: v for k, v in asdict(settings).items() if k != "run_dir"}
        nodes = [node for node in ray.nodes() if _fits(node, server_options)]
        if not nodes:
            raise RayClusterError(
                f"no node of the Ray cluster has the resources of a server slot "
                f"({server_resources}); see --server-resources"
            )
        say = print if echo else (lambda *_: None)
        placement_path = sweep_dir / SERVE / PLACEMENT_FILE
        placement = place_cells(
            {c.name: served_models([c.hyper_params]) for c in cells},
            len(nodes),
            _load_saved(placement_path),
        )
        placement_path.parent.mkdir(parents=True, exist_ok=True)
        placement_path.write_text(json.dumps(asdict(placement), indent=1), encoding="utf-8")
        actor_class = ray.remote(NodeServers)
        actors = {}
        for index, (slot, models) in enumerate(placement.models.items()):
            node = nodes[index % len(nodes)]["NodeID"]
            actors[slot] = actor_class.options(
                **server_options,
                max_restarts=-1,  # a node that dies: the slot starts again on another node
                max_task_retries=-1,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True),
            ).remote(models, str(sweep_dir / SERVE / slot), plain)
            say(f"{slot}: nip serve for {', '.join(models)} ({len(placement.slots[slot])} cells)")
        task = ray.remote(max_retries=0)(_run_cell)
        folder = str(spec.folder) if spec.folder else None
        wait_s = settings.server_ready_timeout_s + 60
        running: dict[Any, str] = {}
        by_name = {cell.name: cell for cell in cells}
        tries = dict.fromkeys(by_name, 0)
        outcomes: dict[str, str] = {}

        def submit(name: str) -> None:
            options, cell_plain = dict(cell_options), plain
            slot = placement.slot_of(name)
            if slot is not None:
                node, servers = ray.get(actors[slot].address.remote(), timeout=wait_s)
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
                cell_plain = {**plain, "serve": True, "servers": servers}
            ref = task.options(**options).remote(
                spec.to_dict(), folder, name, str(sweep_dir), cell_plain
            )
            running[ref] = name

        try:
            for name in by_name:
                try:
                    submit(name)
                except Exception as error:  # its slot's servers never got ready
                    outcomes[name] = f"{type(error).__name__}: {error}"
            while running:
                (ref,), _ = ray.wait(list(running), num_returns=1)
                name = running.pop(ref)
                try:
                    outcomes[name] = ray.get(ref)
                except ray.exceptions.RayTaskError as error:  # the cell's own error
                    cause = error.cause if error.cause is not None else error
                    outcomes[name] = f"{type(cause).__name__}: {cause}"
                except ray.exceptions.RayError as error:  # its node or worker went away
                    tries[name] += 1
                    if tries[name] > max_retries:
                        outcomes[name] = f"{type(error).__name__}: {error}"
                    else:
                        say(f"{name}: its node or worker went away; resuming it beside its server")
                        try:
                            submit(name)
                        except Exception as again:
                            outcomes[name] = f"{type(again).__name__}: {again}"
                        continue
                say(f"{name}: {outcomes[name]}")
        finally:
            for actor in actors.values():
                with contextlib.suppress(Exception):
                    ray.get(actor.stop.remote(), timeout=60)
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
        return {name: outcomes.get(name, "not run") for name in by_name}
