"""A test double of Together AI's API, built from its OpenAPI description and its SDK.

Sources: Together's OpenAPI description (github.com/togethercomputer/openapi ``openapi.yaml``
at 090263a, 2026-04-28; the request bodies and answers it checks are in
``together_openapi.json`` beside this file) first, and the ``together`` SDK 3.1's types and
upload flow second, where the SDK sends or reads what the description does not say:

* Request bodies of ``POST /v1/fine-tunes``, ``/v1/fine-tunes/estimate-price`` and
  ``/v1/chat/completions`` are validated against the description's schemas (required
  fields, types, enums); a body that fails is answered 400 with the schema's complaint.
* Files arrive as the SDK sends them: ``POST /v1/files`` (form: purpose, file_name,
  file_type, checksum) answered with a redirect to a ``PUT`` of the bytes, then ``POST
  /v1/files/{id}/preprocess``; a checksum already uploaded is answered 409 with its
  ``file_id``, as the SDK expects. The description's ``POST /v1/files/upload`` works too.
* A job moves one status per ``GET /v1/fine-tunes/{id}`` along its script (default
  queued, running, completed; a failing one ends with
  ``error``, or any status given, ``user_error`` or one nobody knows). Events are spelled
  as the description does (``job_error``, level ``error``) or, with ``sdk_spelling``, as the
  SDK's enums do (``JOB_ERROR``, ``Error``).
* ``GET /v1/fine-tunes/models/limits`` answers the limits of the fine-tunable models (the
  description's fields and the SDK's) and 404 for others, as Together does.
* Chat completions come from :mod:`nip.testing`'s machinery (the dummy backend) for the base
  models and the models of completed jobs, under ``model_output_name``.
* Every request needs ``Authorization: Bearer <api_key>``; another key is answered 401.

Attributes of :class:`FakeTogether` record what arrived: ``requests`` (method and path, in
order), ``created`` (each job body), ``files`` and ``deleted`` (file ids).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from nip.testing._chat import ChatState, Reply, json_reply, respond
from nip.testing.server import RunningServer, serve

#: A base model Together fine-tunes and serves LoRA adapters of (its LoRA inference list).
BASE_MODEL = "meta-llama/Meta-Llama-3.1-8B-Instruct-Reference"
#: A model Together serves for chat but does not fine-tune.
CHAT_ONLY_MODEL = "meta-llama/Llama-3.3-70B-Instruct-Turbo"
#: The error a scripted failure reports.
FAKE_TRAINING_ERROR = "Training failed: CUDA out of memory (fake)"
#: The statuses a job moves through by default (any other of the SDK's can be scripted).
SUCCEEDS = ("queued", "running", "completed")
FAILS = ("queued", "running", "error")


@cache
def description() -> dict[str, Any]:
    """The part of Together's OpenAPI description the double checks, with its two defects
    resolved as its SDK reads it: ``oneOf`` alternatives that overlap (a cosine scheduler's
    arguments are also a linear one's) are read as ``anyOf``, and
    ``TrainingMethodSFT.train_on_inputs``, typed ``boolean`` and also a boolean or
    ``"auto"``, takes ``"auto"`` (what the SDK sends for SFT)."""
    text = (Path(__file__).with_name("together_openapi.json")).read_text(encoding="utf-8")
    spec = json.loads(text.replace('"oneOf":', '"anyOf":'))
    del spec["components"]["schemas"]["TrainingMethodSFT"]["properties"]["train_on_inputs"]["type"]
    return spec


def schema_errors(data: Any, *pointer: str) -> list[str]:
    """What of ``data`` the description's schema at ``pointer`` (keys from the document's
    root) refuses; empty when it is valid."""
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    root = Resource.from_contents(description(), default_specification=DRAFT202012)
    escaped = "/".join(key.replace("~", "~0").replace("/", "~1") for key in pointer)
    validator = jsonschema.Draft202012Validator(
        {"$ref": f"urn:together#/{escaped}"},
        registry=Registry().with_resource("urn:together", root),
    )
    return [
        f"{'.'.join(map(str, e.absolute_path)) or 'the body'}: {e.message}"
        for e in validator.iter_errors(data)
    ]


def request_schema(path: str) -> tuple[str, ...]:
    """Where the description keeps the body of ``POST path``."""
    return ("paths", path, "post", "requestBody", "content", "application/json", "schema")


def component(name: str) -> tuple[str, ...]:
    """Where the description keeps the schema ``name``."""
    return ("components", "schemas", name)


def limits_of(model: str, max_rank: int) -> dict[str, Any]:
    """A model's fine-tuning limits: the description's fields and the SDK's."""
    lora = {
        "max_batch_size": 96,
        "max_batch_size_dpo": 48,
        "min_batch_size": 8,
        "max_rank": max_rank,
        "default_rank": 16,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"],
    }
    return {
        "model_name": model,
        "max_num_epochs": 20,
        "max_num_evals": 100,
        "max_num_checkpoints": 20,
        "max_learning_rate": 1.0,
        "min_learning_rate": 1e-8,
        "max_seq_length_sft": 8192,
        "max_seq_length_dpo": 4096,
        "min_max_seq_length": 512,
        "default_gradient_accumulation_steps": 1,
        "supports_vision": False,
        "supports_tools": False,
        "supports_reasoning": False,
        "supports_full_training": True,
        "merge_output_lora": False,
        "lora_training": lora,
        "full_training": {"max_batch_size": 32, "max_batch_size_dpo": 16, "min_batch_size": 8},
    }


@dataclass
class FakeJob:
    """A job as the double keeps it: the body it was created with and where it stands."""

    id: str
    request: dict[str, Any]
    lines: list[dict[str, Any]]
    script: tuple[str, ...]
    created: float
    looks: int = 0
    status: str = "pending"
    output_name: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, float]] = field(default_factory=list)


class FakeTogether:
    """The state and routes of the double.

    Args:
        base_models: The models it fine-tunes (and serves); others get 404 from the limits.
        chat_models: Further models it serves for chat only.
        fail_first: How many jobs end in ``failure`` before jobs start to succeed.
        failure: The status a failing job ends with (``error``, ``user_error``...).
        script: The statuses of every job, one per look (overrides the above).
        sdk_spelling: Events spelled as the SDK's enums (``JOB_ERROR``, ``Error``).
        max_lora_rank: The models' LoRA rank limit.
        api_key: The key requests must carry.
    """

    def __init__(
        self,
        base_models: Sequence[str] = (BASE_MODEL,),
        *,
        chat_models: Sequence[str] = (CHAT_ONLY_MODEL,),
        fail_first: int = 0,
        failure: str = "error",
        script: Sequence[str] | None = None,
        sdk_spelling: bool = False,
        max_lora_rank: int = 64,
        api_key: str = "together-test-key",
        user: str = "nip-tester",
    ):
        from nip.backends.dummy import DummyBackend

        self.base_models = tuple(base_models)
        self.fail_first, self.failure, self.script = fail_first, failure, script
        self.sdk_spelling, self.max_lora_rank = sdk_spelling, max_lora_rank
        self.api_key, self.user = api_key, user
        #: When set, every job creation is refused (400) with this message.
        self.refuse_jobs = ""
        names = (*self.base_models, *chat_models)
        self.chat = ChatState(DummyBackend(), 0.0, None, names, api_key)
        self.files: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []
        self.jobs: dict[str, FakeJob] = {}
        self.created: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.chat_models: list[str] = []
        self._ids = itertools.count(1)

    # ------------------------------------------------------------------ serving
    def serve(self) -> RunningServer:
        """Serve on loopback; ``.url`` is the ``TOGETHER_BASE_URL`` (the SDK adds ``/v1``)."""
        return serve(self.app())

    def app(self) -> Any:
        from fastapi import FastAPI
        from fastapi.responses import Response

        app = FastAPI(title="Together AI test double", docs_url=None, redoc_url=None)

        async def route(request: Any) -> Any:
            headers = {k.lower(): v for k, v in request.headers.items()}
            form, body = None, b""
            if headers.get("content-type", "").startswith("multipart/form-data"):
                form = await request.form()
            else:
                body = await request.body()
            path, root = request.url.path, str(request.base_url).rstrip("/")
            query = dict(request.query_params)
            reply = await self.respond(
                request.method, path, headers, body, form, root=root, query=query
            )
            extra = dict(reply.headers)
            return Response(reply.body, reply.status, extra, media_type=reply.content_type)

        app.add_route("/{path:path}", route, methods=["GET", "POST", "PUT", "DELETE"])
        return app

    async def respond(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        form: Any = None,
        *,
        root: str = "",
        query: dict[str, str] | None = None,
    ) -> Reply:
        """Answer one request."""
        self.requests.append((method, path))
        if path.startswith("/upload/") and method == "PUT":  # the presigned URL: no key
            return self._put(path.removeprefix("/upload/"), body)
        if headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(401, "Invalid API key provided", "invalid_api_key")
        data: Any = None
        if body and headers.get("content-type", "").startswith("application/json"):
            try:
                data = json.loads(body)
            except ValueError:
                return _error(400, "the body is not JSON")
        parts = path.removeprefix("/v1/").strip("/").split("/")
        if parts == ["chat", "completions"] and method == "POST":
            if problems := schema_errors(data, *request_schema("/chat/completions")):
                return _error(400, "; ".join(problems))
            self.chat_models.append(str(data.get("model")))
            return await respond(self.chat, method, "/v1/chat/completions", headers, body, _no_wait)
        if parts == ["models"]:
            return await respond(self.chat, method, "/v1/models", headers, body, _no_wait)
        if parts[0] == "files":
            return await self._files(method, parts[1:], form, root)
        if parts[0] == "fine-tunes":
            return self._fine_tunes(method, parts[1:], data, query or {})
        return _error(404, f"no route {method} {path}")

    # ------------------------------------------------------------------- files
    async def _files(self, method: str, parts: list[str], form: Any, root: str) -> Reply:
        if parts == [] and method == "POST":  # the SDK's upload: a presigned URL
            missing = {"purpose", "file_name", "file_type"} - set(form or {})
            if missing or form["purpose"] not in ("fine-tune", "eval"):
                return _error(400, f"purpose, file_name and file_type needed ({sorted(missing)})")
            for file_id, file in self.files.items():
                if file["checksum"] == form.get("checksum") and file_id not in self.deleted:
                    return json_reply({"file_id": file_id}, 409)
            file_id = self._new_file(form["file_name"], form.get("checksum"))
            location = (("location", f"{root}/upload/{file_id}"), ("x-together-file-id", file_id))
            return Reply(302, b"", location)
        if parts == ["upload"] and method == "POST":  # the description's multipart upload
            if form is None or not {"purpose", "file_name", "file"} <= set(form):
                return _error(400, "purpose, file_name and file are required")
            file_id = self._new_file(form["file_name"], None)
            self._put(file_id, await form["file"].read())
            return self._preprocess(file_id)
        file = self.files.get(parts[0]) if parts else None
        if file is None or parts[0] in self.deleted:
            return _error(404, f"file {parts[0] if parts else ''!r} not found")
        if parts[1:] == ["preprocess"] and method == "POST":
            return self._preprocess(parts[0])
        if len(parts) == 1 and method == "DELETE":
            self.deleted.append(parts[0])
            return json_reply({"id": parts[0], "deleted": True})
        if len(parts) == 1 and method == "GET":
            return json_reply(self._file_response(parts[0]))
        return _error(404, f"no route {method} /v1/files/{'/'.join(parts)}")

    def _new_file(self, name: str, checksum: str | None) -> str:
        file_id = f"file-{next(self._ids):08d}"
        self.files[file_id] = {"name": name, "checksum": checksum, "data": b"", "lines": []}
        return file_id

    def _put(self, file_id: str, data: bytes) -> Reply:
        if file_id not in self.files:
            return _error(404, f"no upload {file_id}")
        self.files[file_id]["data"] = data
        return Reply(200, b"")

    def _preprocess(self, file_id: str) -> Reply:
        file = self.files[file_id]
        try:
            lines = [json.loads(line) for line in file["data"].decode().splitlines() if line]
            file["format"], file["lines"] = _file_format(lines), lines
        except ValueError as error:
            return _error(400, f"Invalid file format: {error}")
        return json_reply(self._file_response(file_id))

    def _file_response(self, file_id: str) -> dict[str, Any]:
        file = self.files[file_id]
        return {
            "id": file_id,
            "object": "file",
            "created_at": 1764547200,
            "filename": file["name"],
            "bytes": len(file["data"]),
            "purpose": "fine-tune",
            "Processed": True,
            "FileType": "jsonl",
            "processing_status": "COMPLETED",
        }

    # -------------------------------------------------------------------- jobs
    def _fine_tunes(self, method: str, parts: list[str], data: Any, query: dict[str, str]) -> Reply:
        if parts == ["models", "limits"] and method == "GET":
            return self._limits(query.get("model_name", ""))
        if parts == ["estimate-price"] and method == "POST":
            if problems := schema_errors(data, *request_schema("/fine-tunes/estimate-price")):
                return _error(400, "; ".join(problems))
            return json_reply({"estimation_available": True, "allowed_to_proceed": True,
                               "estimated_total_price": 0.01, "estimated_train_token_count": 100,
                               "user_limit": 100.0})  # fmt: skip
        if parts == [] and method == "POST":
            return self._create(data)
        job = self.jobs.get(parts[0]) if parts else None
        if job is None:
            return _error(404, f"Fine-tune job {parts[0] if parts else ''} not found")
        if len(parts) == 1 and method == "GET":
            return json_reply(self._look(job))
        if parts[1:] == ["events"] and method == "GET":
            return json_reply({"data": job.events})
        if parts[1:] == ["metrics"] and method == "GET":
            return json_reply({"metrics": job.metrics})
        if parts[1:] == ["cancel"] and method == "POST":
            if job.status not in ("completed", "error", "user_error", "cancelled"):
                job.status = "cancelled"
                self._event(job, "job_stopped", "Job cancelled at the user's request")
            return json_reply(self._truncated(job))
        return _error(404, f"no route {method} /v1/fine-tunes/{'/'.join(parts)}")

    def _limits(self, model: str) -> Reply:
        if model not in self.base_models:
            return json_reply({"message": f"Model {model!r} is not available for fine-tuning"}, 404)
        return json_reply(limits_of(model, self.max_lora_rank))

    def _create(self, request: Any) -> Reply:
        self.created.append(request)
        if problems := schema_errors(request, *request_schema("/fine-tunes")):
            return _error(400, "; ".join(problems))
        if refusal := self._refusal(request):
            return _error(400, refusal)
        number = len(self.jobs) + 1
        job_id = f"ft-{number:08d}-fake"
        fails = number <= self.fail_first
        script = tuple(self.script or ((*FAILS[:-1], self.failure) if fails else SUCCEEDS))
        lines = self.files[request["training_file"]]["lines"]
        job = FakeJob(job_id, request, lines, script, time.time())
        suffix = f"-{request['suffix']}" if request.get("suffix") else ""
        job.output_name = f"{self.user}/{request['model'].split('/')[-1]}{suffix}-{job_id[3:11]}"
        self.jobs[job_id] = job
        self._event(job, "job_pending", "Fine tune request created")
        return json_reply(self._truncated(job))

    def _refusal(self, request: dict[str, Any]) -> str:
        """Why Together answers 400, or ''."""
        if self.refuse_jobs:
            return self.refuse_jobs
        file = self.files.get(request["training_file"])
        if file is None or request["training_file"] in self.deleted:
            return f"training_file {request['training_file']!r} not found"
        if request["model"] not in self.base_models:
            return f"Model {request['model']!r} is not supported for fine-tuning"
        method = (request.get("training_method") or {"method": "sft"}).get("method")
        wanted = {"sft": "conversational", "dpo": "preference"}[method]
        if file.get("format") != wanted:
            return f"a {method} job needs a {wanted} file; the file is {file.get('format')}"
        kind = request.get("training_type") or {"type": "Lora"}
        if kind.get("type") == "Lora" and kind.get("lora_r", 0) > self.max_lora_rank:
            return f"lora_r={kind['lora_r']} is above the model's limit of {self.max_lora_rank}"
        return ""

    def _look(self, job: FakeJob) -> dict[str, Any]:
        """A ``GET /fine-tunes/{id}``: the job moves on one status, then is described."""
        if job.status != "cancelled" and job.looks < len(job.script):
            job.status = job.script[job.looks]
            job.looks += 1
            if job.status == "running":
                self._event(job, "training_start", "Training started")
                self._metric(job, 1, 1.25)
            elif job.status == "completed":
                self._metric(job, 2, 0.75)
                self._event(job, "training_complete", "Training completed", step=2)
                self._event(job, "job_complete", f"Job complete: {job.output_name}")
                self.chat.model_names = (*(self.chat.model_names or ()), job.output_name)
            elif job.status in ("error", "user_error"):
                kind = "job_error" if job.status == "error" else "job_user_error"
                self._event(job, kind, FAKE_TRAINING_ERROR, level="error")
        done = job.status == "completed"
        return {
            **self._truncated(job),
            **({"model_output_name": job.output_name} if done else {}),  # a string, or absent
            "epochs_completed": job.request.get("n_epochs", 1) if done else 0,
            "progress": {"estimate_available": job.status == "running", "seconds_remaining": 0},
        }

    def _truncated(self, job: FakeJob) -> dict[str, Any]:
        request = job.request
        tokens = sum(len(json.dumps(line)) // 4 for line in job.lines)
        return {
            "id": job.id,
            "status": job.status,
            "user_id": self.user,
            "created_at": _iso(job.created),
            "updated_at": _iso(time.time()),
            "model": request["model"],
            "training_file": request["training_file"],
            **({"suffix": request["suffix"]} if request.get("suffix") else {}),
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
        if self.sdk_spelling:  # the SDK's enums: FinetuneEventType, FinetuneEventLevels
            kind, level = kind.upper(), level.capitalize()
        job.events.append({
            "object": "fine-tune-event", "created_at": _iso(time.time()), "level": level,
            "message": message, "type": kind, "param_count": 0, "token_count": 0,
            "total_steps": 2, "wandb_url": "", "step": step, "checkpoint_path": "",
            "model_path": "", "training_offset": 0, "hash": "",
        })  # fmt: skip

    def _metric(self, job: FakeJob, step: int, loss: float) -> None:
        job.metrics.append({"train/loss": loss, "train/global_step": step})


async def _no_wait(timeout_s: float) -> None:
    return None


def _error(status: int, message: str, kind: str = "invalid_request_error") -> Reply:
    """The description's ``ErrorData``."""
    return json_reply({"error": {"message": message, "type": kind, "code": None}}, status)


def _iso(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when)) + f".{int(when % 1 * 1000):03d}Z"


def _file_format(lines: list[Any]) -> str:
    """'conversational' or 'preference' (docs.together.ai, data preparation): a conversation
    starts with system or user and alternates user and assistant after that; a file of both
    kinds, or of neither, is refused."""
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
    roles = [m.get("role") for m in messages]
    if roles[0] not in ("system", "user"):
        raise ValueError(f"line {number}: {where} must start with a system or user message")
    turns = roles[1:] if roles[0] == "system" else roles
    if any(a == b for a, b in itertools.pairwise(turns)):
        raise ValueError(f"line {number}: {where} must alternate user and assistant")
