"""A pytest plugin for a tutorial's nbval run: the notebook as it would be saved after running.

``tests/test_notebooks.py`` copies this file next to the tutorial as its ``conftest.py``. It
hands every kernel message nbval reads to nbclient's own message handling (the code behind
``jupyter nbconvert --execute``): outputs, ``clear_output``, display updates and each widget's
state (a figure widget's included) land in a copy of the notebook, attributed to the cell that
sent them (background tasks' to the cell that started them). At the end it writes that copy
beside the tutorial as ``saved-<name>.ipynb``: the notebook a researcher would save and commit,
so the test can measure it. nbval's own checks are untouched.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionComplete
from nbval.kernel import RunningKernel
from nbval.plugin import IPyNbCell, IPyNbFile

PREFIX = "saved-"


class _SavedNotebook:
    """The notebook being saved: nbclient's handling of the messages of one tutorial's run."""

    def __init__(self, notebook: nbformat.NotebookNode, path: Path):
        self.source = notebook
        self.path = path
        self.copy = copy.deepcopy(notebook)
        for cell in self.copy.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        self.client = NotebookClient(self.copy, record_timing=False)
        self.client.clear_before_next_output = False
        self.cells: dict[str, int] = {}  # an execute request's id -> its cell's index

    def executing(self, msg_id: str, cell: nbformat.NotebookNode) -> None:
        self.cells[msg_id] = next(i for i, c in enumerate(self.source.cells) if c is cell)

    def handle(self, message: dict[str, Any]) -> None:
        index = self.cells.get(message.get("parent_header", {}).get("msg_id"))
        if index is None:
            return
        with contextlib.suppress(CellExecutionComplete):  # the cell's end: nothing to save
            self.client.process_message(message, self.copy.cells[index], index)

    def write(self) -> None:
        self.client.set_widgets_metadata()
        nbformat.write(self.copy, self.path.with_name(PREFIX + self.path.name))


_saved: dict[int, _SavedNotebook] = {}  # by id(IPyNbFile): one per notebook file
_current: list[IPyNbCell] = []  # the cell being run


def _for(notebook_file: IPyNbFile) -> _SavedNotebook:
    if id(notebook_file) not in _saved:
        saved = _SavedNotebook(notebook_file.nb, Path(notebook_file.path))
        # nbclient's stand-in for an Output widget's view sends the widget its outputs back,
        # as JupyterLab does: through the kernel client nbval drives.
        saved.client.kc = notebook_file.kernel.kc
        _saved[id(notebook_file)] = saved
    return _saved[id(notebook_file)]


_execute = RunningKernel.execute_cell_input
_receive = IPyNbFile.get_kernel_message


def _execute_cell_input(self, *args: Any, **kwargs: Any) -> str:
    msg_id = _execute(self, *args, **kwargs)
    if _current:
        _for(_current[-1].parent).executing(msg_id, _current[-1].cell)
    return msg_id


def _get_kernel_message(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
    message = _receive(self, *args, **kwargs)
    _for(self).handle(message)
    return message


RunningKernel.execute_cell_input = _execute_cell_input
IPyNbFile.get_kernel_message = _get_kernel_message


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    _current.append(item)
    try:
        return (yield)
    finally:
        _current.pop()


def pytest_sessionfinish(session: pytest.Session) -> None:
    for saved in _saved.values():
        saved.write()
