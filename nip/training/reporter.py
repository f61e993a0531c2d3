"""What a training run shows its user: the stage it is in, a bar per stage, a line per iteration.

One of the trainer's default callbacks. In a terminal or notebook each stage gets a header and a
progress bar (fine-tuning's fed by the jobs' events); into a file or pipe each stage is one plain
line. Each iteration ends with a summary of its metrics, the run with its spend beside its
estimate (:mod:`nip.runs.spend`). ``show_progress=False`` turns it all off.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, TextIO

from nip.runs.spend import RunSpend, read_spend, usd
from nip.training.callbacks import TrainerCallback
from nip.training.context import RunContext
from nip.utils.notices import in_notebook, run_stream

_QUIET_STAGES = frozenset({"log_stats", "create_fine_tune_jobs", "switch_models"})
_SUMMARY = {
    "accuracy": "accuracy",
    "verifier.mean_episode_reward": "verifier reward",
    "prover.mean_episode_reward": "prover reward",
}


class RunReporter(TrainerCallback):
    """A callback that prints a run's progress to ``stream`` (standard error; in a notebook,
    standard output).

    Args:
        bars: Progress bars (default: in a terminal or notebook), else a line per stage.
        poll_s: How often the fine-tuning bar reads the jobs' events.
        final_read_timeout_s: How long the last read of the events may take.
        engines_after_s: How long the engines may take to start before a line says so.
    """

    def __init__(
        self,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        bars: bool | None = None,
        poll_s: float = 1.0,
        final_read_timeout_s: float = 10.0,
        engines_after_s: float = 2.0,
    ):
        self.enabled = enabled
        self.stream = stream or run_stream()
        self.bars = _interactive(self.stream) if bars is None else bars
        self.poll_s = poll_s
        self.final_read_timeout_s = final_read_timeout_s
        self.engines_after_s = engines_after_s
        self._iteration_started: float | None = None
        self._stage: tuple[str, float, asyncio.Event, asyncio.Future | None] | None = None
        self._engines: tuple[float, asyncio.Future] | None = None

    async def on_engines_wait(self, run: RunContext, *, done: bool) -> None:
        """Around the wait for the agents' engines: a line once it lasted ``engines_after_s``,
        and how long it took."""
        if not self.enabled:
            return
        if not done:
            self._engines = (time.monotonic(), asyncio.ensure_future(self._announce_engines()))
            return
        if self._engines is None:
            return
        (started, announcing), self._engines = self._engines, None
        announced = announcing.done()
        announcing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await announcing
        if announced:
            self._print(f"  engines ready in {time.monotonic() - started:.1f} s")

    async def _announce_engines(self) -> None:
        await asyncio.sleep(self.engines_after_s)
        self._print("starting the agents' model engines (vLLM or nip serve: about a minute)")

    async def on_stage_begin(self, run: RunContext, stage: str) -> None:
        """Announce the stage ``run`` is about to run (and watch its jobs while they train)."""
        if self._iteration_started is None:
            self._iteration_started = time.monotonic()
        self._stage = None
        if not self.enabled or stage in _QUIET_STAGES or (label := _describe(run, stage)) is None:
            return
        self._print(f"iteration {run.state.iteration + 1}/{len(run.plan)} · {label}")
        ended = asyncio.Event()
        watcher = None
        if stage == "await_fine_tune_jobs":
            watcher = asyncio.ensure_future(self._watch_jobs(run, ended))
        self._stage = (label, time.monotonic(), ended, watcher)

    async def on_stage_end(
        self, run: RunContext, stage: str, error: BaseException | None = None
    ) -> None:
        """Say how long the stage took (and sum up an iteration that ended with it)."""
        current, self._stage = self._stage, None
        if current is not None:
            label, started, ended, watcher = current
            if watcher is not None:
                ended.set()  # one last read, so the jobs' final steps are counted
                with contextlib.suppress(TimeoutError):  # the watcher is cancelled then
                    await asyncio.wait_for(watcher, self.final_read_timeout_s)
            if error is None and not self.bars:
                self._print(f"  {label}: done in {time.monotonic() - started:.1f} s")
        if error is None and stage == run.step.stages[-1]:  # the iteration's last stage
            seconds = time.monotonic() - (self._iteration_started or time.monotonic())
            self._iteration_started = None
            if self.enabled:
                self._print(_summary(run, run.state.iteration, seconds))

    async def on_train_end(self, run: RunContext) -> None:
        """The run's spend beside its estimate (:mod:`nip.runs.spend`)."""
        if self.enabled:
            self._print(f"run finished · {read_spend(run.run_dir.path).describe()}")

    # ------------------------------------------------------------------ details
    async def _watch_jobs(self, run: RunContext, ended: asyncio.Event) -> None:
        """Show the submitted jobs' steps and latest loss until ``ended`` (then a last read)."""
        groups = run.submitted()
        bar = None
        if self.bars:
            from tqdm.auto import tqdm

            bar = tqdm(desc="training steps", unit="step", file=self.stream, leave=False)
        seen: dict[str, tuple[int, float | None]] = {}
        try:
            while True:
                last_read = ended.is_set()
                for name, group in groups.items():
                    job_id = group.submitted_job_id  # a resubmitted job's, once there is one
                    if not job_id:
                        continue
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


def _describe(run: RunContext, stage: str) -> str | None:
    """The stage's line, or None where it does nothing worth one (a test only runs on some
    iterations, fine-tuning where jobs were submitted)."""
    if stage == "sample_rollouts":
        return f"sampling {run.step.items} dialogues"
    if stage == "test":
        return "testing" if run.step.tests else None
    if stage == "await_fine_tune_jobs":
        return f"fine-tuning {' and '.join(run.submitted())}" if run.submitted() else None
    return stage.replace("_", " ")


def _summary(run: RunContext, iteration: int, seconds: float) -> str:
    rows = {
        row["split"]: row
        for row in run.run_dir.metrics_records()
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
    spent = RunSpend.from_records(rows.values()).by_iteration.get(iteration, {})
    parts.append(f"spent {usd(spent.get('total_usd', 0.0))}")
    total = len(run.plan)
    return f"iteration {iteration + 1}/{total} done in {seconds:.0f} s · " + " · ".join(parts)


def _interactive(stream: TextIO) -> bool:
    if in_notebook():
        return True  # a notebook: tqdm.auto draws widgets
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
