"""A sweep's dashboard: each cell where it stands, and the comparison as cells test.

``SweepMonitor(sweep)`` (a ``nip.sweep(...)``, before, during and after it runs) or
``SweepMonitor("runs/sweeps/paper-ei")`` (while ``nip sweep`` runs) polls the sweep directory like
:class:`~nip.widgets.RunMonitor`: a table of each cell's axis values, protocol, status, stage,
accuracy and spend (or why it failed), the :func:`~nip.viz.compare_runs` plot as cells test, and
a cell's own ``RunMonitor`` on a click.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ipywidgets
import plotly.graph_objects as go

from nip.runs.run_dir import RunDirectory
from nip.runs.spend import SweepSpend, usd
from nip.runs.sweep_dir import MANIFEST, cell_errors, cell_run_dir
from nip.utils import counted
from nip.viz.compare_runs import compare_runs
from nip.viz.live_figure import LiveFigure
from nip.widgets._html import PlainTextRepr, error_html, escape, note_html, table_html
from nip.widgets._tasks import Polling
from nip.widgets.run_monitor import RunMonitor, RunSnapshot

__all__ = ["SweepMonitor"]


class SweepMonitor(Polling, PlainTextRepr, ipywidgets.VBox):
    """Each cell of a sweep, its comparison so far, and a cell's own dashboard on a click.

    Args:
        sweep: A :class:`~nip.sweeps.Sweep` (cells listed before it starts) or its directory.
        split: The rollouts the comparison plot reads (``test`` or ``train``).
        start: Start polling at once when there is a running event loop (in a notebook).
    """

    def __init__(
        self,
        sweep: str | os.PathLike,
        *,
        split: str = "test",
        poll_interval_s: float = 2.0,
        start: bool = True,
    ):
        super().__init__()
        self.sweep_dir = Path(os.fspath(sweep))
        self.split = split
        self.poll_interval_s = poll_interval_s
        self.planned = list(getattr(sweep, "cells", ()))  # a Sweep's SweepCells
        self.name = str(getattr(sweep, "name", self.sweep_dir.name))
        self.cells: list[dict[str, Any]] = []
        self.snapshots: dict[str, RunSnapshot] = {}
        self.errors: dict[str, str] = {}
        self._compared: tuple | None = None
        self.header = ipywidgets.HTML()
        self.table = ipywidgets.HTML()
        self.chooser = ipywidgets.ToggleButtons(
            options=[], description="dashboard:", style={"button_width": "auto"}
        )
        self.chooser.observe(lambda change: self.open_cell(change["new"]), names="value")
        self.comparison = LiveFigure(go.Figure())
        self.comparison_note = ipywidgets.HTML()
        self.cell_box = ipywidgets.VBox()
        self.children = [
            self.header,
            self.table,
            self.comparison_note,
            self.comparison,
            self.chooser,
            self.cell_box,
        ]
        self.refresh()
        if start:
            self.start()

    # ------------------------------------------------------------------ reading
    @property
    def started(self) -> bool:
        """Whether the sweep directory holds the sweep (its manifest)."""
        return (self.sweep_dir / MANIFEST).is_file()

    @property
    def finished(self) -> bool:
        """Every cell is done, or failed (and not started again)."""
        return bool(self.cells) and all(
            self.snapshots[c["name"]].finished or c["name"] in self.errors for c in self.cells
        )

    def refresh(self) -> list[dict[str, Any]]:
        """Read the sweep directory once and redraw."""
        if self.started:
            manifest = RunDirectory(self.sweep_dir).read_json(MANIFEST)
            self.name, self.cells = manifest["name"], manifest["cells"]
            self.errors = cell_errors(self.sweep_dir)
        else:
            self.cells = [{"name": c.name, "values": c.values} for c in self.planned]
        self.snapshots = {
            c["name"]: RunSnapshot.read(cell_run_dir(self.sweep_dir, c["name"])) for c in self.cells
        }
        names = [c["name"] for c in self.cells]
        if list(self.chooser.options) != names:
            self.chooser.options = names
            self.chooser.value = None
        self._draw_table()
        self._draw_comparison()
        return self.cells

    # ------------------------------------------------------------------ drawing
    def _protocol(self, cell: dict[str, Any]) -> str:
        snapshot = self.snapshots[cell["name"]]
        if snapshot.plan is not None:
            return snapshot.plan.protocol
        planned = {c.name: c for c in self.planned}.get(cell["name"])
        if planned is not None:
            return planned.hyper_params.interaction_protocol
        return str(cell["values"].get("interaction_protocol", ""))

    def _row(self, cell: dict[str, Any], axes: list[str]) -> list[str]:
        """The table's cells of one sweep cell, as HTML."""
        snapshot, error = self.snapshots[cell["name"]], self.errors.get(cell["name"])
        accuracy, split = snapshot.latest("test", "accuracy"), "test"
        if accuracy is None:
            accuracy, split = snapshot.latest("train", "accuracy"), "train"
        spend = snapshot.spend
        cost = "–" if not snapshot.metrics else usd(spend.total_usd)
        if snapshot.metrics and spend.difference_pct is not None:
            cost += f" of {usd(spend.estimate_usd)} ({spend.difference_pct:+.0f}%)"
        where = snapshot.position if snapshot.started else ""
        status = snapshot.status if snapshot.exists else "not started"
        return [
            escape(cell["name"]),
            *(escape(cell["values"].get(path, "")) for path in axes),
            escape(self._protocol(cell)),
            error_html(f"failed: {error}") if error else escape(status),
            escape(where),
            "–" if accuracy is None else f"{accuracy:.0%} ({split})",
            escape(cost),
        ]

    def _draw_table(self) -> None:
        axes = [
            path
            for path in dict.fromkeys(p for c in self.cells for p in c["values"])
            if path != "interaction_protocol"
        ]
        head = ["cell", *(p.rsplit(".", 1)[-1] for p in axes)]
        head += ["protocol", "status", "where", "accuracy", "spent (of estimate)"]
        rows = [self._row(c, axes) for c in self.cells]
        self.table.value = table_html(head, rows, "font-size:90%")
        done = sum(s.finished for s in self.snapshots.values())
        failed = f", {len(self.errors)} failed" if self.errors else ""
        state = f"{done}/{len(self.cells)} cells done{failed}"
        if not self.started:
            state = f"not started ({len(self.cells)} cells)" if self.cells else "not started"
        spends = [s.spend for s in self.snapshots.values()]
        spent = SweepSpend(dict(zip(self.snapshots, spends, strict=True))).describe()
        self.header.value = f"<b>sweep {escape(self.name)}</b>: {state}" + note_html(
            f"  · {spent}  ({self.sweep_dir})"
        )

    def _draw_comparison(self) -> None:
        """The comparison of the cells so far, computed again when a cell's stage changes."""
        key = tuple((n, s.stages_completed, s.stage) for n, s in self.snapshots.items())
        if key == self._compared:
            return
        self._compared = key
        try:
            if not self.started:
                raise FileNotFoundError(self.sweep_dir)
            figure, table = compare_runs(self.sweep_dir, split=self.split)
        except FileNotFoundError:  # no cell has saved such dialogues yet
            self.comparison.layout.display = "none"
            self.comparison_note.value = note_html(
                f"the comparison appears once a cell has saved {self.split} dialogues"
            )
            return
        figure.update_layout(height=360, margin=dict(t=50, b=40))
        self.comparison.figure = figure
        self.comparison.layout.display = None
        points, runs = len(table), int(table["runs"].max())
        self.comparison_note.value = note_html(
            f"{counted(points, 'point')} from {counted(runs, 'run')} at most per protocol"
        )
        self.comparison.draw()

    def open_cell(self, name: str | None) -> RunMonitor | None:
        """Show cell ``name``'s :class:`~nip.widgets.RunMonitor` below (None: close it)."""
        for child in self.cell_box.children:
            child.close()
        run_dir = cell_run_dir(self.sweep_dir, name or "")
        monitor = RunMonitor(run_dir) if name and run_dir.exists() else None
        self.cell_box.children = [monitor] if monitor is not None else []
        if name and monitor is None:
            self.cell_box.children = [ipywidgets.HTML(note_html(f"{name} has not started"))]
        if self.chooser.value != name:
            self.chooser.value = name
        return monitor

    # ------------------------------------------------------------------ polling
    async def poll(self) -> list[dict[str, Any]] | None:
        """Refresh once; the cells once every one is done or failed (polling stops there)."""
        self.refresh()
        return self.cells if self.finished else None

    def close(self) -> None:
        self.stop_watching()
        for child in self.cell_box.children:
            child.close()
        super().close()

    def __repr__(self) -> str:
        done = sum(s.finished for s in self.snapshots.values())
        return f"SweepMonitor({str(self.sweep_dir)!r}, {done}/{len(self.cells)} cells done)"
