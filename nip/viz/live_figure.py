"""A plotly figure inside a widget, saved light.

The figure is displayed into an ``ipywidgets.Output`` with the notebook's plotly renderer
(``plotly_mimetype`` in JupyterLab: zoom, pan and hover in the page, and the figure's JSON,
a few kilobytes, in the saved notebook) and drawn again, whole, when it changes. A
``go.FigureWidget`` would update in place, but plotly 6+ builds it on anywidget, which puts
plotly's 5 MB JavaScript bundle into every figure widget's saved state
(plotly/plotly.py#5056): a notebook with one run dashboard (three figures) saved at 15 MB.

Clicks on its points reach Python through :class:`~nip.viz.plot_clicks.PlotClicks`.
"""

from __future__ import annotations

from typing import Any

import ipywidgets
import plotly.graph_objects as go

__all__ = ["LiveFigure"]


class LiveFigure(ipywidgets.Output):
    """Shows ``figure``; :meth:`draw` shows it again after a change (once per change).

    Args:
        figure: The figure (change it in place, or assign another, then call :meth:`draw`).
    """

    def __init__(self, figure: go.Figure, **kwargs: Any):
        super().__init__(**kwargs)
        self.figure = figure
        self._drawn: str | None = None

    def draw(self) -> None:
        """Display the figure as it is now, replacing what was shown (nothing when unchanged,
        or outside a kernel, where there is no page to show it in)."""
        from IPython import get_ipython

        state = self.figure.to_json()
        if state == self._drawn or get_ipython() is None:
            return
        self._drawn = state
        self.clear_output(wait=True)
        with self:
            self.figure.show()
