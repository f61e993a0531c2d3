"""Running a button's coroutine: as a task on Jupyter's running loop (blocking there would freeze
the kernel), else to completion before ``click()`` returns."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable, Coroutine
from typing import Any

import ipywidgets

from nip.utils.sync import run_sync


def button(description: str, icon: str, on_click: Callable[[], Any], **style: Any) -> Any:
    """A button as wide as its label that calls ``on_click()`` when clicked."""
    layout = ipywidgets.Layout(width="auto")
    made = ipywidgets.Button(description=description, icon=icon, layout=layout, **style)
    made.on_click(lambda _: on_click())
    return made


class Polling:
    """A widget that re-reads what it shows: :meth:`start` runs :meth:`watch` on the running
    event loop, which calls ``poll`` every ``poll_interval_s`` seconds until it returns
    something other than None (what it watched has ended) or the widget stops watching."""

    task: asyncio.Task | None = None
    poll_interval_s: float

    async def poll(self) -> Any:
        """Read and redraw once; what :meth:`watch` returns once it is not None."""
        raise NotImplementedError

    def start(self) -> asyncio.Task | None:
        """The polling task (a new one unless it runs); None without a running loop (the
        widget refreshes when asked instead)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        if self.task is None or self.task.done():
            self.task = loop.create_task(self.watch())
        return self.task

    async def watch(self) -> Any:
        """Poll every ``poll_interval_s`` seconds until ``poll`` returns something."""
        while (result := await self.poll()) is None:
            await asyncio.sleep(self.poll_interval_s)
        return result

    def stop_watching(self) -> None:
        """Cancel the polling task."""
        if self.task is not None:
            self.task.cancel()
            self.task = None


class Actions:
    """Buttons whose coroutines run one at a time (:meth:`_click`), their errors shown in
    ``errors``; ``_redraw`` updates the buttons (disabled while one runs: ``_busy``)."""

    task: asyncio.Task | None = None
    _busy = False
    errors: ipywidgets.Output

    def _redraw(self) -> None:
        raise NotImplementedError

    @property
    def error_text(self) -> str:
        """The errors shown so far, as text ("" when none)."""
        outputs = self.errors.outputs
        return "".join(o.get("text", "") for o in outputs if o.get("name") == "stderr")

    def _button(
        self, description: str, icon: str, action: Callable[[], Coroutine], exclusive: bool = True
    ) -> ipywidgets.Button:
        """A :func:`button` that runs ``action()`` (:meth:`_click`)."""
        return button(description, icon, lambda: self._click(action(), exclusive=exclusive))

    def _click(self, action: Coroutine[Any, Any, Any], *, exclusive: bool = True) -> None:
        """Run ``action`` (an exclusive one is dropped while another runs); its task is
        :attr:`task` when it is exclusive and was scheduled on a running loop."""
        if exclusive:
            if self._busy:  # a click that raced the disabling of the buttons
                action.close()
                return
            self.errors.outputs = ()
            self._busy = True
            self._redraw()
        on_done = self._finished if exclusive else self._redraw
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            try:
                run_sync(action)
            except Exception as error:
                self._show_error(error)
            finally:
                on_done()
            task = None
        else:
            task = loop.create_task(action)

            def finished(done: asyncio.Task) -> None:
                if not done.cancelled() and done.exception() is not None:
                    self._show_error(done.exception())  # type: ignore[arg-type]
                on_done()

            task.add_done_callback(finished)
        if exclusive:
            self.task = task

    def _show_error(self, error: BaseException) -> None:
        """Append ``error`` and its traceback to ``errors`` (kept in ``errors.outputs`` when
        there is no kernel)."""
        self.errors.append_stderr("".join(traceback.format_exception(error)))

    def _finished(self) -> None:
        self._busy = False
        self._redraw()
