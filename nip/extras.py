"""Which pip extra each optional feature of nip needs: one table, and the check that reads it.

``pip install nip`` installs the base (numpy, pyyaml, openai, httpx, tqdm, platformdirs): enough
for the protocols, the dummy and API backends, rollouts, Expert Iteration and MALT with API
models, and dry runs. Everything heavier comes with an extra, ``pip install 'nip[server]'``.
A feature asks for what it needs with :func:`require` (or imports it inside :func:`needs`);
when a module is missing, :class:`~nip.errors.MissingExtraError` says, in one line, which
feature needs which extra, and the command line prints that line instead of a traceback::

    with needs("server"):
        from fastapi import FastAPI
    # MissingExtraError: nip serve needs fastapi, uvicorn (not installed): pip install 'nip[server]'

``tests/test_extras.py`` ties the table to the extras in pyproject.toml: every module a feature
names is installed by that feature's extra.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType

from nip.errors import MissingExtraError


@dataclass(frozen=True)
class Feature:
    """An optional feature: what a user reads, the extra that installs it, the modules it imports.

    Attributes:
        description: The feature as the user meets it (``"nip serve"``).
        extra: The pip extra that installs it (``nip[<extra>]``).
        modules: The top-level modules it imports.
    """

    description: str
    extra: str
    modules: tuple[str, ...]

    @property
    def install_command(self) -> str:
        """The pip command that installs the feature."""
        return f"pip install 'nip[{self.extra}]'"


FEATURES: Mapping[str, Feature] = MappingProxyType(
    {
        "local": Feature(
            "the embedded model (model_provider='Local')",
            "local",
            ("torch", "transformers", "safetensors", "gguf"),
        ),
        "lora": Feature(
            "LoRA fine-tuning on this machine (Local agents, nip serve)",
            "train",
            ("torch", "transformers", "peft", "trl", "accelerate", "datasets"),
        ),
        "qlora": Feature("QLoRA (quantization='bitsandbytes')", "qlora", ("bitsandbytes",)),
        # python_multipart: the module's name since python-multipart 0.0.13.
        "server": Feature("nip serve", "server", ("fastapi", "uvicorn", "python_multipart")),
        "viz": Feature(
            "nip.viz and nip compare (plots and tables)", "notebook", ("pandas", "plotly")
        ),
        "widgets": Feature("nip.widgets", "notebook", ("ipywidgets", "plotly", "pandas")),
        "dataframes": Feature("DataFrames of results (to_dataframe)", "notebook", ("pandas",)),
        "wandb": Feature("Weights & Biases (W&B logging, checkpoints)", "wandb", ("wandb",)),
        "hub": Feature(
            "Hub datasets and dataset folders (Hugging Face datasets)", "data", ("datasets",)
        ),
        "parquet": Feature("reading parquet files", "data", ("pandas", "pyarrow")),
        "ray": Feature("nip sweep --ray (a grid's cells as Ray tasks)", "ray", ("ray",)),
        "together": Feature("Together AI (model_provider='TogetherAI')", "together", ("together",)),
        "inspect": Feature(
            "nip export inspect (dialogues as Inspect logs)", "inspect", ("inspect_ai",)
        ),
        "tinker": Feature("Tinker (model_provider='Tinker')", "tinker", ("tinker",)),
    }
)
"""Each optional feature, by the name :func:`require` takes."""


def missing_modules(feature: str) -> list[str]:
    """The modules ``feature`` needs that cannot be imported here (nothing is imported)."""
    missing = []
    for module in FEATURES[feature].modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a module set to None, or a broken parent
            found = False
        if not found:
            missing.append(module)
    return missing


def available(feature: str) -> bool:
    """Whether everything ``feature`` needs is installed."""
    return not missing_modules(feature)


def require(feature: str) -> None:
    """Raise :class:`~nip.errors.MissingExtraError` unless ``feature`` can be used here.

    Cheap: it looks the modules up without importing them.

    Raises:
        KeyError: ``feature`` is not in :data:`FEATURES`.
        MissingExtraError: One of its modules is not installed.
    """
    missing = missing_modules(feature)
    if missing:
        spec = FEATURES[feature]
        raise MissingExtraError(spec.description, spec.extra, missing)


@contextmanager
def needs(feature: str) -> Iterator[None]:
    """Import what ``feature`` needs inside this block: :func:`require` first, and a module of
    the feature that still fails to import (a broken install) becomes the same one line.

    Example::

        with needs("viz"):
            import pandas as pd
    """
    require(feature)
    spec = FEATURES[feature]
    try:
        yield
    except ModuleNotFoundError as error:
        if (error.name or "").partition(".")[0] not in spec.modules:
            raise
        raise MissingExtraError(spec.description, spec.extra, [error.name]) from error
