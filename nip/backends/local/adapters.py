"""What a LoRA adapter folder stands for: its own weights, plus the adapters it was stacked on.

A stacked adapter (``stack_lora_adapters=True``) was trained with its predecessors merged in,
so its folder lists them, oldest first and relative to it, in :data:`STACK_FILE`; a folder
without the file is a plain adapter. An :class:`AdapterStack` carries a content hash of every
layer, so a reused name (``verifier-it0``) with other weights can be told apart (e.g. by the
response cache).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nip.backends.local.model_store import canonical_model_name, check_model_name
from nip.errors import ModelNotFoundError
from nip.utils.html import caption_table

STACK_FILE = "nip_adapter_stack.json"
"""The file in an adapter folder listing the adapters it sits on (``{"predecessors": [...]}``)."""

_HASHED_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


@dataclass(frozen=True)
class AdapterLayer:
    """One adapter folder and a content hash of its configuration and weights."""

    path: Path
    fingerprint: str


@dataclass(frozen=True)
class AdapterStack:
    """The adapters a model name stands for: predecessors first, the named adapter last."""

    layers: tuple[AdapterLayer, ...]

    @property
    def path(self) -> Path:
        """The folder of the named (topmost) adapter."""
        return self.layers[-1].path

    @property
    def fingerprint(self) -> str:
        """A hash of every layer's weights, in order: the identity of the whole model."""
        joined = "+".join(layer.fingerprint for layer in self.layers)
        return hashlib.sha256(joined.encode()).hexdigest()[:32]


def predecessors(folder: str | os.PathLike[str]) -> list[Path]:
    """The adapters the one in ``folder`` is stacked on, oldest first (empty if none)."""
    folder = Path(folder)
    try:
        entries = json.loads((folder / STACK_FILE).read_text())["predecessors"]
    except FileNotFoundError:
        return []
    return [(folder / entry).resolve() for entry in entries]


def write_predecessors(folder: str | os.PathLike[str], stack: Sequence[Path]) -> None:
    """Record that the adapter in ``folder`` sits on ``stack`` (oldest first); none: no file."""
    if not stack:
        return
    folder = Path(folder).resolve()
    entries = [os.path.relpath(Path(p).resolve(), folder) for p in stack]
    (folder / STACK_FILE).write_text(json.dumps({"predecessors": entries}, indent=2) + "\n")


def read_adapter_stack(folder: str | os.PathLike[str]) -> AdapterStack:
    """Hash the adapter in ``folder`` and its predecessors (:class:`ModelNotFoundError` where one
    is not a PEFT adapter)."""
    top = Path(folder).expanduser().resolve()
    return AdapterStack(tuple(_layer(path) for path in [*predecessors(top), top]))


def _layer(folder: Path) -> AdapterLayer:
    if not (folder / "adapter_config.json").is_file():
        raise ModelNotFoundError(f"{folder} is not a PEFT adapter (no adapter_config.json).")
    digest = hashlib.sha256()
    for name in _HASHED_FILES:
        path = folder / name
        if not path.is_file():
            continue
        digest.update(f"{name}\0".encode())
        if name == "adapter_config.json":
            digest.update(_canonical_config(path))
            continue
        with path.open("rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    return AdapterLayer(folder, digest.hexdigest()[:32])


def _canonical_config(path: Path) -> bytes:
    """The configuration with its keys and its set-like lists sorted: PEFT writes
    ``target_modules`` from a set, in an order that changes from one process to the next."""
    config = json.loads(path.read_text())
    for key in ("target_modules", "modules_to_save"):
        if isinstance(config.get(key), list):
            config[key] = sorted(config[key])
    return json.dumps(config, sort_keys=True).encode()


class ServedModels:
    """The names a local backend answers to: its base model's (as given, its folder's name,
    its known name) and the LoRA adapters registered on it; both local engines are one, and
    show their ``_describe()`` as a table."""

    def __init__(self, model: str):
        check_model_name(model)
        self.model = str(model)
        self._base_names = {self.model, Path(self.model).name}
        if (canonical := canonical_model_name(self.model)) is not None:
            self._base_names.add(canonical)
        self._adapters: dict[str, AdapterStack] = {}

    @property
    def model_names(self) -> list[str]:
        """Every name a request may use: the base model's names, then the adapters."""
        return sorted(self._base_names) + sorted(self._adapters)

    def model_fingerprint(self, model: str) -> str | None:
        """A hash of the weights behind an adapter name; None for the base model (the response cache
        keys on it, since names like ``verifier-it0`` recur in every run)."""
        adapter = self._adapters.get(model)
        return adapter.fingerprint if adapter is not None else None

    def _read_adapter(self, name: str, path: str | os.PathLike[str]) -> AdapterStack:
        """The adapter stack in ``path``, to serve under ``name`` (not a base model's name)."""
        if name in self._base_names:
            raise ValueError(f"{name!r} is the base model's name; pick another adapter name.")
        return read_adapter_stack(path)

    def _repr_html_(self) -> str:
        return caption_table(type(self).__name__, self._describe())  # type: ignore[attr-defined]

    def _check_served(self, model: str) -> None:
        """Raises ModelNotFoundError: ``model`` is neither the base model nor an adapter."""
        if model not in self._base_names and model not in self._adapters:
            raise ModelNotFoundError(
                f"The local backend serves {', '.join(map(repr, self.model_names))}, "
                f"not {model!r}. Add fine-tuned models with register_adapter()."
            )
