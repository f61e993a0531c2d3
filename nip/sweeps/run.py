"""Running a sweep: every cell of a grid as a resumable run, several at once, on one machine.

::

    spec = GridSpec.load("grid.yaml")
    print(estimate_sweep(spec))                     # nip sweep grid.yaml --dry-run
    run_sweep(spec, "runs/sweeps/ei", max_parallel=4)

Each cell is an ordinary run directory under ``cells/``; running the grid again resumes the
unfinished cells and skips the finished, so a killed sweep loses nothing. Every cell is checked
before any starts, and a sweep owns its directory while it runs (:mod:`nip.runs.ownership`).
Cells run as asyncio tasks sharing one :class:`~nip.providers.pool.BackendPool`, so one
concurrency limit per provider holds for the whole grid; their W&B runs share a group.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from nip._version import __version__
from nip.errors import IncompatibleParametersError, require_count
from nip.providers.pool import BackendPool
from nip.runs.ownership import owning
from nip.runs.run_dir import RunDirectory
from nip.runs.sweep_dir import CELLS, MANIFEST, SweepEvents, read_manifest
from nip.settings import ExperimentSettings
from nip.sweeps.grid import GridSpec, SweepCell, in_cell
from nip.training.trainer import PureTextEiTrainer, build_trainer
from nip.utils.notices import labelled
from nip.utils.sync import run_sync

__all__ = [
    "SweepMismatchError",
    "check_cells",
    "open_cell",
    "prepare_sweep",
    "run_sweep",
    "run_sweep_async",
]


class SweepMismatchError(IncompatibleParametersError):
    """The sweep directory holds another grid."""


def check_cells(cells: list[SweepCell], settings: ExperimentSettings | None = None) -> None:
    """Build every cell's session as its run would, with backends that call nothing, so a cell
    that cannot start is refused (a :class:`NipError` naming it) before any starts."""
    from nip.training.dialogue_sizes import dry_run_session

    settings = replace(settings or ExperimentSettings(), show_progress=False)
    for cell in cells:
        with in_cell(cell.name):
            dry_run_session(cell.hyper_params, settings)


def prepare_sweep(
    spec: GridSpec, sweep_dir: str | Path, settings: ExperimentSettings | None = None
) -> list[SweepCell]:
    """Expand the grid, check every cell, and write (or check) the manifest; returns the cells.
    Nothing is written when a cell is refused.

    Raises:
        NipError: A cell cannot start (the message names it).
        SweepMismatchError: ``sweep_dir`` already holds a sweep with other cells.
        DirectoryInUseError: Another process runs a sweep in ``sweep_dir``.
    """
    cells = spec.cells()
    check_cells(cells, settings)
    with owning(sweep_dir, "a sweep"):
        _write_manifest(spec, cells, sweep_dir)
    return cells


def _write_manifest(spec: GridSpec, cells: list[SweepCell], sweep_dir: str | Path) -> None:
    """Write the manifest, or check that the one there lists these cells."""
    directory = RunDirectory(sweep_dir)
    records = [
        {"name": c.name, "values": c.values, "run_dir": f"{CELLS}/{c.name}"}
        | {"num_iterations": c.hyper_params.rl.num_iterations}
        for c in cells
    ]
    if directory.exists(MANIFEST):
        saved = read_manifest(sweep_dir)
        if [c["name"] for c in saved["cells"]] != [c["name"] for c in records]:
            raise SweepMismatchError(
                f"{directory.path} holds the sweep {saved.get('name')!r} with other cells; "
                "use another directory (--sweep-dir)"
            )
        for cell in cells:  # a cell's parameters are checked when it is resumed
            run_dir = cell.run_dir(sweep_dir)
            if (run_dir / "hyper_params.json").exists():
                _check_same(cell, run_dir)
        return
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


def _check_same(cell: SweepCell, run_dir: Path) -> None:
    """Refuse a cell run with parameters other than the grid's. Changes the cell itself
    recorded since (``nip extend``, ``nip resume --set ... --accept-changes``: its first
    parameters kept as ``hyper_params.before-0.json``) are the cell's own history."""
    from nip.parameters.overrides import changed_paths

    first = run_dir / "hyper_params.before-0.json"
    saved = RunDirectory(run_dir).read_json(first.name if first.exists() else "hyper_params.json")
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


async def run_sweep_async(
    spec: GridSpec,
    sweep_dir: str | Path,
    settings: ExperimentSettings | None = None,
    *,
    max_parallel: int | None = None,
    echo: bool = True,
) -> dict[str, str]:
    """Run (or resume) every unfinished cell, at most ``max_parallel`` at once; returns each
    cell's outcome: ``done``, ``stopped`` (``nip control ... stop``) or the error that ended it
    (one cell's error does not stop the others).

    Raises:
        InvalidParameterError: ``max_parallel`` < 1.
        NipError: A cell cannot start (:func:`check_cells`): no cell is run.
        DirectoryInUseError: Another process runs a sweep in ``sweep_dir``.
    """
    parallel = spec.max_parallel if max_parallel is None else max_parallel
    require_count("max_parallel", parallel)
    cells = spec.cells()
    check_cells(cells, settings)  # every cell, before anything is written
    say = print if echo else (lambda *_: None)
    with owning(sweep_dir, "a sweep") as ownership:
        if ownership.taken_over_from is not None:
            say(f"{sweep_dir}: taking over from {ownership.taken_over_from}, which is gone")
        _write_manifest(spec, cells, sweep_dir)
        return await _run_cells(spec, cells, sweep_dir, settings, parallel, say)


async def _run_cells(
    spec: GridSpec,
    cells: list[SweepCell],
    sweep_dir: str | Path,
    settings: ExperimentSettings | None,
    parallel: int,
    say: Callable[[str], object],
) -> dict[str, str]:
    settings = cell_settings(spec, settings, parallel)
    pool = BackendPool(settings)
    limit = asyncio.Semaphore(parallel)
    events = SweepEvents(sweep_dir)

    def failed(cell: SweepCell, error: Exception) -> str:
        text = f"{type(error).__name__}: {error}"
        events.write(cell.name, "error", error=text)
        say(f"{cell.name}: failed: {text}")
        return text

    async def run(cell: SweepCell) -> str:
        with labelled(cell.name):  # its warnings name it
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
