"""Clicks on the points of a plotly figure shown as a light output, sent to Python.

:class:`PlotClicks`, an invisible anywidget beside a :class:`~nip.viz.live_figure.LiveFigure`,
listens to ``plotly_click`` on the figures drawn in its box, so the saved notebook holds no copy
of plotly.js. Needs ``anywidget`` (the ``notebook`` extra).
"""

from __future__ import annotations

from typing import Any

import anywidget
import ipywidgets
import traitlets

__all__ = ["PlotClicks"]

#: Listens on every figure drawn in the box, now and later (a redrawn figure is a new element).
_ESM = """
function listen(model, root) {
  for (const plot of root.querySelectorAll(".js-plotly-plot")) {
    if (plot.nipClicks || typeof plot.on !== "function") continue;
    plot.nipClicks = true;
    plot.on("plotly_click", (event) => {
      const point = event.points[0];
      model.set("clicked", {
        trace: point.curveNumber,
        index: point.pointIndex,
        customdata: point.customdata ?? null,
        at: Date.now(),
      });
      model.save_changes();
    });
  }
}

function render({ model, el }) {
  let observer = null;
  const start = () => {
    const root = el.parentElement;
    if (!root) return requestAnimationFrame(start);  // not in the page yet
    listen(model, root);
    observer = new MutationObserver(() => listen(model, root));
    observer.observe(root, { childList: true, subtree: true });
  };
  start();
  return () => observer && observer.disconnect();
}

export default { render };
"""


class PlotClicks(anywidget.AnyWidget):
    """An invisible widget whose ``clicked`` trait is the last point clicked in the plotly
    figures of the box it is placed in: ``{"trace", "index", "customdata", "at"}``."""

    _esm = _ESM
    clicked = traitlets.Dict(allow_none=True, default_value=None).tag(sync=True)

    def __init__(self, **kwargs: Any):
        super().__init__(layout=ipywidgets.Layout(display="none"), **kwargs)
