"""A live table of a sweep's cells, and a cell's own dashboard on demand.

::

    SweepMonitor("runs/sweeps/paper-ei")      # while `nip sweep` runs, here or in a shell

It reads the sweep directory (``sweep.json`` and each cell's run directory, as ``nip sweep
status`` does) on a timer that is an asyncio task on the kernel's loop, like
:class:`~nip.widgets.RunMonitor`; choosing a cell shows that cell's ``RunMonitor`` below
(pause and stop work per cell).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import ipywidgets

from nip.experiments.sweep import CellStatus, sweep_status
from nip.widgets._html import escape
from nip.widgets._tasks import poll_on_running_loop
from nip.widgets.run_monitor import RunMonitor

__all__ = ["SweepMonitor"]


class SweepMonitor(ipywidgets.VBox):
    """Each cell's stage and iteration, refreshed every ``poll_interval_s`` seconds.

    Args:
        sweep_dir: The sweep's directory (``nip sweep --sweep-dir``).
        poll_interval_s: Seconds between reads.
        start: Start polling at once when there is a running event loop (in a notebook).
    """

    def __init__(self, sweep_dir: str | Path, *, poll_interval_s: float = 2.0, start: bool = True):
        super().__init__()
        self.sweep_dir = Path(sweep_dir)
        self.poll_interval_s = poll_interval_s
        self.cells: list[CellStatus] = []
        self.task: asyncio.Task | None = None
        self.table = ipywidgets.HTML()
        self.chooser = ipywidgets.Dropdown(description="cell", options=[("-", "")])
        self.chooser.observe(self._show_cell, names="value")
        self.cell_box = ipywidgets.VBox()
        self.children = [self.table, self.chooser, self.cell_box]
        self.refresh()
        self.chooser.options = [("-", "")] + [(c.name, c.name) for c in self.cells]
        if start:
            self.start()

    @property
    def finished(self) -> bool:
        return bool(self.cells) and all(c.stage == "done" for c in self.cells)

    def refresh(self) -> list[CellStatus]:
        """Read the sweep directory once and redraw the table."""
        self.cells = sweep_status(self.sweep_dir)
        done = sum(c.stage == "done" for c in self.cells)
        rows = "".join(
            f"<tr><td>{escape(c.name)}</td><td>{escape(c.stage)}</td>"
            f"<td>{min(c.iteration + 1, c.num_iterations)}/{c.num_iterations}</td></tr>"
            for c in self.cells
        )
        self.table.value = (
            f"<b>sweep {escape(self.sweep_dir.name)}</b>: {done}/{len(self.cells)} cells done"
            "<table><tr><th>cell</th><th>stage</th><th>iteration</th></tr>"
            f"{rows}</table>"
        )
        return self.cells

    def _show_cell(self, change) -> None:
        for child in self.cell_box.children:
            child.close()
        name = change["new"]
        run_dir = self.sweep_dir / "cells" / name
        self.cell_box.children = [RunMonitor(run_dir)] if name and run_dir.exists() else []

    def start(self) -> asyncio.Task | None:
        """Poll on the running event loop until every cell is done or the widget closes."""
        self.task = poll_on_running_loop(self.task, self.watch)
        return self.task

    async def watch(self) -> list[CellStatus]:
        while True:
            self.refresh()
            if self.finished:
                return self.cells
            await asyncio.sleep(self.poll_interval_s)

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None
        for child in self.cell_box.children:
            child.close()
        super().close()

    def __repr__(self) -> str:
        done = sum(c.stage == "done" for c in self.cells)
        return f"SweepMonitor({str(self.sweep_dir)!r}, {done}/{len(self.cells)} cells done)"
