"""The server's persistent state, in SQLite: uploaded files and fine-tuning jobs (status,
adapter, error), kept across restarts. Files are stored by generated id only, so a
client-chosen file name can never escape the storage directory."""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    id TEXT PRIMARY KEY, filename TEXT NOT NULL, purpose TEXT NOT NULL,
    bytes INTEGER NOT NULL, created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, model TEXT NOT NULL, training_file TEXT NOT NULL,
    method TEXT NOT NULL, suffix TEXT, seed INTEGER, extra TEXT NOT NULL,
    status TEXT NOT NULL, backend_job_id TEXT, fine_tuned_model TEXT, adapter_path TEXT,
    error TEXT, trained_tokens INTEGER, created_at INTEGER NOT NULL, finished_at INTEGER
);
CREATE TABLE IF NOT EXISTS events (
    job_id TEXT NOT NULL, created_at REAL NOT NULL, level TEXT NOT NULL, message TEXT NOT NULL,
    data TEXT NOT NULL
);
"""


@dataclass
class JobRow:
    """A fine-tuning job as stored (statuses are OpenAI's)."""

    id: str
    model: str
    training_file: str
    method: dict[str, Any]
    suffix: str | None
    seed: int | None
    extra: dict[str, Any]
    status: str
    backend_job_id: str | None
    fine_tuned_model: str | None
    adapter_path: str | None
    error: str | None
    trained_tokens: int | None
    created_at: int
    finished_at: int | None

    def to_openai(self) -> dict[str, Any]:
        """The job as the OpenAI API returns it."""
        failed = {"code": "training_failed", "message": self.error, "param": None}
        error = failed if self.error else None
        running_s = self.extra.get("running_s")  # from training's start to the job's end
        return {
            "object": "fine_tuning.job",
            "id": self.id,
            "model": self.model,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "fine_tuned_model": self.fine_tuned_model,
            "organization_id": "nip",
            "result_files": [],
            "status": self.status,
            "training_file": self.training_file,
            "validation_file": None,
            "hyperparameters": self.method.get(self.method["type"], {}).get("hyperparameters", {}),
            "trained_tokens": self.trained_tokens,
            "error": error,
            "seed": self.seed or 0,
            "method": self.method,
            "integrations": [],
            "estimated_finish": None,
            "user_provided_suffix": self.suffix,
            "metadata": {
                k: str(v)
                for k, v in (("adapter_path", self.adapter_path), ("running_s", running_s))
                if v is not None
            }
            or None,
        }


class ServerStore:
    """Files and jobs of a server, kept in ``<root>/server.sqlite`` and ``<root>/files/``."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.files_dir = self.root / "files"
        self.files_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.root / "server.sqlite", check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.executescript(_SCHEMA)
            self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _write(self, statement: str, values: tuple[Any, ...]) -> None:
        with self._lock:
            self._db.execute(statement, values)
            self._db.commit()

    def _rows(self, query: str, values: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(query, values).fetchall()

    def add_file(self, filename: str, purpose: str, content: bytes) -> dict[str, Any]:
        file_id = "file-" + secrets.token_hex(12)
        (self.files_dir / file_id).write_bytes(content)
        name = Path(filename.replace("\\", "/")).name[:200]
        name = name if name not in ("", ".", "..") else "upload.jsonl"  # a label, never a path
        row = (file_id, name, purpose, len(content), int(time.time()))
        self._write("INSERT INTO files VALUES (?, ?, ?, ?, ?)", row)
        return self.get_file(file_id)  # type: ignore[return-value]

    def get_file(self, file_id: str) -> dict[str, Any] | None:
        return next(iter(self._files("WHERE id = ?", (file_id,))), None)

    def list_files(self) -> list[dict[str, Any]]:
        return self._files("ORDER BY created_at")

    def _files(self, where: str, values: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        rows = self._rows(f"SELECT * FROM files {where}", values)
        return [{"object": "file", "status": "processed", **dict(row)} for row in rows]

    def file_content(self, file_id: str) -> bytes | None:
        if self.get_file(file_id) is None:
            return None
        return (self.files_dir / file_id).read_bytes()

    def delete_file(self, file_id: str) -> bool:
        if self.get_file(file_id) is None:
            return False
        (self.files_dir / file_id).unlink(missing_ok=True)
        self._write("DELETE FROM files WHERE id = ?", (file_id,))
        return True

    def add_job(
        self,
        model: str,
        training_file: str,
        method: dict[str, Any],
        suffix: str | None,
        seed: int | None,
        extra: dict[str, Any],
    ) -> JobRow:
        job_id = "ftjob-" + secrets.token_hex(12)
        row = (job_id, model, training_file, json.dumps(method), suffix, seed, json.dumps(extra))
        self._write(
            "INSERT INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', NULL, NULL, NULL, NULL, NULL,"
            " ?, NULL)",
            (*row, int(time.time())),
        )
        self.add_event(job_id, "info", "Job queued.")
        return self.get_job(job_id)  # type: ignore[return-value]

    def get_job(self, job_id: str) -> JobRow | None:
        return next(iter(self._jobs("WHERE id = ?", (job_id,))), None)

    def list_jobs(self, status: str | None = None) -> list[JobRow]:
        where, args = ("WHERE status = ? ", (status,)) if status is not None else ("", ())
        return self._jobs(f"{where}ORDER BY created_at, rowid", args)

    def _jobs(self, where: str, values: tuple[Any, ...] = ()) -> list[JobRow]:
        rows = map(dict, self._rows(f"SELECT * FROM jobs {where}", values))
        return [
            JobRow(**{**r, "method": json.loads(r["method"]), "extra": json.loads(r["extra"])})
            for r in rows
        ]

    def update_job(self, job_id: str, **fields: Any) -> None:
        if fields.get("status") in ("succeeded", "failed", "cancelled"):
            fields.setdefault("finished_at", int(time.time()))
            job = self.get_job(job_id)
            if job is not None and "started_at" in job.extra and "extra" not in fields:
                running_s = time.time() - job.extra["started_at"]
                fields["extra"] = json.dumps(job.extra | {"running_s": running_s})
        assignments = ", ".join(f"{k} = ?" for k in fields)
        self._write(f"UPDATE jobs SET {assignments} WHERE id = ?", (*fields.values(), job_id))

    def add_event(self, job_id: str, level: str, message: str, data: dict | None = None) -> None:
        self._write(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
            (job_id, time.time(), level, message, json.dumps(data or {})),
        )

    def events(self, job_id: str) -> list[dict[str, Any]]:
        rows = self._rows(
            "SELECT rowid, * FROM events WHERE job_id = ? ORDER BY created_at DESC, rowid DESC",
            (job_id,),
        )
        return [
            {
                "object": "fine_tuning.job.event",
                "id": f"ftevent-{r['rowid']}",
                "created_at": int(r["created_at"]),
                "level": r["level"],
                "message": r["message"],
                "data": json.loads(r["data"]),
                "type": "message",
            }
            for r in rows
        ]
