"""FastAPI routes for files and fine-tuning jobs (see :mod:`nip.server.fine_tuning`); FastAPI's
names are imported at the top because it reads the routes' annotations at run time."""

import json
from collections.abc import Callable
from typing import Any

from fastapi import File, Form, Request, UploadFile
from fastapi.responses import Response

from nip.server.engine import EngineReply
from nip.server.fine_tuning import (
    FineTuneQueue,
    RequestError,
    parse_training_file,
    validate_job_request,
)
from nip.server.store import ServerStore

#: Largest upload accepted, in bytes.
MAX_FILE_BYTES = 512 * 1024 * 1024


async def _refuse(request: Request, error: RequestError) -> Response:
    """A :class:`RequestError` a route raised, in the OpenAI API's error shape."""
    reply = EngineReply.error(error.status, str(error), param=error.param)
    return Response(reply.body, reply.status, media_type=reply.media_type)


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
        found = store.get_file(file_id)
        if found is None:
            raise RequestError(f"no file {file_id}", status=404)
        return found

    @app.get("/v1/files/{file_id}/content")
    async def file_content(file_id: str):
        content = store.file_content(file_id)
        if content is None:
            raise RequestError(f"no file {file_id}", status=404)
        return Response(content, media_type="application/jsonl")

    @app.delete("/v1/files/{file_id}")
    async def delete_file(file_id: str):
        if not store.delete_file(file_id):
            raise RequestError(f"no file {file_id}", status=404)
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
        job = store.add_job(
            body["model"],
            body["training_file"],
            method,
            body.get("suffix"),
            body.get("seed"),
            extra,
        )
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
        job = store.get_job(job_id)
        if job is None:
            raise RequestError(f"no fine-tuning job {job_id}", status=404)
        return job.to_openai()

    @app.post("/v1/fine_tuning/jobs/{job_id}/cancel")
    async def cancel_job(job_id: str):
        return (await queue.cancel(job_id)).to_openai()

    @app.get("/v1/fine_tuning/jobs/{job_id}/events")
    async def job_events(job_id: str, limit: int = 20):
        if store.get_job(job_id) is None:
            raise RequestError(f"no fine-tuning job {job_id}", status=404)
        events = store.events(job_id)
        return {"object": "list", "data": events[:limit], "has_more": len(events) > limit}
