"""Run a coroutine from sync code, in a script or inside Jupyter's running event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion and return its result.

    Outside an event loop this is ``asyncio.run``; inside one (a Jupyter cell) it runs on a
    fresh loop in a helper thread while the caller waits (``await`` the ``*_async`` variant
    to share the kernel's loop).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    done: Future[T] = Future()

    def runner() -> None:
        try:
            done.set_result(asyncio.run(coroutine))
        except BaseException as error:  # re-raised in the caller's thread
            done.set_exception(error)

    threading.Thread(target=runner, name="nip-run-sync", daemon=True).start()
    return done.result()
