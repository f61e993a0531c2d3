"""The ``nip serve`` a run or a sweep owns (``--serve``, ``ExperimentSettings.serve``).

::

    with serving([hyper_params], settings, storage=run_dir / "serve") as settings:
        build_trainer(hyper_params, settings).train()   # SelfHosted agents talk to it

One :func:`~nip.server.background.serve_in_background` child per base model of the ``SelfHosted``
agents, ready before the block runs and stopped when it ends. Its storage is a folder the caller
names, so a resumed run serves every adapter trained before again. Agents are pointed at it
through ``settings.servers``, not their saved parameters (a port is how a run runs, not what it
studies).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from nip.errors import ConfigFileError, ModelNotFoundError
from nip.extras import require
from nip.parameters import HyperParameters
from nip.settings import ExperimentSettings
from nip.utils import counted

__all__ = [
    "PER_SERVER_FIELDS",
    "model_source",
    "served_models",
    "server_settings",
    "serving",
    "serving_models",
]

#: ServerConfig fields set for each server, not taken from ``serve_config``.
PER_SERVER_FIELDS = ("model", "served_model_name", "port", "storage_dir", "host")


def served_models(configs: Iterable[HyperParameters]) -> list[str]:
    """The base models the configurations' ``SelfHosted`` agents need a server for, sorted."""
    return sorted(
        {
            agent.model_name
            for params in configs
            for agent in params.agents.values()
            if agent.served_by == "SelfHosted"
        }
    )


def storage_name(model: str) -> str:
    """The folder of ``model``'s server under the storage root (``Qwen--Qwen2.5-7B-Instruct``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "--", model.strip("/")) or "model"


def server_settings(settings: ExperimentSettings) -> dict[str, Any]:
    """The ServerConfig fields every server starts with: ``settings.serve_config``'s, less
    :data:`PER_SERVER_FIELDS` (:class:`ConfigFileError` for a missing or bad file)."""
    if settings.serve_config is None:
        return {}
    import yaml

    from nip.server.config import ServerConfig

    path = Path(settings.serve_config)
    if not path.is_file():
        raise ConfigFileError(f"serve_config: no such file {str(path)!r}", path=path)
    config = ServerConfig.load(path)  # validated: a wrong field or value is refused here
    given = yaml.safe_load(path.read_text(encoding="utf-8")) or {}  # JSON is YAML too
    return {k: getattr(config, k) for k in given if k not in PER_SERVER_FIELDS}


def model_source(name: str) -> str:
    """What ``nip serve --model`` is given for ``name``: a model folder or embedded model as it is,
    else a Hugging Face id fetched into the Hub cache (else :class:`ModelNotFoundError`)."""
    from nip.backends.local.model_store import canonical_model_name

    if Path(name).expanduser().is_dir() or canonical_model_name(name) is not None:
        return name
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(name)
    except Exception as error:  # not an id, not cached offline, no network: one line
        raise ModelNotFoundError(
            f"{name!r} is not a model folder, an embedded model or a Hugging Face model that "
            f"could be fetched ({type(error).__name__}: {str(error).splitlines()[0][:200]}); "
            "download it first (huggingface-cli download) or name its folder"
        ) from None


@contextlib.contextmanager
def serving(
    configs: Iterable[HyperParameters],
    settings: ExperimentSettings,
    storage: str | Path,
    *,
    echo: bool = True,
) -> Iterator[ExperimentSettings]:
    """Start a ``nip serve`` per base model of the ``SelfHosted`` agents of ``configs`` (a run's, or
    a sweep's cells'), each in a folder under ``storage``, wait until each is ready, and yield
    ``settings`` pointing those agents at them. ``settings.serve_config``,
    ``server_ready_timeout_s`` and ``show_progress`` shape them; with ``serve`` off nothing starts.

    Raises:
        ServerStartError: A server did not get ready (the others are stopped).
        ModelNotFoundError: A model cannot be found.
        MissingExtraError: ``nip serve`` needs ``nip[server]``.
    """
    configs = list(configs)
    if not settings.serve:
        yield settings
        return
    models = served_models(configs)
    if echo and not models:
        print("nip serve: no SelfHosted agent here needs a server; none started")
    with serving_models(models, settings, storage, echo=echo) as served:
        yield served


@contextlib.contextmanager
def serving_models(
    models: Iterable[str],
    settings: ExperimentSettings,
    storage: str | Path,
    *,
    echo: bool = True,
) -> Iterator[ExperimentSettings]:
    """:func:`serving` for the given base models (a Ray node's servers start this way)."""
    from nip.server.background import serve_in_background

    require("server")
    shared = server_settings(settings)
    servers: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        for model in models:
            folder = Path(storage) / storage_name(model)
            if echo:
                print(f"nip serve for {model}: starting (storage {folder})", flush=True)
            handle = serve_in_background(
                model_source(model),
                **{"engine": "auto", **shared},
                served_model_name=model,
                storage_dir=str(folder),
                ready_timeout_s=settings.server_ready_timeout_s,
                show_progress=settings.show_progress,
            )
            stack.callback(handle.stop)
            servers[model] = handle.url
            if echo:
                print(f"nip serve for {model}: ready at {handle.url} ({handle.engine_kind})")
        yield replace(settings, serve=True, servers={**settings.servers, **servers})
        if echo and servers:
            print(f"nip serve: stopping {counted(len(servers), 'server')}", flush=True)
