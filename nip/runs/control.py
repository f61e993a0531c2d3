"""Pausing and stopping a run from outside it: a small control file in its directory.

Anyone (a dashboard, ``nip control RUN_DIR pause``) writes ``control.json`` (``{"request":
"pause"}``); the trainer reads it between stages and writes ``run_status.json`` (running, paused,
stopped, finished or failed with "error"; ``stages_completed``/``stages_total``) and, while a
stage plays dialogues, ``stage_progress.json`` (stage, iteration, done, total; at most twice a
second); :func:`reported_status` reads a run killed while running (or paused) as
"interrupted". ``pause`` finishes the stage, saves the state and waits (without blocking the
event loop) for ``run`` or ``stop``; ``stop`` finishes the stage, saves and returns, leaving a
run that :meth:`Trainer.resume` (``nip resume``) continues.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from nip.errors import NipError
from nip.runs.ownership import abandoned
from nip.utils.files import atomic_write_text, read_json_object

__all__ = [
    "CONTROL_FILE",
    "PROGRESS_FILE",
    "STATUS_FILE",
    "Request",
    "RunControlError",
    "StageProgressWriter",
    "between_stages",
    "read_request",
    "read_stage_progress",
    "read_status",
    "report_status",
    "reported_status",
    "request",
]

CONTROL_FILE = "control.json"
STATUS_FILE = "run_status.json"
PROGRESS_FILE = "stage_progress.json"

#: What a user may ask of a running trainer.
Request = Literal["run", "pause", "stop"]
#: What the trainer says at its last stage boundary ("stopped": a stop request or Ctrl-C).
Status = Literal["running", "paused", "stopped", "finished", "failed"]


class RunControlError(NipError, ValueError):
    """A control request that is not one of run, pause or stop."""


def request(run_dir: str | Path, what: str) -> Path:
    """Ask the run in ``run_dir`` to ``"pause"`` or ``"stop"`` after its current stage, or
    ``"run"`` (``"resume"``) on; returns the control file's path."""
    what = "run" if what == "resume" else what
    if what not in get_args(Request):
        raise RunControlError(
            f"control request {what!r} is not allowed: expected one of "
            "'pause', 'resume' ('run') or 'stop'"
        )
    path = Path(run_dir) / CONTROL_FILE
    atomic_write_text(path, json.dumps({"request": what, "updated": time.time()}) + "\n")
    return path


def read_request(run_dir: str | Path) -> Request:
    """The standing request (``"run"`` when there is no control file, or an unreadable one)."""
    data = read_json_object(Path(run_dir) / CONTROL_FILE)
    value = data.get("request", "run")
    return value if value in get_args(Request) else "run"


def read_status(run_dir: str | Path) -> dict[str, Any]:
    """The trainer's last report (``{}`` before the first)."""
    return read_json_object(Path(run_dir) / STATUS_FILE)


def reported_status(run_dir: str | Path, report: Mapping[str, Any] | None = None) -> str | None:
    """The trainer's last reported status (None before the first), or "interrupted" where it
    says running or paused but its owner died (``kill -9``, a lost node): the one rule of the
    dashboards and ``nip sweep status``. ``report``: ``run_status.json`` already read."""
    status = (read_status(run_dir) if report is None else report).get("status")
    return "interrupted" if status in ("running", "paused") and abandoned(run_dir) else status


def read_stage_progress(run_dir: str | Path) -> dict[str, Any]:
    """How far the stage being played has got (``{}`` before the first report)."""
    return read_json_object(Path(run_dir) / PROGRESS_FILE)


class StageProgressWriter:
    """Writes a stage's dialogue count to ``stage_progress.json``, called with ``(done,
    total)`` by the rollout engine: the first and last counts always, else at most every
    ``min_interval_s``; ``offset`` and ``total`` place one batch within a stage of several."""

    def __init__(
        self,
        run_dir: str | Path,
        stage: str,
        iteration: int,
        *,
        total: int | None = None,
        offset: int = 0,
        min_interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.path = Path(run_dir) / PROGRESS_FILE
        self.stage, self.iteration = stage, iteration
        self.total, self.offset = total, offset
        self.min_interval_s = min_interval_s
        self._clock = clock
        self._last: float | None = None  # never written: no clock value stands for that

    def __call__(self, done: int, total: int) -> None:
        now = self._clock()
        recent = self._last is not None and now - self._last < self.min_interval_s
        if done < total and recent:
            return
        self._last = now
        data = {
            "stage": self.stage,
            "iteration": self.iteration,
            "done": self.offset + done,
            "total": self.total or total,
            "updated": time.time(),
        }
        atomic_write_text(self.path, json.dumps(data) + "\n", durable=False)  # a display's


def report_status(
    run_dir: str | Path,
    status: Status,
    stages_completed: int,
    stages_total: int | None = None,
    *,
    error: str | None = None,
) -> None:
    """Write the trainer's report to ``run_status.json`` (``stages_total``: the plan's)."""
    data = dict(status=status, stages_completed=stages_completed, stages_total=stages_total)
    data = {k: v for k, v in (data | {"error": error}).items() if v is not None}
    atomic_write_text(
        Path(run_dir) / STATUS_FILE, json.dumps(data | {"updated": time.time()}) + "\n"
    )


async def between_stages(
    run_dir: str | Path,
    stages_completed: int,
    *,
    poll_interval_s: float = 1.0,
    stages_total: int | None = None,
) -> bool:
    """The trainer's check at a stage boundary: waits while paused; returns whether training
    goes on (a ``stop`` is answered by writing ``run`` back, so a resume does not stop)."""
    run_dir = Path(run_dir)
    reported: Status | None = None
    while True:
        wanted = read_request(run_dir)
        if wanted == "stop":
            report_status(run_dir, "stopped", stages_completed, stages_total)
            request(run_dir, "run")
            return False
        if wanted == "run":
            if reported is not None or read_status(run_dir).get("status") != "running":
                report_status(run_dir, "running", stages_completed, stages_total)
            return True
        if reported != "paused":
            report_status(run_dir, "paused", stages_completed, stages_total)
            reported = "paused"
        await asyncio.sleep(poll_interval_s)
