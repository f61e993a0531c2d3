"""The language-model server of ``nip serve``: inference, fine-tuning and their hand-over.

One FastAPI app on one port: ``GET /version`` and ``GET /health``; ``/v1/models``,
``/v1/chat/completions`` and ``/v1/completions`` from the inference engine; OpenAI-compatible
``/v1/files`` and ``/v1/fine_tuning/jobs``, trained as LoRA adapters and loaded into the engine
under the job's ``fine_tuned_model`` without a restart. With an API key every request needs
``Authorization: Bearer <key>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nip.extras import needs, require

with needs("server"):
    from fastapi import FastAPI, File, Form, Request, UploadFile
    from fastapi.responses import Response, StreamingResponse

from nip._version import __version__
from nip.backends.local.adapters import read_adapter_stack
from nip.backends.local.stacked_adapters import concatenated_rank
from nip.backends.local.vllm_python import vllm_available
from nip.backends.self_hosted import API_VERSION
from nip.jobs import FineTuneBackend
from nip.server.auth import BearerTokenMiddleware
from nip.server.config import ServerConfig, check_exposure
from nip.server.engine import (
    Endpoint,
    EngineReply,
    InferenceEngine,
    NoEngine,
    TransformersEngine,
)
from nip.server.fine_tuning import (
    FineTuneQueue,
    RequestError,
    parse_training_file,
    validate_job_request,
)
from nip.server.store import JobRow, ServerStore

log = logging.getLogger(__name__)


#: The extra each engine needs in nip's own environment (vLLM runs in an interpreter of its own).
ENGINE_EXTRAS = {"transformers": "local"}


def engine_kind(config: ServerConfig) -> str:
    """The engine ``config.engine`` names; ``auto`` is vLLM on a GPU where vLLM is installed,
    and the transformers engine otherwise."""
    if config.engine != "auto":
        return config.engine
    python = config.vllm_python or sys.executable
    gpu = config.resolved_device == "cuda"
    return "vllm" if gpu and vllm_available(python) else "transformers"


def build_engine(
    config: ServerConfig, model: Path, log_dir: Path, kind: str | None = None
) -> InferenceEngine:
    """The engine ``kind`` (default: the one :func:`engine_kind` names for ``config``), serving
    the model in ``model``."""
    kind = kind or engine_kind(config)
    if kind == "vllm":
        from nip.server.vllm_engine import VllmEngine

        return VllmEngine(config, model, log_dir)
    if kind == "transformers":
        require(ENGINE_EXTRAS[kind])
        return TransformersEngine(str(model), config.base_model_name, config.resolved_device)
    return NoEngine(config.base_model_name)


def build_fine_tune_backend(config: ServerConfig) -> FineTuneBackend:
    """LoRA training processes (under accelerate for several processes or a config)."""
    from nip.jobs.local_lora import LocalLoraFineTuneBackend

    devices = config.training_devices
    env = {"CUDA_VISIBLE_DEVICES": devices} if devices is not None else {}
    return LocalLoraFineTuneBackend(
        config.storage_path / "jobs",
        processes=config.training_processes,
        accelerate_config=config.accelerate_config,
        env=env,
    )


class _Models:
    """Which names a job may train from: the base model, or an adapter a job produced."""

    def __init__(self, config: ServerConfig, folder: Path, store: ServerStore):
        self.base = config.base_model_name
        self.base_aliases = {self.base, config.model, folder.name, str(folder)}
        self.folder = folder
        self.store = store

    def resolve(self, name: str) -> tuple[str, str | None]:
        """(base model folder, adapter to continue from) for a job's ``model``; a
        :class:`RequestError` when no base model or succeeded job has that name."""
        if name in self.base_aliases:
            return str(self.folder), None
        for job in self.store.list_jobs("succeeded"):
            if job.fine_tuned_model == name and job.adapter_path:
                return str(self.folder), job.adapter_path
        raise RequestError(
            f"model {name!r} is not available for fine-tuning here: it is neither the base "
            f"model {self.base!r} nor a model a job here produced",
            param="model",
        )


def _reply(reply: EngineReply) -> Response:
    if reply.stream is not None:
        return StreamingResponse(reply.stream, reply.status, reply.headers, reply.media_type)
    return Response(reply.body, reply.status, reply.headers, reply.media_type)


#: Largest upload accepted, in bytes.
MAX_FILE_BYTES = 512 * 1024 * 1024


async def _refuse(request: Request, error: RequestError) -> Response:
    """A :class:`RequestError` a route raised, in the OpenAI API's error shape."""
    return _reply(EngineReply.error(error.status, str(error), param=error.param))


def _found(value: Any, what: str) -> Any:
    """``value``, unless it is None or False: then a 404 saying there is no ``what``."""
    if value is None or value is False:
        raise RequestError(f"no {what}", status=404)
    return value


def add_fine_tuning_routes(
    app,
    store: ServerStore,
    queue: FineTuneQueue,
    *,
    check_job: Callable[[dict[str, Any]], None],
) -> None:
    """Mount ``/v1/files`` and ``/v1/fine_tuning/jobs`` on ``app``; ``check_job`` may refuse a
    job-creation body with a :class:`RequestError`, answered (as any a route raises) with its
    status and message."""
    app.add_exception_handler(RequestError, _refuse)

    @app.post("/v1/files")
    async def upload_file(file: UploadFile = File(...), purpose: str = Form(...)):  # noqa: B008
        if purpose != "fine-tune":
            raise RequestError(f"purpose={purpose!r}: only 'fine-tune' is supported")
        content = await file.read(MAX_FILE_BYTES + 1)
        if len(content) > MAX_FILE_BYTES:
            raise RequestError("the file is larger than 512 MiB", status=413)
        # Either format is fine at upload; the job's method decides which is required.
        parse_training_file(content, None)
        return store.add_file(file.filename or "upload.jsonl", purpose, content)

    @app.get("/v1/files")
    async def list_files():
        return {"object": "list", "data": store.list_files()}

    @app.get("/v1/files/{file_id}")
    async def retrieve_file(file_id: str):
        return _found(store.get_file(file_id), f"file {file_id}")

    @app.get("/v1/files/{file_id}/content")
    async def file_content(file_id: str):
        content = _found(store.file_content(file_id), f"file {file_id}")
        return Response(content, media_type="application/jsonl")

    @app.delete("/v1/files/{file_id}")
    async def delete_file(file_id: str):
        _found(store.delete_file(file_id), f"file {file_id}")
        return {"object": "file", "id": file_id, "deleted": True}

    @app.post("/v1/fine_tuning/jobs")
    async def create_job(request: Request):
        try:
            body: dict[str, Any] = await request.json()
        except json.JSONDecodeError:
            raise RequestError("the request body is not JSON") from None
        method, extra = validate_job_request(body)
        check_job(body)
        content = store.file_content(body["training_file"])
        if content is None:
            raise RequestError(f"no file {body['training_file']}", param="training_file")
        parse_training_file(content, method["type"])
        suffix, seed = body.get("suffix"), body.get("seed")
        job = store.add_job(body["model"], body["training_file"], method, suffix, seed, extra)
        queue.wake()
        return job.to_openai()

    @app.get("/v1/fine_tuning/jobs")
    async def list_jobs(limit: int = 20, after: str | None = None):
        jobs = [j.to_openai() for j in store.list_jobs()][::-1]
        if after is not None:
            ids = [j["id"] for j in jobs]
            jobs = jobs[ids.index(after) + 1 :] if after in ids else []
        return {"object": "list", "data": jobs[:limit], "has_more": len(jobs) > limit}

    @app.get("/v1/fine_tuning/jobs/{job_id}")
    async def retrieve_job(job_id: str):
        return _found(store.get_job(job_id), f"fine-tuning job {job_id}").to_openai()

    @app.post("/v1/fine_tuning/jobs/{job_id}/cancel")
    async def cancel_job(job_id: str):
        return (await queue.cancel(job_id)).to_openai()

    @app.get("/v1/fine_tuning/jobs/{job_id}/events")
    async def job_events(job_id: str, limit: int = 20):
        _found(store.get_job(job_id), f"fine-tuning job {job_id}")
        events = store.events(job_id)
        return {"object": "list", "data": events[:limit], "has_more": len(events) > limit}


def create_server_app(
    config: ServerConfig,
    *,
    api_key: str | None = None,
    engine: InferenceEngine | None = None,
    fine_tune_backend: FineTuneBackend | None = None,
) -> FastAPI:
    """The server's app (its engine and job queue run while the app does): ``api_key`` every request
    must carry (None: none), ``engine`` and ``fine_tune_backend`` defaulting to ``config``'s."""
    root = config.storage_path
    store = ServerStore(root)
    kind = engine_kind(config) if engine is None else None  # decided once: auto asks vLLM's Python
    if kind in ENGINE_EXTRAS:  # before the model is looked for: converting it needs the same extra
        require(ENGINE_EXTRAS[kind])
    folder = config.model_folder()
    engine = engine or build_engine(config, folder, root / "logs", kind)
    models = _Models(config, folder, store)

    async def load_into_engine(job: JobRow) -> None:
        if job.adapter_path and job.fine_tuned_model:
            await engine.load_adapter(job.fine_tuned_model, job.adapter_path)
            store.add_event(job.id, "info", f"Serving {job.fine_tuned_model} for inference.")

    queue = FineTuneQueue(
        store,
        fine_tune_backend or build_fine_tune_backend(config),
        max_concurrent=config.max_concurrent_jobs,
        poll_interval_s=config.poll_interval_s,
        on_succeeded=load_into_engine,
        resolve_model=models.resolve,
        reserved_names=models.base_aliases,
        before_training=engine.pause,
        after_training=engine.resume,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app):
        for job in store.list_jobs("succeeded"):  # every earlier model stays servable
            with contextlib.suppress(Exception):
                await load_into_engine(job)
        await engine.start()
        task = asyncio.create_task(queue.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await engine.stop()
            store.close()

    app = FastAPI(title="nip language-model server", lifespan=lifespan)
    app.state.store, app.state.queue, app.state.engine = store, queue, engine

    def check_job(body: dict[str, Any]) -> None:
        lora = body.get("lora") or {}
        if lora.get("quantization", "none") != "none" and config.resolved_device != "cuda":
            raise RequestError(
                f"lora.quantization={lora['quantization']!r}: QLoRA needs a CUDA GPU and this "
                "server trains on the CPU; set the agent's quantization to 'none'",
                param="lora.quantization",
            )
        previous = models.resolve(str(body.get("model")))[1]  # refuses a model not served here
        rank = lora.get("rank")
        if engine.kind != "vllm" or not isinstance(rank, int):
            return
        if rank > config.max_lora_rank:
            raise RequestError(
                f"lora.rank={rank}: this server's vLLM serves ranks up to "
                f"{config.max_lora_rank} (nip serve --max-lora-rank)",
                param="lora.rank",
            )
        if lora.get("stack") and previous is not None:
            # vLLM gets one adapter as wide as the whole stack: refuse now, not after training.
            total = concatenated_rank(read_adapter_stack(previous)) + rank
            if total > config.max_lora_rank:
                raise RequestError(
                    f"lora.rank={rank} stacked on {body['model']!r} adds up to rank {total}, "
                    f"above the {config.max_lora_rank} this server's vLLM serves "
                    "(nip serve --max-lora-rank)",
                    param="lora.rank",
                )

    add_fine_tuning_routes(app, store, queue, check_job=check_job)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": __version__, "api_version": API_VERSION}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "engine": asdict(engine.status()),
            "jobs": {s: len(store.list_jobs(s)) for s in ("queued", "running")},
        }

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        status = engine.status()
        names = [(status.base_model, None)] + [(a, status.base_model) for a in status.adapters]
        data = [{"id": n, "object": "model", "owned_by": "nip", "parent": p} for n, p in names]
        return {"object": "list", "data": data}

    async def forward(endpoint: Endpoint, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _reply(EngineReply.error(400, "the request body is not JSON"))
        if not isinstance(body, dict):
            return _reply(EngineReply.error(400, "the request body must be a JSON object"))
        return _reply(await engine.forward(endpoint, body))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await forward("chat/completions", request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await forward("completions", request)

    if api_key:
        app.add_middleware(BearerTokenMiddleware, token=api_key)
    return app


def run_server(config: ServerConfig, api_key: str | None = None) -> None:
    """Serve until interrupted (Ctrl-C or SIGTERM), then stop vLLM and the queue
    (:class:`InsecureServerError` beyond loopback without ``api_key``)."""
    import uvicorn

    check_exposure(config.host, api_key)
    app = create_server_app(config, api_key=api_key)
    uvicorn.run(app, host=config.host, port=config.port, log_level="info", lifespan="on")
