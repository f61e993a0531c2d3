"""Local: the embedded model in this process, and LoRA training on its loaded weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nip.backends import SharesBaseWeights, capability
from nip.jobs._types import FineTuneSpec
from nip.parameters import PROVIDER_FACTS
from nip.providers._provider import Provider


def spec_settings(spec: FineTuneSpec) -> dict[str, Any]:
    """A job trained here (local LoRA, the dummy): the spec itself, less its examples."""
    settings = spec.to_dict()
    settings.pop("examples")
    settings.pop("reference_model")  # TRL's reference is the model it starts from
    return settings


def _chat(params, settings):
    from nip.backends.local import local_backend  # cheap, but keeps this module's imports small

    return local_backend(params.model_name, engine=settings.local_engine, params=params)


def _fine_tune(params, settings, chat):
    # Jobs train in a worker thread of the run, on the chat backend's weights where it has
    # loaded them; no ML library loads until one is used.
    from nip.jobs.local_lora import InProcessLoraFineTuneBackend

    root = Path(settings.run_dir) if settings.run_dir else Path.cwd() / "runs" / "adhoc"
    host = capability(chat, SharesBaseWeights) if chat is not None else None
    return InProcessLoraFineTuneBackend(
        root / "jobs", base_weights=host.loaded_base_weights if host is not None else None
    )


PROVIDER = Provider(
    "Local",
    PROVIDER_FACTS["Local"],
    endpoint_key=lambda params: f"local:{params.model_name}",
    chat=_chat,
    fine_tune=_fine_tune,
    job_settings=spec_settings,
)
