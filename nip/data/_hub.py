"""Read a dataset's splits with Hugging Face ``datasets``: a Hub id, or a local folder.

The resolved commit is returned so a run records exactly which data it used. Offline
(``HF_HUB_OFFLINE=1``, or the Hub not answering a short probe) the Hugging Face cache is read
directly, rather than after ``datasets``' half-minute of retries.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from nip.data._errors import DatasetFormatError, DatasetUnavailableError
from nip.extras import needs

#: Seconds to wait for the Hub before treating it as unreachable.
HUB_PROBE_TIMEOUT_S = 5.0

#: Hub datasets stored as JSON lines with a loading script, which ``datasets`` >= 4 no longer
#: runs: their data files are read directly.
SCRIPT_DATASET_FILES = {"codeparrot/apps": {"train": "train.jsonl", "test": "test.jsonl"}}

_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")

#: The rows of every split, the Hub commit they come from (None for a local folder), and
#: the origin: ``"hub"``, ``"cache"`` (the Hub did not answer) or ``"directory"``.
HubSplits = tuple[dict[str, list[dict[str, Any]]], str | None, str]


def load_hub_splits(name_or_dir: str, revision: str | None = None) -> HubSplits:
    """Every split of a Hub dataset or of a local folder in the Hub's layout.

    Raises:
        DatasetFormatError: A folder's files cannot be read as a dataset.
        DatasetUnavailableError: Neither the Hub nor the cache has it, or the cached copy is
            not the pinned revision.
    """
    with needs("hub"):
        import datasets
        import datasets.exceptions
    folder = Path(name_or_dir).expanduser()
    if folder.is_dir():
        try:
            return _prepare(datasets.load_dataset_builder(str(folder))), None, "directory"
        except (datasets.exceptions.DatasetsError, ValueError) as error:
            cause = error.__cause__ or error
            raise DatasetFormatError(folder, f"datasets cannot read it ({cause})") from error
    online = not datasets.config.HF_HUB_OFFLINE and _hub_reachable(datasets.config.HF_ENDPOINT)
    if name_or_dir in SCRIPT_DATASET_FILES:
        return _load_script_dataset(datasets, name_or_dir, revision, online=online)
    if online:
        try:
            builder = datasets.load_dataset_builder(name_or_dir, revision=revision)
        except (OSError, datasets.exceptions.DatasetsError) as error:
            raise DatasetUnavailableError(name_or_dir, str(error)) from error
    else:
        builder = _cached_builder(name_or_dir)
    # datasets falls back to its cache (the "Cache" builder) when the Hub fails mid-way.
    origin = "cache" if type(builder).__name__ == "Cache" else "hub"
    resolved = builder.hash if isinstance(builder.hash, str) and builder.hash != "auto" else None
    _check_pinned(name_or_dir, revision, resolved)
    try:
        splits = _prepare(builder)
    except (OSError, datasets.exceptions.DatasetsError) as error:
        raise DatasetUnavailableError(name_or_dir, str(error)) from error
    return splits, resolved, origin


def _prepare(builder: Any) -> dict[str, list[dict[str, Any]]]:
    builder.download_and_prepare()
    return {str(split): data.to_list() for split, data in builder.as_dataset().items()}


def _cached_builder(name: str) -> Any:
    """The builder of the newest cached copy of ``name``, as ``datasets`` uses offline."""
    from datasets.packaged_modules.cache.cache import Cache

    try:
        return Cache(dataset_name=name.split("/")[-1], repo_id=name, version="auto", hash="auto")
    except ValueError as error:
        reason = "the Hub cannot be reached and the dataset is not in the Hugging Face cache"
        raise DatasetUnavailableError(name, f"{reason} ({error})") from None


def _check_pinned(name: str, revision: str | None, resolved: str | None) -> None:
    """A pinned commit must be the one loaded (offline, the cache holds only what it holds)."""
    if revision is None or resolved is None or not _COMMIT.match(revision.lower()):
        return
    if not resolved.lower().startswith(revision.lower()):
        raise DatasetUnavailableError(
            name,
            f"code_validation.dataset_revision={revision!r} is pinned, but the copy found "
            f"is revision {resolved!r}",
        )


def _load_script_dataset(
    datasets: Any, name: str, revision: str | None, *, online: bool
) -> HubSplits:
    """A Hub dataset with a loading script: its files, read at the resolved commit."""
    if not online:
        raise DatasetUnavailableError(
            name, "the Hub cannot be reached, and this dataset's files are read from it directly"
        )
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=datasets.config.HF_ENDPOINT).dataset_info(
            name, revision=revision, timeout=2 * HUB_PROBE_TIMEOUT_S
        )
        files = {
            split: f"hf://datasets/{name}@{info.sha}/{file}"
            for split, file in SCRIPT_DATASET_FILES[name].items()
        }
        splits = _prepare(datasets.load_dataset_builder("json", data_files=files))
    except Exception as error:  # the Hub client raises many types; all mean "not loadable"
        raise DatasetUnavailableError(name, f"{type(error).__name__}: {error}") from error
    return splits, info.sha, "hub"


def _hub_reachable(endpoint: str) -> bool:
    """Whether the Hub answers at all within :data:`HUB_PROBE_TIMEOUT_S`."""
    import httpx

    try:
        httpx.head(endpoint, timeout=HUB_PROBE_TIMEOUT_S)
    except httpx.HTTPError:
        return False
    return True
