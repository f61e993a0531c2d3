"""A sweep's directory: where its manifest, its cells' runs and its servers' storage are.

Layout::

    sweep.json        the grid and its cells (MANIFEST)
    events.jsonl      one line when each cell starts, ends or fails
    cells/<name>/     each cell's run directory
    serve/            the storage of the servers ``--serve`` starts for the sweep
"""

from __future__ import annotations

from pathlib import Path

#: The manifest that makes a folder a sweep's.
MANIFEST = "sweep.json"
#: The folder of a sweep's cells, and the storage of the servers of a run or sweep.
CELLS, SERVE = "cells", "serve"


def is_sweep_dir(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def cell_run_dir(sweep_dir: str | Path, cell: str) -> Path:
    """A cell's run directory."""
    return Path(sweep_dir) / CELLS / cell


def serve_storage(run_dir: str | Path) -> Path:
    """Where the servers ``--serve`` starts for a saved run keep their files: ``RUN_DIR/serve``,
    or for a sweep's cell the sweep's ``SWEEP_DIR/serve`` (where its adapters are)."""
    run_dir = Path(run_dir).resolve()
    in_sweep = run_dir.parent.name == CELLS and is_sweep_dir(run_dir.parent.parent)
    return (run_dir.parent.parent if in_sweep else run_dir) / SERVE
