"""Running a sweep on a Ray cluster: each cell a Ray task, results in the sweep directory.

::

    run_sweep_ray(GridSpec.load("grid.yaml"), "/shared/sweeps/ei", address="auto",
                  resources="cpu=1,gpu=1")

A task whose worker or node dies is retried (``max_retries``) and resumes from the cell's run
directory like ``nip resume``. Every node must see the sweep directory (and the grid's config
files) at the same path. Ray is the optional extra ``nip[ray]``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nip.errors import InvalidParameterError, MissingExtraError, NipError
from nip.extras import needs
from nip.runs.ownership import owning
from nip.settings import ExperimentSettings
from nip.sweeps.grid import GridSpec
from nip.utils.notices import labelled

__all__ = [
    "RayClusterError",
    "RayNotInstalledError",
    "joined_cluster",
    "parse_resources",
    "run_sweep_ray",
]

#: ``--ray`` was asked for and Ray is not installed (the extras table's one line).
RayNotInstalledError = MissingExtraError


#: How long a retried cell waits for its folder's lock: a lost node's lock lasts until the
#: shared file system's lease for it ends (NFSv4: 90 s by default).
LOST_NODE_WAIT_S = 180.0


class RayClusterError(NipError):
    """The Ray cluster asked for cannot be reached."""


def _ray():
    with needs("ray"):
        import ray
    return ray


def parse_resources(
    text: str | dict[str, float] | None, option: str = "--cell-resources"
) -> dict[str, Any]:
    """``"cpu=1,gpu=1,memory_gb=8,custom=2"`` as Ray task options (an :class:`InvalidParameterError`
    naming ``option`` for an entry not ``NAME=NUMBER``)."""
    if isinstance(text, dict):
        items = text.items()
    else:
        items = []
        for entry in filter(None, (text or "").split(",")):
            name, sep, value = entry.partition("=")
            try:
                items.append((name.strip(), float(value)))
            except ValueError:
                sep = ""
            if not sep:
                raise InvalidParameterError(
                    option, text, "NAME=NUMBER,... e.g. cpu=1,gpu=1"
                ) from None
    options: dict[str, Any] = {}
    custom: dict[str, float] = {}
    for name, value in items:
        if name in ("cpu", "gpu"):
            options[f"num_{name}s"] = value
        elif name == "memory_gb":
            options["memory"] = int(value * 2**30)
        else:
            custom[name] = value
    if custom:
        options["resources"] = custom
    return options


def _run_cell(
    grid: dict[str, Any],
    folder: str | None,
    cell_name: str,
    sweep_dir: str,
    settings: dict[str, Any],
) -> str:
    """The Ray task: train one cell to its end from whatever its run directory holds."""
    from nip.sweeps.run import open_cell

    spec = GridSpec.from_dict(grid, folder=Path(folder) if folder else None)
    cell = next(c for c in spec.cells() if c.name == cell_name)
    run_dir = cell.run_dir(sweep_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    attempts = run_dir / "ray_attempts.txt"  # one line per attempt: its worker's pid
    with attempts.open("a", encoding="utf-8") as file:
        file.write(f"{os.getpid()}\n")
    # A retry after a lost node waits for that node's lock to expire (an NFSv4 lease).
    with labelled(cell_name), owning(run_dir, "a sweep cell on Ray", wait_s=LOST_NODE_WAIT_S):
        trainer = open_cell(cell, sweep_dir, ExperimentSettings(**settings))
        if not trainer.finished:
            trainer.train()
    return "done" if trainer.finished else "stopped"


@contextmanager
def joined_cluster(address: str | None) -> Iterator[Any]:
    """Ray, with this process in the cluster at ``address`` for the block (``auto``; ``local``: a
    new one here, stopped when the block ends; ``ray://host:10001``; None: the one initialised).

    Raises:
        RayNotInstalledError: Ray is not installed.
        RayClusterError: The cluster cannot be started or reached.
    """
    ray = _ray()
    with ExitStack() as stack:
        if address == "local" and not ray.is_initialized():
            from nip.sweeps.ray_cluster import local_ray_cluster

            try:
                stack.enter_context(local_ray_cluster())  # comes up on a busy machine too
            except RuntimeError as error:
                raise RayClusterError(f"could not start a Ray cluster here: {error}") from None
        elif address is not None and not ray.is_initialized():
            try:
                ray.init(address=address, include_dashboard=False)
            except (ConnectionError, RuntimeError) as error:
                raise RayClusterError(
                    f"could not join the Ray cluster at {address!r} ({error}); start one with "
                    "`ray start --head`, or use --ray local for a cluster on this machine"
                ) from None
        yield ray


def run_sweep_ray(
    spec: GridSpec,
    sweep_dir: str | Path,
    settings: ExperimentSettings | None = None,
    *,
    address: str | None = "auto",
    resources: str | dict[str, float] | None = "cpu=1",
    max_retries: int = 3,
    echo: bool = True,
) -> dict[str, str]:
    """Run every unfinished cell as a Ray task (``resources``: each task's, ``cpu=1,gpu=1``) on the
    cluster at ``address`` (:func:`joined_cluster`); a cell whose worker or node died runs again,
    resuming, up to ``max_retries`` times. Returns each cell's outcome. ``sweep_dir`` must be on
    storage every node sees at this path.

    Raises:
        RayNotInstalledError: Ray is not installed (``pip install 'nip[ray]'``).
        NipError: A cell cannot start (``check_cells``): no cell is run.
        DirectoryInUseError: Another process runs a sweep in ``sweep_dir``.
    """
    ray = _ray()
    from nip.sweeps.run import cell_settings, prepare_sweep

    sweep_dir = Path(sweep_dir).resolve()
    cells = prepare_sweep(spec, sweep_dir, settings)  # every cell checked first
    settings = cell_settings(spec, settings, parallel=2)
    plain = {k: v for k, v in asdict(settings).items() if k != "run_dir"}
    with owning(sweep_dir, "a sweep on Ray"), joined_cluster(address):
        task = ray.remote(max_retries=max_retries, retry_exceptions=False)(_run_cell)
        options = parse_resources(resources)
        folder = str(spec.folder) if spec.folder else None
        refs = {
            cell.name: task.options(**options).remote(
                spec.to_dict(), folder, cell.name, str(sweep_dir), plain
            )
            for cell in cells
        }
        outcomes: dict[str, str] = {}
        for name, ref in refs.items():
            try:
                outcomes[name] = ray.get(ref)
            except Exception as error:  # a cell that failed every retry; the others go on
                outcomes[name] = f"{type(error).__name__}: {error}"
            if echo:
                print(f"{name}: {outcomes[name]}")
        return outcomes
