"""A run's directory: parameters, state, rollouts, trees, datasets and metrics on disk.

Everything is JSON or JSONL (no pickles), written atomically (a temporary file renamed into
place), so a killed run leaves the old file or the new one, never half. Layout::

    hyper_params.json          the parameters, with their schema version
    meta.json                  nip version, creation time
    dataset.json               per split: dataset, Hub revision, item count, fingerprint
    state.json                 iteration, stage, shared model groups
    rollouts/train_it0003.jsonl, rollouts/test_it0003.jsonl
    malt/trees_it0003.jsonl
    transcripts/train_it0003.md  readable transcripts (text_rl.save_transcripts), if asked
    processed_transcripts/, prompts/  the original's processed transcripts and prompts (W&B only)
    fine_tune/it0003_<group>.jsonl
    metrics/train_it0003.json, metrics/test_it0003.json
    jobs/                      local LoRA jobs (adapters, logs)
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nip.errors import IncompatibleParametersError, NipError
from nip.extras import needs
from nip.rollouts.records import Transcript, transcripts_from_jsonl, transcripts_to_jsonl
from nip.utils.files import atomic_write_text

__all__ = [
    "NotARunDirectoryError",
    "RunDirectory",
    "RunDirectoryError",
    "RunFileError",
    "atomic_write_text",
    "folder_holding",
    "new_run_path",
    "refuse_existing_run",
]


class NotARunDirectoryError(NipError, FileNotFoundError):
    """A folder given as a run's is missing, is a file, or holds no run."""


class RunFileError(NipError, ValueError):
    """A file of a run directory is not what nip wrote there (damaged, or edited by hand)."""


class RunDirectoryError(IncompatibleParametersError):
    """The run directory cannot be used as asked (exists already, or holds another run)."""


def refuse_existing_run(path: str | Path, advice: str) -> None:
    """Refuse to start a new run in ``path`` when it holds one: a :class:`RunDirectoryError` naming
    it, then ``advice``."""
    if (Path(path) / "state.json").exists():
        raise RunDirectoryError(f"{path} already holds a run; {advice}")


def folder_holding(path: str | Path, marker: str, what: str, error: type[Exception]) -> Path:
    """``path``, if it is a folder holding the file ``marker``; else ``error``, saying whether it is
    missing, a file, or lacks ``marker``."""
    path = Path(path)
    if not path.exists():
        raise error(f"{path}: no such folder")
    if not path.is_dir():
        raise error(f"{path} is a file, not a {what} directory")
    if not (path / marker).is_file():
        raise error(f"{path} holds no {what} (no {marker})")
    return path


def new_run_path(root: str | Path = "runs", now: time.struct_time | None = None) -> Path:
    """A new, empty folder under ``root`` named for the local time (``20261126-071500``),
    claimed atomically: runs started in the same second get ``-2``, ``-3``... instead of
    sharing one folder."""
    stamp = time.strftime("%Y%m%d-%H%M%S", now or time.localtime())
    Path(root).mkdir(parents=True, exist_ok=True)
    for attempt in itertools.count(1):
        path = Path(root) / (stamp if attempt == 1 else f"{stamp}-{attempt}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")  # itertools.count never ends


class RunDirectory:
    """Reads and writes the files of one run in ``path`` (layout: the module docstring), with
    readable transcripts in ``transcript_format`` ("json", "yaml", "markdown"; None: none)."""

    def __init__(self, path: str | Path, *, transcript_format: str | None = None):
        self.path = Path(path)
        self.transcript_format = transcript_format

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"

    @classmethod
    def of_run(cls, path: str | Path, **kwargs: Any) -> RunDirectory:
        """The directory of a saved run (``kwargs`` as for the constructor; raises
        :class:`NotARunDirectoryError`)."""
        path = folder_holding(path, "hyper_params.json", "run", NotARunDirectoryError)
        return cls(path, **kwargs)

    # ----------------------------------------------------------------- generic
    def write_json(self, relative: str, data: Any) -> Path:
        path = self.path / relative
        atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        return path

    def read_json(self, relative: str) -> Any:
        """A JSON file of the run (:class:`RunFileError` when it is not valid JSON)."""
        path = self.path / relative
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise RunFileError(f"{path}: not valid JSON ({error})") from None

    def exists(self, relative: str) -> bool:
        return (self.path / relative).exists()

    def write_jsonl(self, relative: str, rows: Iterable[Any]) -> Path:
        path = self.path / relative
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        return path

    def read_jsonl(self, relative: str) -> list[Any]:
        text = (self.path / relative).read_text(encoding="utf-8")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    # ----------------------------------------------------------------- dataset
    def progress(self) -> tuple[str, int, int]:
        """Where the run stands: ``(stage, iteration, num_iterations)``. The stage is
        ``"not started"`` before its parameters are saved and ``"starting"`` before its first
        stage ends (iteration 0 then); ``num_iterations`` is 0 before it starts."""
        if not self.exists("hyper_params.json"):
            return "not started", 0, 0
        iterations = self.read_json("hyper_params.json").get("rl", {}).get("num_iterations", 0)
        if not self.exists("state.json"):
            return "starting", 0, iterations
        state = self.read_json("state.json")
        return state["stage"], state["iteration"], iterations

    def load_hyper_params(self, *, force: bool = False) -> Any:
        """The run's saved ``HyperParameters`` (:class:`IncompatibleParametersError` when saved by
        an incompatible nip, unless ``force``)."""
        from nip.parameters import HyperParameters, check_compatibility

        saved = self.read_json("hyper_params.json")
        if "_schema_version" not in saved and not force:
            check_compatibility(saved)  # raises: the file was not written by nip
        # from_dict checks the schema version stamp (an error, or a warning for a minor one).
        return HyperParameters.from_dict(saved, ignore_extra_keys=force, force=force)

    # ---------------------------------------------------------------- rollouts
    @staticmethod
    def rollouts_name(split: str, iteration: int) -> str:
        return f"rollouts/{split}_it{iteration:04d}.jsonl"

    def save_rollouts(self, split: str, iteration: int, transcripts: Iterable[Transcript]) -> Path:
        transcripts = list(transcripts)
        if self.transcript_format is not None:  # first: the records' file marks the stage done
            from nip.runs.transcript_export import render, transcript_file_name

            name = transcript_file_name(split, iteration, self.transcript_format)
            atomic_write_text(self.path / name, render(transcripts, self.transcript_format))
        path = self.path / self.rollouts_name(split, iteration)
        atomic_write_text(path, transcripts_to_jsonl(transcripts))
        return path

    def load_rollouts(self, split: str, iteration: int) -> list[Transcript]:
        path = self.path / self.rollouts_name(split, iteration)
        return transcripts_from_jsonl(path.read_text(encoding="utf-8"))

    def has_rollouts(self, split: str, iteration: int) -> bool:
        return self.exists(self.rollouts_name(split, iteration))

    # ----------------------------------------------------------------- metrics
    def save_metrics(self, split: str, iteration: int, metrics: dict[str, Any]) -> Path:
        return self.write_json(f"metrics/{split}_it{iteration:04d}.json", metrics)

    def metrics_records(self) -> list[dict[str, Any]]:
        """Every saved metrics file as a row with ``split`` and ``iteration``."""
        rows = []
        for path in sorted((self.path / "metrics").glob("*_it*.json")):
            split, _, number = path.stem.rpartition("_it")
            rows.append({"split": split, "iteration": int(number), **json.loads(path.read_text())})
        return rows

    def metrics_dataframe(self):
        """The run's metrics, one row per (split, iteration)."""
        with needs("dataframes"):
            import pandas as pd

        return pd.DataFrame(self.metrics_records())
