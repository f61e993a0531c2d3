"""Local LoRA fine-tuning (TRL + PEFT): each job has its own folder, and its state is on disk.

A job's folder (``<jobs_dir>/<job id>``) holds ``spec.json``, ``status.json``, ``events.jsonl``,
``log.txt`` and, once it succeeds, ``adapter/``. Nothing a restart needs is kept in memory, and
creating a job whose folder exists returns that job rather than training twice.

- :class:`LocalLoraFineTuneBackend`: one process per job (``python -m nip.jobs.lora_train
  JOB_DIR``), possibly on several GPUs through ``accelerate``.
- :class:`InProcessLoraFineTuneBackend`: jobs train one after another in a worker thread, with
  the libraries imported and the base weights loaded once (shared with the local backend, or
  kept by :class:`KeptBaseWeights` on a GPU). A job whose process died is trained again by the
  next backend that looks at it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nip.errors import FineTuneError
from nip.extras import require
from nip.jobs._types import FineTuneEvent, FineTuneJob, FineTuneSpec
from nip.utils.files import atomic_write_text
from nip.utils.imports import heavy_imports
from nip.utils.processes import end_of_file, start_logged


def slug(text: str, limit: int = 80, empty: str = "job") -> str:
    """``text`` as a folder name (a job's, an adapter's): at most ``limit`` safe characters."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:limit] or empty


def read_status(job_dir: Path) -> dict[str, Any] | None:
    """The job's ``status.json``, or None where no job was written."""
    try:
        return json.loads((job_dir / "status.json").read_text())
    except FileNotFoundError:
        return None


def job_from_status(job_id: str, status: Mapping[str, Any]) -> FineTuneJob:
    """The job its ``status.json`` describes (its model, once it succeeded: the one the
    status names, else the job's id)."""
    state = status["status"]
    model = (status.get("fine_tuned_model") or job_id) if state == "succeeded" else None
    fields = ("adapter_path", "error", "trained_tokens", "training_loss")
    return FineTuneJob(job_id, state, model, **{f: status.get(f) for f in fields})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A finished child that nobody waited for is a zombie: not alive.
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return waited == 0


class LocalLoraFineTuneBackend:
    """Trains LoRA adapters on this machine (CPU or GPU), one process per job.

    Args:
        jobs_dir: Where job folders go (usually ``<run_dir>/jobs``).
        python: The interpreter that runs the training process.
        processes: Training processes per job; above 1 (or with ``accelerate_config``, FSDP,
            DeepSpeed...) the job runs under ``accelerate launch``.
        env: Extra environment variables of the training process (``CUDA_VISIBLE_DEVICES``).
    """

    name = "local-lora"

    def __init__(
        self,
        jobs_dir: str | Path,
        python: str | None = None,
        *,
        processes: int = 1,
        accelerate_config: str | None = None,
        env: Mapping[str, str] | None = None,
    ):
        self.jobs_dir = Path(jobs_dir)
        self.python = python or sys.executable
        self.processes = processes
        self.accelerate_config = accelerate_config
        self.env = dict(env or {})

    def command(self, job_dir: Path) -> list[str]:
        """The command line of a job's training process."""
        launch: list[str] = [self.python]
        if self.processes > 1 or self.accelerate_config:
            launch += ["-m", "accelerate.commands.launch", "--num_processes", str(self.processes)]
            if self.processes > 1:
                launch.append("--multi_gpu")
            if self.accelerate_config:
                launch += ["--config_file", self.accelerate_config]
        return [*launch, "-m", "nip.jobs.lora_train", str(job_dir)]

    def _dir(self, job_id: str) -> Path:
        path = (self.jobs_dir / job_id).resolve()
        if path.parent != self.jobs_dir.resolve():
            raise FineTuneError(f"invalid job id {job_id!r}")
        return path

    def _write_new_job(self, spec: FineTuneSpec) -> tuple[str, Path, bool]:
        """The job's id and folder, and whether it is new (its spec and ``pending`` status written).
        A job named like one that failed or was cancelled is a new attempt in ``<name>-2``,
        ``<name>-3``..."""
        if not spec.examples:
            raise FineTuneError("a fine-tuning job needs at least one example")
        # Unique: two jobs made in the same second once shared a clock-made name.
        name = slug(spec.job_name or f"{spec.method}-{uuid.uuid4().hex[:12]}")
        for attempt in itertools.count(1):
            job_id = name if attempt == 1 else f"{name}-{attempt}"
            job_dir = self._dir(job_id)
            status = read_status(job_dir)
            if status is None:
                break  # a new job
            if status["status"] not in ("failed", "cancelled"):
                return job_id, job_dir, False
            # A job of that name failed or was cancelled: this is another attempt.
        job_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(job_dir / "spec.json", json.dumps(spec.to_dict()))
        atomic_write_text(
            job_dir / "status.json", json.dumps({"status": "pending", "updated": time.time()})
        )
        return job_id, job_dir, True

    async def create_job(self, spec: FineTuneSpec) -> str:
        job_id, job_dir, new = self._write_new_job(spec)
        if not new:
            return job_id  # submitted before a restart: do not train twice
        environment = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            **self.env,
        }
        process = start_logged(self.command(job_dir), job_dir / "log.txt", environment)
        atomic_write_text(job_dir / "pid", str(process.pid))
        return job_id

    async def get_job(self, job_id: str) -> FineTuneJob:
        job_dir = self._dir(job_id)
        status = read_status(job_dir)
        if status is None:
            return FineTuneJob(id=job_id, status="not_found")
        if status["status"] in ("pending", "running"):
            status = await self._unfinished(job_id, job_dir, status)
        return job_from_status(job_id, status)

    async def _unfinished(self, job_id: str, job_dir: Path, status: dict) -> dict[str, Any]:
        """The status of a job pending or running: failed if its process ended without saying
        so (killed, out of memory...)."""
        pid = self._pid(job_dir)
        if pid is None or _alive(pid):
            return status
        again = read_status(job_dir) or status
        if again["status"] not in ("pending", "running"):
            return again
        tail = end_of_file(job_dir / "log.txt", 1500)
        return {"status": "failed", "error": f"the training process died:\n{tail}"}

    def _pid(self, job_dir: Path) -> int | None:
        try:
            return int((job_dir / "pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    async def cancel_job(self, job_id: str) -> None:
        job_dir = self._dir(job_id)
        status = read_status(job_dir)
        if status is None:
            return
        self._stop(job_id, job_dir, status["status"])
        atomic_write_text(job_dir / "status.json", json.dumps({**status, "status": "cancelled"}))

    def _stop(self, job_id: str, job_dir: Path, state: str) -> None:
        """End a cancelled job's training (its process group)."""
        pid = self._pid(job_dir)
        if state in ("pending", "running") and pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)

    async def list_events(self, job_id: str) -> list[FineTuneEvent]:
        path = self._dir(job_id) / "events.jsonl"
        if not path.exists():
            return []
        return [FineTuneEvent(**json.loads(line)) for line in path.read_text().splitlines()]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(jobs_dir={str(self.jobs_dir)!r})"


_ONE_JOB_AT_A_TIME = threading.Lock()
"""Held while a job trains in this process: jobs share the machine's cores (and memory), so
two backends of one run (prover and verifier) train one after another, not side by side."""


class KeptBaseWeights:
    """The base weights the last in-process job loaded itself, shared with the next job (one model
    at a time; under ``_ONE_JOB_AT_A_TIME``). They matter where generation runs elsewhere (vLLM)."""

    def __init__(self) -> None:
        self.model: str | None = None
        self.weights: Mapping[str, Any] | None = None
        self.loads = 0  # weights a job had to load itself (kept or not)

    def keep(self, model: str, weights: Mapping[str, Any]) -> None:
        self.model, self.weights = model, weights
        self.loads += 1

    def get(self, model: str) -> Mapping[str, Any] | None:
        return self.weights if model == self.model else None


_KEPT_BASE_WEIGHTS = KeptBaseWeights()
"""Shared by every in-process backend of the process: an iteration's prover and verifier
jobs come from two backends."""


class InProcessLoraFineTuneBackend(LocalLoraFineTuneBackend):
    """Trains LoRA adapters in a worker thread of this process, one job after another.

    Job folders are :class:`LocalLoraFineTuneBackend`'s, with this process's id in ``pid``; a job
    pending or running whose process is gone is trained again here from its ``spec.json``. Losses
    go to ``events.jsonl``, not the terminal.

    Args:
        warm_up: Import the training libraries in the worker thread now.
        base_weights: Gives the base weights already loaded in this process (the local backend's
            ``loaded_base_weights``), shared instead of loading a second copy.
        keep_base_weights: Keep the weights a job loads for the next job (:class:`KeptBaseWeights`).
            Default: on a GPU; on the CPU a job reads a memory map and keeping would hold memory.

    Raises:
        MissingExtraError: The training libraries are not installed (``nip[train]``).
    """

    name = "local-lora-in-process"

    def __init__(
        self,
        jobs_dir: str | Path,
        *,
        warm_up: bool = True,
        base_weights: Callable[[str], Mapping[str, Any] | None] | None = None,
        keep_base_weights: bool | None = None,
        kept: KeptBaseWeights | None = None,
    ):
        require("lora")  # refused here, not in the worker thread
        super().__init__(jobs_dir)
        self._base_weights = base_weights
        self._keep = keep_base_weights
        self.kept = kept or _KEPT_BASE_WEIGHTS
        # A daemon thread: Ctrl-C exits at once; the resumed run trains the job again.
        self._queue: queue.SimpleQueue[tuple[str, Path, threading.Event] | None] = (
            queue.SimpleQueue()
        )
        self._running: set[str] = set()
        self._cancelled: dict[str, threading.Event] = {}
        self._worker = threading.Thread(
            target=self._serve, args=(warm_up,), name="nip-lora", daemon=True
        )
        self._worker.start()

    async def create_job(self, spec: FineTuneSpec) -> str:
        job_id, job_dir, new = self._write_new_job(spec)
        if new:  # one submitted before a restart: get_job trains it again if need be
            self._start(job_id, job_dir)
        return job_id

    async def _unfinished(self, job_id: str, job_dir: Path, status: dict) -> dict[str, Any]:
        """A job pending or running that no backend of a live process trains (a killed run)
        is trained again from its spec (its ``pid`` this process's: another backend of this
        process may be training it)."""
        pid = self._pid(job_dir)
        if job_id not in self._running and (
            pid is None or (pid != os.getpid() and not _alive(pid))
        ):
            status = {"status": "pending", "updated": time.time()}
            atomic_write_text(job_dir / "status.json", json.dumps(status))
            self._start(job_id, job_dir)
        return status

    def _stop(self, job_id: str, job_dir: Path, state: str) -> None:
        if job_id in self._cancelled:
            self._cancelled[job_id].set()  # the job stops at its next step, saving nothing

    def _start(self, job_id: str, job_dir: Path) -> None:
        atomic_write_text(job_dir / "pid", str(os.getpid()))
        cancelled = self._cancelled.setdefault(job_id, threading.Event())
        self._running.add(job_id)
        self._queue.put((job_id, job_dir, cancelled))

    def _serve(self, warm_up: bool) -> None:
        """The worker thread: import the libraries (if asked), then train queued jobs."""
        from nip.backends.local._memory import release_free_memory
        from nip.jobs.lora_train import TrainingOptions, import_training_libraries, run_job

        if warm_up:
            with heavy_imports():  # the embedded model's thread may be importing meanwhile
                import_training_libraries()
        while (item := self._queue.get()) is not None:
            job_id, job_dir, cancelled = item
            try:
                with heavy_imports():  # imported before the job: training imports nothing new
                    import_training_libraries()
                with _ONE_JOB_AT_A_TIME:
                    if not cancelled.is_set():
                        import torch  # imported above: keep by default on a GPU

                        keep = self._keep if self._keep is not None else torch.cuda.is_available()
                        options = TrainingOptions(
                            quiet=True,
                            stop=cancelled,
                            base_weights=self._weights_for,
                            loaded_base=self.kept.keep if keep else None,
                        )
                        run_job(job_dir, options)
                    release_free_memory()  # the training peak is not kept for the run
            finally:
                self._running.discard(job_id)

    def _weights_for(self, model: str) -> Mapping[str, Any] | None:
        """The base weights a job shares: the local backend's, else those a job kept."""
        given = self._base_weights(model) if self._base_weights is not None else None
        return given if given is not None else self.kept.get(model)

    def close(self) -> None:
        """Let queued and running jobs finish, then stop the worker thread."""
        self._queue.put(None)
        self._worker.join()
