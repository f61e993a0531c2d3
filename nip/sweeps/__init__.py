"""A sweep from Python: the grid ``nip sweep`` runs, priced, run, watched and compared in cells.

::

    sweep = nip.sweep("paper-ei", set={"agents.*.use_dummy_api": True}, seeds=[0, 1])
    sweep.dry_run()                          # nip sweep paper-ei --dry-run
    SweepMonitor(sweep)                      # before, during and after the run
    await sweep.run_async(max_parallel=4)    # nip sweep paper-ei (sweep.run() in a script)
    figure, table = sweep.compare()          # nip compare runs/sweeps/paper-ei

A :class:`Sweep` is a :class:`~nip.sweeps.grid.GridSpec` and the directory its cells run in, as
``nip sweep GRID.yaml`` builds them: a sweep started in a shell can be watched, resumed and
compared here, and the other way round. The directory's layout is :mod:`nip.runs.sweep_dir`.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nip.runs.sweep_dir import cell_run_dir, is_sweep_dir, sweep_status
from nip.settings import ExperimentSettings
from nip.sweeps.grid import GridSpec, SweepCell, default_sweep_dir, load_sweep_spec
from nip.utils.sync import run_sync

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from nip.sweeps.grid import SweepEstimate
    from nip.widgets.sweep_monitor import SweepMonitor

__all__ = ["Sweep", "sweep"]


@dataclass
class Sweep:
    """A grid of runs (``spec``) and the directory its cells run in (``sweep.json``,
    ``events.jsonl``, ``cells/<name>/``), with how they run (``settings``); :func:`sweep` makes one.
    """

    spec: GridSpec
    directory: Path
    settings: ExperimentSettings | None = None

    def __fspath__(self) -> str:  # a Sweep is its directory to nip compare and SweepMonitor
        return str(self.directory)

    @property
    def name(self) -> str:
        return self.spec.name

    @cached_property
    def cells(self) -> list[SweepCell]:
        """Every cell, configured and validated, in grid order (expanded once)."""
        return self.spec.cells()

    def run_dir(self, cell: str) -> Path:
        """A cell's run directory (``nip resume``, ``RunMonitor`` and ``load_run`` take it);
        KeyError for a name the grid lacks."""
        names = [c.name for c in self.cells]
        if cell not in names:
            raise KeyError(f"sweep {self.name!r} has no cell {cell!r}; its cells: {names}")
        return cell_run_dir(self.directory, cell)

    def dry_run(self, *, sample_items: int = 4) -> SweepEstimate:
        """Every cell's dry run and their total (``.to_dataframe()``, ``.total_usd``); nothing
        is called and nothing is written."""
        from nip.sweeps.grid import estimate_sweep

        return estimate_sweep(self.spec, self.settings, sample_items=sample_items)

    async def run_async(
        self, *, max_parallel: int | None = None, echo: bool = True, serve: bool | None = None
    ):
        """Run (or resume) every unfinished cell, at most ``max_parallel`` at once
        (:func:`run_sweep_async`), with the ``nip serve`` its SelfHosted agents need started
        first and stopped at the end if ``serve`` (None: ``settings.serve`` or the grid's
        ``serve:``), as ``nip sweep --serve``; returns each cell's outcome: ``done``,
        ``stopped``, or the error that ended it."""
        from nip.runs.sweep_dir import SERVE
        from nip.server.run_servers import serving
        from nip.sweeps.run import run_sweep_async

        settings = self.settings or ExperimentSettings()
        serve = (settings.serve or self.spec.serve) if serve is None else serve
        configs = [cell.hyper_params for cell in self.cells] if serve else []
        with serving(configs, replace(settings, serve=serve), self.directory / SERVE) as served:
            return await run_sweep_async(
                self.spec, self.directory, served, max_parallel=max_parallel, echo=echo
            )

    def run(self, **options: Any) -> dict[str, str]:
        """Sync :meth:`run_async` (works in scripts and inside Jupyter)."""
        return run_sync(self.run_async(**options))

    def status(self) -> pd.DataFrame:
        """Each cell's axis values, stage and iteration (and the error that ended it)."""
        import pandas as pd

        if is_sweep_dir(self.directory):
            cells = sweep_status(self.directory)
            rows = [
                {"cell": c.name, **c.values, "stage": c.stage, "iteration": c.progress}
                | {"error": c.error or ""}
                for c in cells
            ]
        else:
            rows = [{"cell": c.name, **c.values, "stage": "not started"} for c in self.cells]
        return pd.DataFrame(rows)

    def compare(self, **options: Any) -> tuple[go.Figure, pd.DataFrame]:
        """The comparison of its cells: :func:`~nip.viz.compare_runs` (``pool_seeds=False``
        for one series per seed, ``over_seeds=True`` for the mean over seeds)."""
        from nip.viz import compare_runs

        return compare_runs(self, **options)

    def monitor(self, **options: Any) -> SweepMonitor:
        """A :class:`~nip.widgets.SweepMonitor` of this sweep (before, during or after it)."""
        from nip.widgets import SweepMonitor

        return SweepMonitor(self, **options)

    async def retest_async(self, cell: str, **options: Any) -> Path:
        """Test a cell's saved models again (:func:`~nip.experiments.retest.retest_async`:
        ``iterations``, ``passes``, ``split``); :meth:`compare` shows the result as its own
        series. Returns the retest's directory."""
        from nip.experiments.retest import retest_async

        return await retest_async(self.run_dir(cell), settings=self.settings, **options)

    def retest(self, cell: str, **options: Any) -> Path:
        """Sync :meth:`retest_async`."""
        return run_sync(self.retest_async(cell, **options))

    def __repr__(self) -> str:
        return f"Sweep({self.name!r}, {len(self.cells)} cells, {str(self.directory)!r})"

    def _repr_html_(self) -> str:
        table = self.status().to_html(index=False, na_rep="")
        return (
            f"<div><b>sweep {html.escape(self.name)}</b> in "
            f"<code>{html.escape(str(self.directory))}</code>{table}</div>"
        )


def sweep(
    grid: str | Path | Mapping[str, Any] | GridSpec,
    *,
    set: Mapping[str, Any] | None = None,
    seeds: Sequence[int] | None = None,
    axes: Mapping[str, Iterable[Any]] | None = None,
    name: str | None = None,
    sweep_dir: str | Path | None = None,
    settings: ExperimentSettings | None = None,
) -> Sweep:
    """A sweep, as ``nip sweep`` makes it: a grid and the directory its cells run in.

    Args:
        grid: A shipped grid (``"paper-ei"``), a grid file, a grid as a dict (the file's keys), a
            :class:`GridSpec`, or an earlier sweep's directory (to watch, resume or compare it).
        set: Overrides every cell shares, added to the grid's ``set:`` (dotted paths as
            ``--set``; ``agents.*.FIELD`` sets every agent's).
        seeds: The ``seed`` axis (replacing the grid's).
        axes: More axes, or other values for the grid's (``{"interaction_protocol": ["nip"]}``).
        name: The sweep's name (and so its default directory, ``runs/sweeps/<name>``).
        sweep_dir: Where the cells go.
        settings: How the cells run.

    Raises:
        ConfigFileError: No such grid.
        InvalidParameterError: A cell's configuration is not allowed (naming cell and field).
    """
    if isinstance(grid, GridSpec):
        spec = GridSpec.from_dict(grid.to_dict(), folder=grid.folder)
    elif isinstance(grid, Mapping):
        spec = GridSpec.from_dict(grid, folder=Path.cwd())
    elif is_sweep_dir(grid):
        spec, sweep_dir = load_sweep_spec(grid), sweep_dir or grid
    else:
        spec = GridSpec.load(grid)
    spec.overrides.update(set or {})
    spec.axes.update({path: list(values) for path, values in (axes or {}).items()})
    if seeds is not None:
        spec.axes["seed"] = list(seeds)
    spec.name = name or spec.name
    directory = Path(sweep_dir) if sweep_dir is not None else default_sweep_dir(spec.name)
    made = Sweep(spec, directory, settings)
    made.cells  # noqa: B018 (expanded now: a bad grid is refused here, naming the cell)
    return made
