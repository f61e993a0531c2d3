"""Put the tutorial notebooks in their committed form: no outputs, no execution counts.

The one exception: cells marked ``# NBVAL_CHECK_OUTPUT`` keep their printed text, because nbval
compares a cell's output only against a stored one (``tests/test_notebooks.py`` checks both
rules). ``--record`` first runs the notebooks at CI size and stores those reference outputs anew.

    .venv/bin/python notebooks/clear_outputs.py             # every tutorial
    .venv/bin/python notebooks/clear_outputs.py --record 03_step_through.ipynb
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import nbformat

from nip.tutorial import REFERENCE_MARKER, ci_environment

HERE = Path(__file__).resolve().parent


def is_reference_cell(cell) -> bool:
    """A code cell whose output nbval checks (it starts with the marker comment)."""
    return cell.cell_type == "code" and cell.source.lstrip().startswith(REFERENCE_MARKER)


def record(path: Path, timeout_s: int = 900) -> nbformat.NotebookNode:
    """Run ``path`` at CI size in a scratch folder (with a fresh response cache)."""
    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory(prefix="nip-tutorial-") as scratch:
        copy = Path(scratch) / path.name
        shutil.copy(path, copy)
        env = ci_environment(scratch)  # exactly what tests/test_notebooks.py runs them in
        notebook = nbformat.read(copy, as_version=4)
        client = NotebookClient(
            notebook, timeout=timeout_s, resources={"metadata": {"path": scratch}}
        )
        client.execute(env=env)
        return notebook


def clear(notebook: nbformat.NotebookNode, executed: nbformat.NotebookNode | None = None) -> None:
    """Clear outputs in place; reference cells keep theirs (or take ``executed``'s text)."""
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        if not is_reference_cell(cell):
            cell.outputs, cell.execution_count = [], None
            continue
        if executed is not None:
            ran = executed.cells[index]
            if any(o.output_type != "stream" or o.name != "stdout" for o in ran.outputs):
                raise ValueError(f"cell {index} of a reference must only print: {ran.outputs}")
            cell.outputs = ran.outputs
        cell.execution_count = 1 if cell.outputs else None
        cell.metadata.pop("execution", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="default: every tutorial in notebooks/")
    parser.add_argument("--record", action="store_true", help="re-run and store reference outputs")
    args = parser.parse_args()
    paths = [Path(p) for p in args.notebooks] or sorted(HERE.glob("[0-9]*.ipynb"))
    for path in paths:
        path = path if path.exists() else HERE / path
        notebook = nbformat.read(path, as_version=4)
        clear(notebook, record(path) if args.record else None)
        nbformat.write(notebook, path)
        print(f"{path.name}: cleared" + (" and recorded" if args.record else ""))


if __name__ == "__main__":
    main()
