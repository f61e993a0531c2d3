"""Running a sweep: every cell of a grid as a resumable run, several at once, on one machine.

::

    spec = GridSpec.load("grid.yaml")
    print(estimate_sweep(spec))                     # nip sweep grid.yaml --dry-run
    run_sweep(spec, "runs/sweeps/ei", max_parallel=4)

The sweep's directory holds ``sweep.json`` (the grid and its cells), ``events.jsonl`` (when
each cell started and ended) and ``cells/<name>/``, each an ordinary run directory: ``nip
resume``, ``nip control`` and ``nip compare`` work on a cell as on any run. Running the same
grid again into the same directory resumes every unfinished cell from its own state and skips
the finished ones, so a sweep killed at any point (even ``kill -9``) loses nothing.

Cells run as asyncio tasks in one process, at most ``max_parallel`` at once, and share one
:class:`~nip.backends.pool.BackendPool`: agents of every cell that use the same endpoint share
one backend, so one concurrency limit per provider (``max_concurrency``) holds for the whole
grid, and its retries back off together. The cells' W&B runs share a group named after the
sweep.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nip._version import __version__
from nip.backends.pool import BackendPool
from nip.errors import IncompatibleParametersError
from nip.experiments.sweep_grid import (
    MANIFEST,
    GridSpec,
    SweepCell,
    default_sweep_dir,
    grid_cells,
    is_sweep_dir,
    sweep_run_dirs,
)
from nip.runs.run_dir import RunDirectory
from nip.settings import ExperimentSettings
from nip.training.trainer import PureTextEiTrainer, build_trainer
from nip.utils.files import read_growing_jsonl
from nip.utils.sync import run_sync

__all__ = [
    "CellStatus",
    "SweepMismatchError",
    "cell_errors",
    "cell_status",
    "default_sweep_dir",
    "is_sweep_dir",
    "open_cell",
    "prepare_sweep",
    "run_sweep",
    "run_sweep_async",
    "sweep_run_dirs",
    "sweep_status",
]


class SweepMismatchError(IncompatibleParametersError):
    """The sweep directory holds another grid."""


def prepare_sweep(spec: GridSpec, sweep_dir: str | Path) -> list[SweepCell]:
    """Expand the grid and write (or check) the manifest; returns the cells.

    Raises:
        SweepMismatchError: ``sweep_dir`` already holds a sweep with other cells.
    """
    cells = spec.cells()
    directory = RunDirectory(sweep_dir)
    records = grid_cells(cells)
    if directory.exists(MANIFEST):
        saved = directory.read_json(MANIFEST)
        if [c["name"] for c in saved["cells"]] != [c["name"] for c in records]:
            raise SweepMismatchError(
                f"{directory.path} holds the sweep {saved.get('name')!r} with other cells; "
                "use another directory (--sweep-dir)"
            )
        for cell in cells:  # a cell's parameters are checked when it is resumed
            run_dir = cell.run_dir(sweep_dir)
            if (run_dir / "hyper_params.json").exists():
                _check_same(cell, run_dir)
        return cells
    directory.write_json(
        MANIFEST,
        {
            "name": spec.name,
            "grid": spec.to_dict(),
            "cells": records,
            "folder": str(spec.folder) if spec.folder else None,
            "nip_version": __version__,
            "created": time.time(),
        },
    )
    return cells


def _check_same(cell: SweepCell, run_dir: Path) -> None:
    from nip.parameters.overrides import changed_paths

    saved = json.loads((run_dir / "hyper_params.json").read_text(encoding="utf-8"))
    changes = changed_paths(saved, cell.hyper_params.to_dict())
    if changes:
        listed = "; ".join(f"{p}: {a!r} -> {b!r}" for p, (a, b) in list(changes.items())[:5])
        raise SweepMismatchError(
            f"cell {cell.name} in {run_dir} was run with other parameters ({listed}); use "
            "another sweep directory, or nip resume --set ... --accept-changes on the cell"
        )


def open_cell(
    cell: SweepCell,
    sweep_dir: str | Path,
    settings: ExperimentSettings,
    *,
    backends: BackendPool | None = None,
) -> PureTextEiTrainer:
    """The cell's trainer: resumed from its run directory, or new."""
    run_dir = cell.run_dir(sweep_dir)
    cell_settings = replace(settings, run_dir=run_dir)
    if (run_dir / "state.json").exists():
        return PureTextEiTrainer.resume(run_dir, cell_settings, backends=backends)
    # A cell killed before its first stage ended has no state yet: start it again.
    return build_trainer(cell.hyper_params, cell_settings, backends=backends, overwrite=True)


def cell_settings(spec: GridSpec, settings: ExperimentSettings | None, parallel: int):
    settings = replace(settings) if settings else ExperimentSettings()
    settings.wandb_group = settings.wandb_group or spec.name
    if parallel > 1:
        settings.show_progress = False  # several cells' bars would interleave
    return settings


class _Events:
    """``events.jsonl``: one line when each cell starts, ends or fails."""

    def __init__(self, sweep_dir: str | Path):
        self.path = Path(sweep_dir) / "events.jsonl"

    def write(self, cell: str, event: str, **extra: Any) -> None:
        line = json.dumps({"cell": cell, "event": event, "time": time.time(), **extra})
        with self.path.open("a", encoding="utf-8") as file:
            file.write(line + "\n")

    def read(self) -> list[dict[str, Any]]:
        """Every event so far, oldest first (a line being written is left out)."""
        return read_growing_jsonl(self.path)


async def run_sweep_async(
    spec: GridSpec,
    sweep_dir: str | Path,
    settings: ExperimentSettings | None = None,
    *,
    max_parallel: int | None = None,
    echo: bool = True,
) -> dict[str, str]:
    """Run (or resume) every unfinished cell, at most ``max_parallel`` at once.

    Returns:
        Each cell's outcome by name: ``done`` (this call or before), ``stopped`` (a
        ``nip control ... stop``), or the error that ended it. One cell's error does not
        stop the others.
    """
    cells = prepare_sweep(spec, sweep_dir)
    parallel = max_parallel or spec.max_parallel
    settings = cell_settings(spec, settings, parallel)
    pool = BackendPool(settings)
    limit = asyncio.Semaphore(parallel)
    events = _Events(sweep_dir)
    say = print if echo else (lambda *_: None)

    def failed(cell: SweepCell, error: Exception) -> str:
        text = f"{type(error).__name__}: {error}"
        events.write(cell.name, "error", error=text)
        say(f"{cell.name}: failed: {text}")
        return text

    async def run(cell: SweepCell) -> str:
        async with limit:
            try:
                trainer = open_cell(cell, sweep_dir, settings, backends=pool)
            except Exception as error:  # a cell that cannot start; the others go on
                return failed(cell, error)
            if trainer.finished:
                return "done"
            events.write(cell.name, "start", iteration=trainer.state.iteration)
            say(
                f"{cell.name}: running from iteration {trainer.state.iteration}, "
                f"stage {trainer.state.stage}"
            )
            try:
                state = await trainer.train_async()
            except Exception as error:  # recorded; the other cells go on
                return failed(cell, error)
            outcome = "done" if state.stage == "done" else "stopped"
            events.write(cell.name, "end", outcome=outcome)
            say(f"{cell.name}: {outcome}")
            return outcome

    try:
        outcomes = await asyncio.gather(*(run(cell) for cell in cells))
    finally:
        await pool.aclose()
    return dict(zip((c.name for c in cells), outcomes, strict=True))


def run_sweep(spec: GridSpec, sweep_dir: str | Path, settings=None, **kwargs) -> dict[str, str]:
    """Sync :func:`run_sweep_async` (works in scripts and inside Jupyter)."""
    return run_sync(run_sweep_async(spec, sweep_dir, settings, **kwargs))


@dataclass
class CellStatus:
    """Where one cell stands (``error``: what ended it, when its last attempt failed)."""

    name: str
    stage: str
    iteration: int
    num_iterations: int
    values: dict[str, Any]
    error: str | None = None


def cell_status(run_dir: str | Path, name: str = "", values=None) -> CellStatus:
    directory = RunDirectory(run_dir)
    if not directory.exists("hyper_params.json"):
        return CellStatus(name, "not started", 0, 0, values or {})
    params = directory.read_json("hyper_params.json")
    iterations = params.get("rl", {}).get("num_iterations", 0)
    if not directory.exists("state.json"):
        return CellStatus(name, "starting", 0, iterations, values or {})
    state = directory.read_json("state.json")
    return CellStatus(name, state["stage"], state["iteration"], iterations, values or {})


def sweep_status(sweep_dir: str | Path) -> list[CellStatus]:
    """Each cell's stage and iteration, from its run directory, and the error that ended it
    when its last event (``events.jsonl``) is a failure."""
    manifest = RunDirectory(sweep_dir).read_json(MANIFEST)
    statuses = [
        cell_status(Path(sweep_dir) / c["run_dir"], c["name"], c["values"])
        for c in manifest["cells"]
    ]
    errors = cell_errors(sweep_dir)
    for status in statuses:
        status.error = errors.get(status.name)
    return statuses


def cell_errors(sweep_dir: str | Path) -> dict[str, str]:
    """The error that ended each cell whose last event is a failure (``events.jsonl``): a
    cell started again after a failure has none."""
    last = {e["cell"]: e for e in _Events(sweep_dir).read()}
    return {name: e.get("error", "?") for name, e in last.items() if e["event"] == "error"}


def load_sweep_spec(sweep_dir: str | Path) -> GridSpec:
    """The grid a sweep directory was made from (``nip sweep resume DIR``)."""
    manifest = RunDirectory(sweep_dir).read_json(MANIFEST)
    grid = manifest["grid"]
    folder = manifest.get("folder")
    data = {k: v for k, v in grid.items() if not (k == "base" and v == "")}
    return GridSpec.from_dict(data, folder=Path(folder) if folder else None)
