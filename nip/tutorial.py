"""Helpers for the tutorial notebooks in ``notebooks/``: one notebook, two sizes.

CI runs the same notebooks small (``NIP_TUTORIAL_SIZE=ci``); a notebook picks each number
with ``sized(full=16, ci=2)``. ``NIP_TUTORIAL_SERVER`` (:func:`tutorial_server`) chooses the
backends tutorial's server.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, TypeVar

SIZE_VARIABLE = "NIP_TUTORIAL_SIZE"
SERVER_VARIABLE = "NIP_TUTORIAL_SERVER"

TutorialSize = Literal["full", "ci"]
T = TypeVar("T")


def tutorial_size() -> TutorialSize:
    """``$NIP_TUTORIAL_SIZE``: "full" (when unset) or "ci"; else ``ValueError``."""
    value = os.environ.get(SIZE_VARIABLE, "").strip().lower() or "full"
    if value not in ("full", "ci"):
        raise ValueError(f"{SIZE_VARIABLE}={value!r}: expected 'full' or 'ci'")
    return value  # type: ignore[return-value]


def sized(full: T, ci: T) -> T:
    """``full`` normally, ``ci`` when the tutorials run at CI size."""
    return ci if tutorial_size() == "ci" else full


def tutorial_server() -> str:
    """``$NIP_TUTORIAL_SERVER``: "local" (nip's loopback test server, when unset), "openai",
    "openrouter", or an ``http(s)://`` URL of a self-hosted server; else ``ValueError``."""
    value = os.environ.get(SERVER_VARIABLE, "").strip() or "local"
    if value.lower() in ("local", "openai", "openrouter"):
        return value.lower()
    if value.startswith(("http://", "https://")):
        return value.rstrip("/")
    raise ValueError(
        f"{SERVER_VARIABLE}={value!r}: expected 'local', 'openai', 'openrouter' "
        "or the http(s):// URL of a self-hosted server"
    )


def fresh_cache_dir(folder: str | os.PathLike[str]) -> Path:
    """A new ``NIP_CACHE_DIR`` in ``folder``: no cached responses, the converted models linked."""
    from nip.backends.local import models_cache_dir

    models = models_cache_dir()
    models.mkdir(parents=True, exist_ok=True)
    cache = Path(folder) / "nip-cache"
    cache.mkdir(parents=True)
    (cache / "models").symlink_to(models, target_is_directory=True)
    return cache


#: The first line of a tutorial cell whose printed text nbval checks.
REFERENCE_MARKER = "# NBVAL_CHECK_OUTPUT"


def ci_environment(scratch: str | os.PathLike[str]) -> dict[str, str]:
    """The environment of tutorials under CI: CI size, the local server, no W&B or progress
    bars, and a fresh response cache in ``scratch``."""
    return {
        **os.environ,
        SIZE_VARIABLE: "ci",
        SERVER_VARIABLE: "local",
        "NIP_CACHE_DIR": str(fresh_cache_dir(scratch)),
        "WANDB_MODE": "disabled",
        "TQDM_DISABLE": "1",
        "JUPYTER_PLATFORM_DIRS": "1",
    }


__all__ = [
    "REFERENCE_MARKER",
    "SERVER_VARIABLE",
    "SIZE_VARIABLE",
    "ci_environment",
    "fresh_cache_dir",
    "sized",
    "tutorial_server",
    "tutorial_size",
]
