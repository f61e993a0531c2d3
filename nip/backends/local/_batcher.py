"""Micro-batching: concurrent callers' items are collected and handled in one call.

A caller awaits :meth:`MicroBatcher.submit`; a background task takes up to ``max_batch_size``
queued items (waiting at most ``max_wait_s`` for more once the first has arrived), awaits the
batch function with all of them and hands each caller its own result. Batches run one after
another, so while one runs, the next fills up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from nip.errors import GenerationError

Item = TypeVar("Item")
Result = TypeVar("Result")

BatchFunction = Callable[[list[Item]], Awaitable[Sequence[Result | BaseException]]]


class MicroBatcher(Generic[Item, Result]):
    """Collects concurrent items into batches for ``run_batch`` (one result or exception per item,
    in order), at most ``max_batch_size`` each, waiting up to ``max_wait_s`` for more once one is
    queued. Its task belongs to the first ``submit``'s loop (another loop starts a fresh one)."""

    def __init__(
        self,
        run_batch: BatchFunction[Item, Result],
        *,
        max_batch_size: int = 16,
        max_wait_s: float = 0.005,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, not {max_batch_size}")
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self._pending: deque[tuple[Item, asyncio.Future[Result]]] = deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def submit(self, item: Item) -> Result:
        """Queue ``item`` and wait for its result (or raise its exception)."""
        if self._closed:
            raise GenerationError("The backend is closed.")
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._task is None or self._task.done():
            self._start(loop)
        future: asyncio.Future[Result] = loop.create_future()
        self._pending.append((item, future))
        if self._wake is not None:
            self._wake.set()
        return await future

    async def aclose(self) -> None:
        """Stop the background task; queued and running callers get a GenerationError."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._fail(list(self._pending), GenerationError("The backend was closed."))
        self._pending.clear()

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is not loop:
            # Items queued under a previous loop can never be answered there.
            stale = [entry for entry in self._pending if entry[1].get_loop() is not loop]
            for entry in stale:
                self._pending.remove(entry)
            self._fail(stale, GenerationError("The event loop changed before generation."))
        self._loop = loop
        self._wake = asyncio.Event()
        self._task = loop.create_task(self._serve(self._wake), name="nip-local-batcher")

    async def _serve(self, wake: asyncio.Event) -> None:
        while True:
            if not self._pending:
                wake.clear()
                await wake.wait()
                continue
            if len(self._pending) < self.max_batch_size and self.max_wait_s > 0:
                await asyncio.sleep(self.max_wait_s)
            batch = [
                self._pending.popleft() for _ in range(min(self.max_batch_size, len(self._pending)))
            ]
            live = [(item, future) for item, future in batch if not future.done()]
            if not live:
                continue
            try:
                results = await self._run_batch([item for item, _ in live])
            except asyncio.CancelledError:
                self._fail(live, GenerationError("The backend was closed during generation."))
                raise
            except Exception as error:
                self._fail(live, error)
                continue
            for (_, future), result in zip(live, results, strict=True):
                if future.done():  # the caller gave up (cancelled)
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    @staticmethod
    def _fail(entries: list[tuple[Item, asyncio.Future[Result]]], error: BaseException) -> None:
        for _, future in entries:
            if not future.done() and not future.get_loop().is_closed():
                future.set_exception(error)
