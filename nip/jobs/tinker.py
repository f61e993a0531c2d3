"""Fine-tuning on Tinker: nip's own loop drives Tinker's GPUs through the ``tinker`` SDK.

Tinker trains no "job" of its own: the caller sends each step. A job here is that loop,
run as a task of nip's process, with the folder of a local LoRA job (``<jobs_dir>/<job id>``:
``spec.json``, ``status.json``, ``events.jsonl``, see :mod:`nip.jobs.local_lora`):

* SFT: each example (OpenAI fine-tuning lines, :class:`~nip.jobs.FineTuneSpec`) rendered with
  the model's own chat template (the training client's tokenizer), the loss weighted 1 on the
  agent's own turns (its ``assistant`` messages and their end-of-turn tokens), 0 elsewhere;
  ``forward_backward(batch, "cross_entropy")`` then ``optim_step(AdamParams(learning_rate))``
  over ``num_epochs`` in batches of ``batch_size``, each step's loss in ``events.jsonl``
  (the run's progress bar shows it).
* DPO: the sigmoid loss ``-log sigmoid(beta * (chosen - rejected log-ratio))`` through
  ``forward_backward_custom``, its reference log-probabilities computed once by the model
  that sampled the pairs (``compute_logprobs`` of its sampling client).
* The LoRA adapter (rank ``lora_rank``) is new on the base model, or, continuing
  (``fine_tune_from_scratch=False``), a training client made from the previous job's saved
  state. At the end ``save_state`` and ``save_weights_for_sampler``, both named after the
  job: the sampler path (``tinker://<run>/sampler_weights/<job id>``) is the model the group
  generates with next, the state path (``.../weights/<job id>``) its ``adapter_path``.

Before the first dialogue (:meth:`TinkerFineTuneBackend.check_job`) the group's first
LoRA training client is opened and kept for its first job: Tinker publishes no LoRA rank
limit and the SDK reads none before a training client exists, so a rank Tinker will not
train is refused before anything is sampled. Opening it costs no tokens; a run that never
trains leaves that one empty training run (no checkpoint) in Tinker's console.

Resuming: ``status.json`` records the job's Tinker training run as soon as it exists. A job
found pending or running that no task of this process trains (the run was killed) is
finished if its training run holds a sampler checkpoint named after the job, else it is
trained again from its ``spec.json``. A finished job is never trained twice.

The clients come from :func:`connect`, the one seam: ``$NIP_TINKER_CLIENTS``
(``module:callable`` returning a ``(ServiceClient, RestClient)`` pair; the tests' stand-in)
or the SDK's own clients with ``$TINKER_API_KEY``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import math
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nip.errors import AuthenticationError, FineTuneError, ModelNotFoundError
from nip.extras import needs
from nip.jobs._types import FineTuneSpec
from nip.jobs.local_lora import LocalLoraFineTuneBackend, read_status
from nip.jobs.lora_train import add_event, write_status
from nip.jobs.tinker_data import (
    datum,
    dpo_loss,
    reference_logprobs,
    render_preference,
    render_supervised,
)

API_KEY_ENV = "TINKER_API_KEY"
CLIENTS_ENV = "NIP_TINKER_CLIENTS"


# --------------------------------------------------------------------------- clients
@dataclass(frozen=True)
class TinkerClients:
    """The SDK's two entry points: sessions (training, sampling) and REST (models,
    checkpoints)."""

    service: Any  # tinker.ServiceClient
    rest: Any  # tinker.RestClient


def connect() -> TinkerClients:
    """Tinker's clients: those ``$NIP_TINKER_CLIENTS`` names, else the SDK's with the key.

    Raises:
        AuthenticationError: ``$TINKER_API_KEY`` is not set (nothing was sent).
        MissingExtraError: The SDK is not installed (``nip[tinker]``).
    """
    seam = os.environ.get(CLIENTS_ENV)
    if seam:
        module, _, name = seam.partition(":")
        return TinkerClients(*getattr(importlib.import_module(module), name)())
    if not os.environ.get(API_KEY_ENV):
        raise AuthenticationError(
            f"model_provider='Tinker' needs the {API_KEY_ENV} variable (a key from "
            "tinker-console.thinkingmachines.ai)"
        )
    with needs("tinker"):
        import tinker
    return TinkerClients(tinker.ServiceClient(), tinker.RestClient())


async def check_model(
    clients: TinkerClients, model: str, *, train: bool = False
) -> Mapping[str, Any]:
    """The Tinker model ``model`` as the server lists it, before anything is paid for.

    Raises:
        ModelNotFoundError: Tinker does not offer ``model`` (unknown or retired), or cannot
            train it when ``train``.
    """
    capabilities = await clients.rest.get_server_capabilities()
    models = {m.model_name: m for m in capabilities.supported_models if m.model_name}
    found = models.get(model)
    if found is None:
        offered = ", ".join(sorted(models)[:12])
        raise ModelNotFoundError(
            f"model_name={model!r} is not a Tinker model (unknown or retired); Tinker offers: "
            f"{offered}"
        )
    if train and found.trainable is False:
        raise ModelNotFoundError(f"model_name={model!r}: Tinker samples it but cannot train it")
    return found.model_dump()


# ------------------------------------------------------------------------------ jobs
#: The job's checkpoints, named after it: how a resumed run tells a finished job.
SAMPLER_PATH = "{run}/sampler_weights/{job}"


class TinkerSession(Protocol):
    """What a job borrows from the agents' chat backend
    (:class:`nip.providers.tinker.TinkerChatBackend`): its clients, and its sampling
    client of a model (a DPO job's reference)."""

    @property
    def clients(self) -> TinkerClients: ...

    async def sampler(self, model: str) -> Any: ...


class TinkerFineTuneBackend(LocalLoraFineTuneBackend):
    """LoRA training on Tinker, each job a task of this process (see the module docstring).

    Args:
        jobs_dir: Where job folders go (``<run_dir>/jobs``).
        session: The clients and sampling clients it shares with the chat backend.
    """

    name = "tinker"

    def __init__(self, jobs_dir: str | Path, session: TinkerSession):
        super().__init__(jobs_dir)
        self.session = session
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._opened: dict[tuple[str, int, int], Any] = {}  # check_job's, for a job

    async def check_job(self, spec: FineTuneSpec) -> None:
        """Open the LoRA training client the first job will train (kept for it), so that a
        model or a rank Tinker will not train is refused before the first dialogue. Not when
        the job trains on from a saved state, nor when a job of this run already opened one."""
        key = _lora_key(spec)
        if spec.previous_adapter or key in self._opened or self._opened_before(key):
            return
        self._opened[key] = await self._training_client(spec)

    def _opened_before(self, key: tuple[str, int, int]) -> bool:
        """A job of this run has a training run on Tinker for such a LoRA."""
        for spec_file in self.jobs_dir.glob("*/spec.json"):
            spec = json.loads(spec_file.read_text())
            opened = (spec["base_model"], spec["lora_rank"], spec["seed"])
            if opened == key and (read_status(spec_file.parent) or {}).get("training_run"):
                return True
        return False

    async def create_job(self, spec: FineTuneSpec) -> str:
        if spec.stack_lora_adapters or not spec.use_lora:
            raise FineTuneError("Tinker trains one LoRA adapter at a time (no stacking, no full)")
        job_id, job_dir, new = self._write_new_job(spec)
        if new:
            await self._start(job_id, job_dir, spec)
        return job_id

    async def _start(self, job_id: str, job_dir: Path, spec: FineTuneSpec) -> None:
        """Open the job's training client (a refusal, a rank above the model's limit say,
        raises here: nothing is trained) and train it in a task."""
        training = await self._training_client(spec)
        write_status(job_dir, "running", training_run=str(training.model_id), pid=os.getpid())
        task = asyncio.create_task(self._train(job_id, job_dir, spec, training))
        self._tasks[job_id] = task

    async def _training_client(self, spec: FineTuneSpec) -> Any:
        service = self.session.clients.service
        try:
            if spec.previous_adapter:  # training on from the previous job's state
                return await service.create_training_client_from_state(spec.previous_adapter)
            if (opened := self._opened.pop(_lora_key(spec), None)) is not None:
                return opened
            await check_model(self.session.clients, spec.base_model, train=True)
            return await service.create_lora_training_client(
                base_model=spec.base_model, rank=spec.lora_rank, seed=spec.seed
            )
        except ModelNotFoundError as error:
            raise FineTuneError(str(error)) from error
        except Exception as error:
            # A 4xx answer other than a rate limit: the request will not pass later.
            status = getattr(error, "status_code", None)
            if isinstance(status, int) and 400 <= status < 500 and status not in (408, 409, 429):
                raise FineTuneError(
                    f"Tinker refused a LoRA of lora_rank={spec.lora_rank} on "
                    f"{spec.base_model!r}: {error}"
                ) from error
            raise

    async def _train(self, job_id: str, job_dir: Path, spec: FineTuneSpec, training: Any) -> None:
        from tinker import types

        try:
            tokenizer = training.get_tokenizer()
            # A unit: one example's data, trained in the same step (a pair for DPO).
            if spec.method == "supervised":
                units = [
                    [datum(*render_supervised(tokenizer, e["messages"]))] for e in spec.examples
                ]
            else:
                units = [
                    [datum(*s) for s in render_preference(tokenizer, e)] for e in spec.examples
                ]
                sampler = await self.session.sampler(spec.reference_model or spec.base_model)
                flat = [d for unit in units for d in unit]
                logprobs = await reference_logprobs(sampler, flat)
                reference = dict(zip(map(id, flat), logprobs, strict=True))
            batch_size = max(1, spec.batch_size)
            steps = spec.num_epochs * math.ceil(len(units) / batch_size)
            order, step, tokens = list(range(len(units))), 0, 0
            rng = random.Random(spec.seed)
            adam = types.AdamParams(learning_rate=spec.learning_rate)
            for _ in range(spec.num_epochs):
                rng.shuffle(order)
                for start in range(0, len(order), batch_size):
                    batch = [d for i in order[start : start + batch_size] for d in units[i]]
                    if spec.method == "supervised":
                        pending = training.forward_backward(batch, "cross_entropy")
                    else:
                        refs = [reference[id(d)] for d in batch]  # type: ignore[index]
                        pending = training.forward_backward_custom(
                            batch, dpo_loss(spec.dpo_beta or DEFAULT_DPO_BETA, refs)
                        )
                    optimised = training.optim_step(adam)
                    output = await pending
                    await optimised
                    step += 1
                    tokens += sum(d.model_input.length for d in batch)
                    loss = _loss(spec.method, output, batch)
                    add_event(job_dir, f"step {step}: loss {loss:.4f}", step=step, loss=loss,
                              total_steps=steps)  # fmt: skip
            state = await training.save_state(job_id)
            sampler_weights = await training.save_weights_for_sampler(job_id)
            write_status(
                job_dir,
                "succeeded",
                training_run=str(training.model_id),
                fine_tuned_model=sampler_weights.path,
                adapter_path=state.path,
                trained_tokens=tokens,
                training_loss=loss if steps else None,
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:
            run = (read_status(job_dir) or {}).get("training_run")
            message = f"{type(error).__name__}: {error}"
            write_status(job_dir, "failed", training_run=run, error=message)
            add_event(job_dir, f"the job failed: {message}", level="error")

    async def _unfinished(self, job_id: str, job_dir: Path, status: dict) -> dict[str, Any]:
        """A job its process left unfinished (killed; none of this process's tasks trains
        it): finished if Tinker holds its sampler weights, else trained again from its spec."""
        if job_id in self._tasks:
            return status
        run = status.get("training_run")
        if run:
            listed = await self.session.clients.rest.list_checkpoints(run)
            paths = {c.tinker_path for c in listed.checkpoints}
            sampler = f"tinker://{SAMPLER_PATH.format(run=run, job=job_id)}"
            state = sampler.replace("/sampler_weights/", "/weights/")
            if sampler in paths:
                write_status(job_dir, "succeeded", training_run=run, fine_tuned_model=sampler,
                             adapter_path=state if state in paths else None)  # fmt: skip
                return read_status(job_dir) or status
        data = json.loads((job_dir / "spec.json").read_text())
        spec = FineTuneSpec(**{**data, "examples": tuple(data["examples"])})
        write_status(job_dir, "pending")
        await self._start(job_id, job_dir, spec)
        return read_status(job_dir) or status

    def _stop(self, job_id: str, job_dir: Path, state: str) -> None:
        task = self._tasks.get(job_id)
        if task is not None:
            task.cancel()


def _lora_key(spec: FineTuneSpec) -> tuple[str, int, int]:
    """What a new LoRA training client is opened with."""
    return spec.base_model, spec.lora_rank, spec.seed


#: DPO's beta where the agent leaves it None (TRL's and Together's default).
DEFAULT_DPO_BETA = 0.1


def _loss(method: str, output: Any, batch: Sequence[Any]) -> float:
    """A step's loss: the weighted mean token cross-entropy, or the pairs' mean DPO loss."""
    if method != "supervised":
        return float(output.metrics["dpo_loss"])
    total = sum(sum(d.loss_fn_inputs["weights"].data) for d in batch)
    return float(output.metrics["loss:sum"]) / max(total, 1.0)
