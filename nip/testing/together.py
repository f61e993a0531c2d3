"""A local fake of Together AI's API: files, fine-tuning jobs, their events and loss, and chat
with the models the jobs produce, for tests and tutorials without the network.

It answers the requests :mod:`nip.providers.together` sends with the shapes Together documents
(its OpenAPI description, github.com/togethercomputer/openapi ``openapi.yaml`` of 2026-04-28:
``FileResponse``, ``FinetuneResponse``/``FinetuneResponseTruncated``, ``FinetuneJobStatus``,
``FineTuneEvent``, ``ErrorData``; the metrics endpoint's ``train/loss`` snapshots; and
docs.together.ai's data-preparation page for the conversational and preference line
formats). Chat completions come from :func:`nip.testing.server`'s machinery (the dummy
backend by default) and answer only the base models and the models of completed jobs, under
``model_output_name``, as Together's serverless LoRA inference does.

A job moves one status per ``GET /fine-tunes/{id}``: pending, then running (step 1 and its
loss), then completed (or error, when scripted to fail) at the ``polls_to_finish``-th look.

Examples:
    >>> fake = FakeTogether(fail_first=1)
    >>> with fake.serve() as server:  # doctest: +SKIP
    ...     os.environ["TOGETHER_BASE_URL"] = server.base_url
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nip.backends._types import ChatBackend
from nip.testing._chat import ChatState, Reply, error_reply, json_reply, respond
from nip.testing.server import RunningServer, serve

#: A base model Together fine-tunes and serves LoRA adapters of (its LoRA inference list).
BASE_MODEL = "meta-llama/Meta-Llama-3.1-8B-Instruct-Reference"
#: The error a scripted failure reports.
FAKE_TRAINING_ERROR = "Training failed: CUDA out of memory (fake)"


@dataclass
class FakeJob:
    """A job as the fake keeps it: the request it was created with and where it stands."""

    id: str
    request: dict[str, Any]
    lines: list[dict[str, Any]]
    fails: bool
    created: float
    polls: int = 0
    status: str = "pending"
    output_name: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, float]] = field(default_factory=list)


class FakeTogether:
    """The state and routes of the fake API.

    Args:
        base_models: The models it fine-tunes and serves; others are refused (400).
        fail_first: How many jobs end in ``error`` before jobs start to complete.
        always_fail: Every job ends in ``error``.
        polls_to_finish: The look at a job that finds it ended.
        max_lora_rank: A larger ``lora_r`` is refused, as for a model's limits.
        api_key: Requests must carry ``Authorization: Bearer <api_key>`` (None: any).
        backend: Answers chat requests (default: the dummy backend).
        user: The namespace of output model names.

    Attributes:
        jobs: Every job, by id, in creation order.
        created: The body of every ``POST /fine-tunes``, refused ones included.
        chat_models: The model of every chat request, in order.
    """

    def __init__(
        self,
        base_models: Sequence[str] = (BASE_MODEL,),
        *,
        fail_first: int = 0,
        always_fail: bool = False,
        polls_to_finish: int = 2,
        max_lora_rank: int = 64,
        api_key: str | None = None,
        backend: ChatBackend | None = None,
        user: str = "nip-tester",
    ):
        from nip.backends.dummy import DummyBackend

        self.base_models = tuple(base_models)
        self.fail_first = fail_first
        self.always_fail = always_fail
        self.polls_to_finish = max(polls_to_finish, 2)
        self.max_lora_rank = max_lora_rank
        self.api_key = api_key
        self.user = user
        self.chat = ChatState(backend or DummyBackend(), 0.0, None, self.base_models, api_key)
        self.files: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, FakeJob] = {}
        self.created: list[dict[str, Any]] = []
        self.chat_models: list[str] = []
        self._ids = itertools.count(1)

    # ------------------------------------------------------------------ serving
    def serve(self) -> RunningServer:
        """Serve the fake on loopback (``.base_url`` is the ``TOGETHER_BASE_URL``)."""
        return serve(self.app())

    def app(self) -> Any:
        from fastapi import FastAPI
        from fastapi.responses import Response

        app = FastAPI(title="fake Together AI", docs_url=None, redoc_url=None)

        async def route(request: Any) -> Any:
            headers = {k.lower(): v for k, v in request.headers.items()}
            form, body = None, b""
            if headers.get("content-type", "").startswith("multipart/form-data"):
                form = await request.form()
            else:
                body = await request.body()
            reply = await self.respond(request.method, request.url.path, headers, body, form)
            return Response(reply.body, reply.status, media_type=reply.content_type)

        app.add_route("/v1/{path:path}", route, methods=["GET", "POST"])
        return app

    async def respond(
        self, method: str, path: str, headers: dict[str, str], body: bytes, form: Any = None
    ) -> Reply:
        """Route one request."""
        if path in ("/v1/chat/completions", "/v1/models"):
            if path == "/v1/chat/completions":
                self.chat_models.append(str(json.loads(body or b"{}").get("model")))
            return await respond(self.chat, method, path, headers, body, _no_wait)
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return error_reply(401, "Invalid API key provided")
        parts = path.removeprefix("/v1/").strip("/").split("/")
        if parts == ["files", "upload"] and method == "POST":
            return await self._upload(form)
        if parts == ["fine-tunes"] and method == "POST":
            return self._create(json.loads(body or b"{}"))
        if len(parts) >= 2 and parts[0] == "fine-tunes":
            job = self.jobs.get(parts[1])
            if job is None:
                return error_reply(404, f"Fine-tune job {parts[1]} not found")
            if len(parts) == 2 and method == "GET":
                return json_reply(self._look(job))
            if parts[2:] == ["events"] and method == "GET":
                return json_reply({"data": job.events})
            if parts[2:] == ["metrics"] and method == "GET":
                return json_reply({"metrics": job.metrics})
            if parts[2:] == ["cancel"] and method == "POST":
                if job.status not in ("completed", "error", "cancelled"):
                    job.status = "cancelled"
                    self._event(job, "job_stopped", "Job cancelled at the user's request")
                return json_reply(self._truncated(job))
        return error_reply(404, f"no route {method} {path}")

    # ------------------------------------------------------------------- files
    async def _upload(self, form: Any) -> Reply:
        if form is None or "file" not in form:
            return error_reply(400, "multipart form with a 'file' part required")
        if form.get("purpose") != "fine-tune":
            return error_reply(400, f"unsupported purpose {form.get('purpose')!r}")
        data = await form["file"].read()
        try:
            lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
            kind = _file_format(lines)
        except ValueError as error:
            return error_reply(400, f"Invalid file format: {error}")
        file_id = f"file-{next(self._ids):08d}"
        self.files[file_id] = {"lines": lines, "format": kind, "name": form.get("file_name")}
        return json_reply(
            {
                "id": file_id,
                "object": "file",
                "created_at": int(time.time()),
                "filename": form.get("file_name") or "train.jsonl",
                "bytes": len(data),
                "purpose": "fine-tune",
                "Processed": True,
                "FileType": form.get("file_type") or "jsonl",
                "LineCount": len(lines),
            }
        )

    # -------------------------------------------------------------------- jobs
    def _create(self, request: dict[str, Any]) -> Reply:
        self.created.append(request)
        refusal = self._refusal(request)
        if refusal:
            return error_reply(400, refusal)
        number = len(self.jobs) + 1
        job_id = f"ft-{hashlib.sha256(str(number).encode()).hexdigest()[:8]}-{number:04d}"
        fails = self.always_fail or number <= self.fail_first
        job = FakeJob(
            job_id, request, self.files[request["training_file"]]["lines"], fails, time.time()
        )
        model = request["model"].split("/")[-1]
        suffix = f"-{request['suffix']}" if request.get("suffix") else ""
        job.output_name = f"{self.user}/{model}{suffix}-{job_id[3:11]}"
        self.jobs[job_id] = job
        self._event(job, "job_pending", "Fine tune request created")
        return json_reply(self._truncated(job))

    def _refusal(self, request: dict[str, Any]) -> str:
        """Why Together would answer 400, or ''."""
        file = self.files.get(request.get("training_file", ""))
        if file is None:
            return f"training_file {request.get('training_file')!r} not found"
        if request.get("model") not in self.base_models:
            return f"Model {request.get('model')!r} is not supported for fine-tuning"
        method = (request.get("training_method") or {"method": "sft"}).get("method")
        wanted = {"sft": "conversational", "dpo": "preference"}.get(method)
        if wanted is None:
            return f"training_method.method must be 'sft' or 'dpo', not {method!r}"
        if file["format"] != wanted:
            return f"a {method} job needs a {wanted} file; the file is {file['format']}"
        kind = request.get("training_type") or {"type": "Lora"}
        rank = kind.get("lora_r")
        if kind.get("type") == "Lora" and rank is not None and rank > self.max_lora_rank:
            return f"lora_r={rank} is above the model's limit of {self.max_lora_rank}"
        if int(request.get("n_epochs", 1)) < 1 or float(request.get("learning_rate", 1e-5)) <= 0:
            return "n_epochs must be >= 1 and learning_rate > 0"
        return ""

    def _look(self, job: FakeJob) -> dict[str, Any]:
        """A ``GET /fine-tunes/{id}``: the job moves on one status, then is described."""
        if job.status in ("pending", "running"):
            job.polls += 1
            if job.polls < self.polls_to_finish:
                if job.status == "pending":
                    job.status = "running"
                    self._event(job, "training_start", "Training started", step=0)
                    self._metric(job, 1, 1.25)
            elif job.fails:
                job.status = "error"
                self._event(job, "job_error", FAKE_TRAINING_ERROR, level="error")
            else:
                job.status = "completed"
                self._metric(job, 2, 0.75)
                self._event(job, "training_complete", "Training completed", step=2)
                self._event(job, "job_complete", f"Job complete: {job.output_name}")
                self.chat.model_names = (*(self.chat.model_names or ()), job.output_name)
        return {
            **self._truncated(job),
            "model_output_name": job.output_name if job.status == "completed" else None,
            "epochs_completed": job.request.get("n_epochs", 1) if job.status == "completed" else 0,
            "progress": {
                "estimate_available": job.status == "running",
                "seconds_remaining": 60 if job.status == "running" else 0,
            },
        }

    def _truncated(self, job: FakeJob) -> dict[str, Any]:
        request = job.request
        tokens = sum(len(json.dumps(line)) // 4 for line in job.lines)
        return {
            "id": job.id,
            "status": job.status,
            "created_at": _iso(job.created),
            "updated_at": _iso(time.time()),
            "model": request["model"],
            "training_file": request["training_file"],
            "suffix": request.get("suffix"),
            "n_epochs": request.get("n_epochs", 1),
            "learning_rate": request.get("learning_rate", 1e-5),
            "batch_size": 8,  # what "max" came to
            "training_method": request.get("training_method", {"method": "sft"}),
            "training_type": request.get("training_type", {"type": "Lora"}),
            "token_count": tokens * int(request.get("n_epochs", 1)),
            "events": [],
        }

    def _event(
        self, job: FakeJob, kind: str, message: str, *, level: str = "info", step: int = 0
    ) -> None:
        job.events.append(
            {
                "object": "fine-tune-event",
                "created_at": _iso(time.time()),
                "level": level,
                "message": message,
                "type": kind,
                "param_count": 0,
                "token_count": 0,
                "total_steps": 2,
                "wandb_url": "",
                "step": step,
                "checkpoint_path": "",
                "model_path": "",
                "training_offset": 0,
                "hash": "",
            }
        )

    def _metric(self, job: FakeJob, step: int, loss: float) -> None:
        job.metrics.append({"train/loss": loss, "train/global_step": step})


async def _no_wait(timeout_s: float) -> None:
    return None


def _iso(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when)) + f".{int(when % 1 * 1000):03d}Z"


def _file_format(lines: list[Any]) -> str:
    """'conversational' or 'preference' (docs.together.ai, data preparation); a file with
    lines of both, or of neither, is refused."""
    kinds = set()
    for number, line in enumerate(lines, 1):
        if not isinstance(line, dict):
            raise ValueError(f"line {number} is not a JSON object")
        if "messages" in line:
            _check_messages(line["messages"], number, "messages")
            kinds.add("conversational")
        elif {"input", "preferred_output", "non_preferred_output"} <= set(line):
            _check_messages(line["input"].get("messages"), number, "input.messages")
            for side in ("preferred_output", "non_preferred_output"):
                output = line[side]
                if not (isinstance(output, list) and output and output[-1]["role"] == "assistant"):
                    raise ValueError(f"line {number}: {side} must end with an assistant message")
            kinds.add("preference")
        else:
            raise ValueError(f"line {number}: no messages, nor input/preferred_output")
    if len(kinds) != 1:
        raise ValueError("the file is empty" if not kinds else "the file mixes formats")
    return kinds.pop()


def _check_messages(messages: Any, number: int, where: str) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"line {number}: {where} must be a non-empty list")
    if messages[0].get("role") not in ("system", "user"):
        raise ValueError(f"line {number}: {where} must start with a system or user message")


__all__ = ["BASE_MODEL", "FAKE_TRAINING_ERROR", "FakeJob", "FakeTogether"]
