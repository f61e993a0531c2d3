"""What a training run shows its user: the stage it is in, a bar per stage, a line per iteration.

The trainer calls :meth:`RunReporter.stage` around every stage. In a terminal (or a notebook)
each stage gets a header line and a progress bar (the dialogues' bar comes from the rollout
engine; fine-tuning gets one fed by the jobs' step and loss events); when the output is a file
or a pipe (CI, a log) each stage is one plain line, with no bars. Each iteration ends with a
one-line summary of its metrics. ``show_progress=False`` turns it all off.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from nip.training.trainer import PureTextEiTrainer

_QUIET_STAGES = frozenset({"log_stats", "create_fine_tune_jobs", "switch_models"})
_SUMMARY = {
    "accuracy": "accuracy",
    "verifier.mean_episode_reward": "verifier reward",
    "prover.mean_episode_reward": "prover reward",
}


class RunReporter:
    """Prints a run's progress to ``stream`` (standard error by default; in a notebook,
    standard output, so the lines are plain output rather than red error blocks).

    Args:
        enabled: Print anything at all.
        stream: Where to print.
        bars: Progress bars (default: when ``stream`` is a terminal or this is a notebook);
            otherwise one plain line per stage.
        poll_s: How often the fine-tuning bar reads the jobs' events.
        final_read_timeout_s: How long the last read of the events, when fine-tuning ends,
            may take before the run goes on without it.
    """

    def __init__(
        self,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        bars: bool | None = None,
        poll_s: float = 1.0,
        final_read_timeout_s: float = 10.0,
    ):
        self.enabled = enabled
        # In a notebook, standard error shows as a red block under the cell: the run's lines
        # are plain output there.
        self.stream = stream or (sys.stdout if _in_notebook() else sys.stderr)
        self.bars = _interactive(self.stream) if bars is None else bars
        self.poll_s = poll_s
        self.final_read_timeout_s = final_read_timeout_s
        self._iteration_started: float | None = None

    @contextlib.asynccontextmanager
    async def stage(self, trainer: PureTextEiTrainer, stage: str) -> AsyncIterator[None]:
        """Report the stage ``trainer`` is about to run, while it runs, and when it ends."""
        iteration = trainer.state.iteration
        total = trainer.hyper_params.rl.num_iterations
        if self._iteration_started is None:
            self._iteration_started = time.monotonic()
        if not self.enabled or stage in _QUIET_STAGES or not _shown(trainer, stage):
            yield
            self._maybe_summarise(trainer, stage)
            return
        label = _describe(trainer, stage)
        self._print(f"iteration {iteration + 1}/{total} · {label}")
        started = time.monotonic()
        watcher = None
        ended = asyncio.Event()
        if stage == "await_fine_tune_jobs":
            watcher = asyncio.ensure_future(self._watch_jobs(trainer, ended))
        try:
            yield
        finally:
            if watcher is not None:
                ended.set()  # one last read, so the jobs' final steps are counted
                with contextlib.suppress(TimeoutError):  # the watcher is cancelled then
                    await asyncio.wait_for(watcher, self.final_read_timeout_s)
        if not self.bars:
            self._print(f"  {label}: done in {time.monotonic() - started:.1f} s")
        self._maybe_summarise(trainer, stage)

    @contextlib.asynccontextmanager
    async def waiting_for_engines(self, after_s: float = 2.0) -> AsyncIterator[None]:
        """Around the wait for the agents' engines (a vLLM or ``nip serve`` starting): a
        line once it has lasted ``after_s``, and how long it took; nothing if it is quick."""
        if not self.enabled:
            yield
            return
        started = time.monotonic()

        async def announce() -> None:
            await asyncio.sleep(after_s)
            self._print("starting the agents' model engines (vLLM or nip serve: about a minute)")

        announcing = asyncio.ensure_future(announce())
        try:
            yield
        finally:
            announced = announcing.done()
            announcing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await announcing
            if announced:
                self._print(f"  engines ready in {time.monotonic() - started:.1f} s")

    # ------------------------------------------------------------------ details
    def _maybe_summarise(self, trainer: PureTextEiTrainer, stage: str) -> None:
        iteration = trainer.state.iteration
        last = iteration >= trainer.hyper_params.rl.num_iterations - 1
        if not (stage == "switch_models" or (stage == "test" and last)):
            return
        seconds = time.monotonic() - (self._iteration_started or time.monotonic())
        self._iteration_started = None
        if self.enabled:
            self._print(_summary(trainer, iteration, seconds))

    async def _watch_jobs(self, trainer: PureTextEiTrainer, ended: asyncio.Event) -> None:
        """Show the submitted jobs' training steps and latest loss until ``ended``, reading
        their events once more then."""
        groups = _submitted(trainer)
        bar = None
        if self.bars:
            from tqdm.auto import tqdm

            bar = tqdm(desc="training steps", unit="step", file=self.stream, leave=False)
        seen: dict[str, tuple[int, float | None]] = {}
        try:
            while True:
                last_read = ended.is_set()
                for name, group in groups.items():
                    job_id = group.state.fine_tune_job_id or ""
                    with contextlib.suppress(Exception):  # progress display only
                        events = await group.fine_tune_backend.list_events(job_id)
                        steps = [e.data for e in events if "loss" in e.data and "step" in e.data]
                        if steps:
                            seen[name] = (int(steps[-1]["step"]), steps[-1]["loss"])
                if bar is not None and seen:
                    bar.n = sum(step for step, _ in seen.values())
                    bar.set_postfix_str(
                        " · ".join(f"{n} loss {loss:.3f}" for n, (_, loss) in seen.items()),
                        refresh=True,
                    )
                if last_read:
                    return
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(ended.wait(), self.poll_s)
        finally:
            if bar is not None:
                bar.close()
            elif seen:
                self._print(
                    "  "
                    + " · ".join(
                        f"{n}: {s} steps, loss {loss:.3f}" for n, (s, loss) in seen.items()
                    )
                )

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)


def _describe(trainer: PureTextEiTrainer, stage: str) -> str:
    hp = trainer.hyper_params
    if stage == "sample_rollouts":
        return f"sampling {hp.rl.rollouts_per_iteration} dialogues"
    if stage == "test":
        return "testing"
    if stage == "await_fine_tune_jobs":
        return f"fine-tuning {' and '.join(_submitted(trainer)) or 'nothing'}"
    return stage.replace("_", " ")


def _submitted(trainer: PureTextEiTrainer) -> dict[str, Any]:
    return {
        name: group
        for name, group in trainer.groups.items()
        if group.state.last_job_outcome == "submitted"
    }


def _shown(trainer: PureTextEiTrainer, stage: str) -> bool:
    """Whether the stage does anything worth a line (a test only runs on some iterations)."""
    if stage == "test":
        return trainer.plan[trainer.state.iteration].tests
    if stage == "await_fine_tune_jobs":
        return bool(_submitted(trainer))
    return True


def _summary(trainer: PureTextEiTrainer, iteration: int, seconds: float) -> str:
    rows = {
        row["split"]: row
        for row in trainer.run_dir.metrics_records()
        if row.get("iteration") == iteration
    }
    parts = []
    for split in ("train", "test"):
        row: dict[str, Any] = rows.get(split, {})
        values = [
            f"{label} {row[key]:.2f}"
            for key, label in _SUMMARY.items()
            if isinstance(row.get(key), float)
        ]
        if values:
            parts.append(f"{split}: " + ", ".join(values))
    total = trainer.hyper_params.rl.num_iterations
    return f"iteration {iteration + 1}/{total} done in {seconds:.0f} s · " + " · ".join(parts)


def _in_notebook() -> bool:
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def _interactive(stream: TextIO) -> bool:
    if _in_notebook():
        return True  # a notebook: tqdm.auto draws widgets
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
