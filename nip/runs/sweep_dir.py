"""A sweep's directory on disk, read by the sweeps that write it and by plots and dashboards.
Layout::

    sweep.json        the grid and its cells (MANIFEST)
    events.jsonl      one line when each cell starts, ends or fails
    cells/<name>/     each cell's run directory
    serve/            the storage of the servers ``--serve`` starts for the sweep
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nip.errors import NipError
from nip.runs.run_dir import RunDirectory, RunFileError, folder_holding
from nip.utils.files import read_growing_jsonl

#: The manifest that makes a folder a sweep's.
MANIFEST = "sweep.json"
#: The folder of a sweep's cells, and the storage of the servers of a run or sweep.
CELLS, SERVE = "cells", "serve"


class NotASweepDirectoryError(NipError, FileNotFoundError):
    """A folder given as a sweep's is missing, is a file, or holds no sweep."""


def is_sweep_dir(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def read_manifest(sweep_dir: str | Path) -> dict[str, Any]:
    """A sweep directory's ``sweep.json`` (:class:`NotASweepDirectoryError` where there is none)."""
    path = folder_holding(sweep_dir, MANIFEST, "sweep", NotASweepDirectoryError)
    manifest = RunDirectory(path).read_json(MANIFEST)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("cells"), list):
        raise NotASweepDirectoryError(f"{path / MANIFEST} is not a sweep's manifest")
    return manifest


def cell_run_dir(sweep_dir: str | Path, cell: str) -> Path:
    """A cell's run directory."""
    return Path(sweep_dir) / CELLS / cell


def sweep_run_dirs(sweep_dir: str | Path) -> list[Path]:
    """The run directories of a sweep's cells, in grid order."""
    return [Path(sweep_dir) / cell["run_dir"] for cell in read_manifest(sweep_dir)["cells"]]


def serve_storage(run_dir: str | Path) -> Path:
    """Where the servers ``--serve`` starts for a saved run keep their files: ``RUN_DIR/serve``,
    or for a sweep's cell the sweep's ``SWEEP_DIR/serve`` (where its adapters are)."""
    run_dir = Path(run_dir).resolve()
    in_sweep = run_dir.parent.name == CELLS and is_sweep_dir(run_dir.parent.parent)
    return (run_dir.parent.parent if in_sweep else run_dir) / SERVE


class SweepEvents:
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


def cell_errors(sweep_dir: str | Path) -> dict[str, str]:
    """The error that ended each cell whose last event is a failure (``events.jsonl``): a
    cell started again after a failure has none."""
    events = SweepEvents(sweep_dir).read()
    last = {e["cell"]: e for e in events if isinstance(e, dict) and "cell" in e}
    return {name: e.get("error", "?") for name, e in last.items() if e.get("event") == "error"}


@dataclass
class CellStatus:
    """Where one cell stands (``error``: what made it fail, if its last attempt did)."""

    name: str
    stage: str
    iteration: int
    num_iterations: int
    values: dict[str, Any]
    error: str | None = None

    @property
    def progress(self) -> str:
        """``3/4``: the iteration it is in (or ended in), of how many."""
        return f"{min(self.iteration + 1, self.num_iterations)}/{self.num_iterations}"


def sweep_status(sweep_dir: str | Path) -> list[CellStatus]:
    """Each cell's stage and iteration, and the error of each cell whose last attempt failed
    (:class:`NotASweepDirectoryError` where there is no sweep)."""
    manifest = read_manifest(sweep_dir)
    errors = cell_errors(sweep_dir)
    statuses = []
    for record in manifest["cells"]:
        name, values = record["name"], record["values"]
        try:
            progress = RunDirectory(Path(sweep_dir) / record["run_dir"]).progress()
            status = CellStatus(name, *progress, values)
        except RunFileError as error:  # a damaged cell is shown, not a reason to fail
            status = CellStatus(name, "unreadable", 0, 0, values, error=str(error))
        status.num_iterations = status.num_iterations or record.get("num_iterations", 0)
        status.error = errors.get(name, status.error)
        statuses.append(status)
    return statuses
