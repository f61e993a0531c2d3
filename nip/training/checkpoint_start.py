"""Start agents from the model an earlier run trained (``load_checkpoint_and_parameters``).

``checkpoint_run_id`` names the earlier run: its run directory or, with W&B online, a W&B run
whose ``nip-run-<id>`` artifact holds its state. The agent's group starts from the model the
earlier run's group of that agent generated with last (a hosted id or a local LoRA adapter),
which replaces the base model. Only the model is taken; the parameters are the new run's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nip.errors import NipError
from nip.extras import needs
from nip.parameters import PureTextAgentParameters
from nip.training.groups import PureTextSharedModelGroup
from nip.utils.imports import heavy_imports

#: The W&B artifact type (and name prefix) of a run directory's state.
ARTIFACT_TYPE = "nip-run"


class CheckpointError(NipError):
    """An agent cannot start from the earlier run its checkpoint fields name."""


@dataclass(frozen=True)
class StartingModel:
    """The model an agent starts from: the name to generate with (a hosted id, or the adapter's),
    the local LoRA adapter's folder, and its ``source`` (run and group) for messages."""

    model: str
    adapter_path: str | None
    source: str


def artifact_name(run_id: str) -> str:
    """The W&B artifact name of run ``run_id``'s state."""
    return f"{ARTIFACT_TYPE}-{run_id}"


def model_in_run_directory(
    run_dir: str | Path, agent_name: str, *, base_model: str | None = None
) -> StartingModel:
    """The latest model of ``agent_name``'s group in the run saved in ``run_dir`` (or a downloaded
    W&B artifact of it), refused when trained from another base model than ``base_model``.

    Raises:
        CheckpointError: No run there, no such agent, or its group was never fine-tuned.
    """
    path = Path(run_dir)
    where = f"checkpoint_run_id={str(run_dir)!r}"
    if not (path / "state.json").exists() or not (path / "hyper_params.json").exists():
        raise CheckpointError(f"{where}: no nip run there (state.json, hyper_params.json)")
    state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    saved = json.loads((path / "hyper_params.json").read_text(encoding="utf-8"))
    agents: Mapping[str, Any] = saved.get("agents") or {}
    if agent_name not in agents:
        raise CheckpointError(
            f"{where}: that run has no agent {agent_name!r} (it has {', '.join(agents)})"
        )
    group = agents[agent_name].get("shared_model_group") or agent_name
    group_state = state.get("groups", {}).get(group, {})
    model = group_state.get("fine_tuned_model_name")
    if not model:
        raise CheckpointError(
            f"{where}: the {agent_name!r} agent (group {group!r}) of that run was never "
            "fine-tuned; there is no model to start from"
        )
    earlier_base = agents[agent_name].get("model_name")
    if base_model is not None and earlier_base and earlier_base != base_model:
        raise CheckpointError(
            f"{where}: the {agent_name!r} agent of that run was trained from "
            f"{earlier_base!r}, not from this agent's model_name={base_model!r}; set "
            f"model_name={earlier_base!r}"
        )
    adapter = group_state.get("adapter_path")
    if adapter is not None:  # inside a downloaded artifact (adapters/<group>), or as saved
        found = [p for p in (path / "adapters" / group, Path(adapter)) if p.is_dir()]
        if not found:
            raise CheckpointError(f"{where}: the adapter {adapter} of group {group!r} is gone")
        adapter = str(found[0])
    return StartingModel(model, adapter, f"{path} (group {group!r})")


def download_run_artifact(
    params: PureTextAgentParameters, destination: Path, *, api: Any = None
) -> Path:
    """Download the W&B artifact of ``params.checkpoint_run_id`` (and ``checkpoint_entity``,
    ``_project``, ``_version``) into ``destination``; ``api``: a ``wandb.Api`` (default: a new one,
    which needs ``WANDB_API_KEY``). Raises :class:`CheckpointError` when W&B cannot give it."""
    address = (
        f"{params.checkpoint_entity}/{params.checkpoint_project}/"
        f"{artifact_name(str(params.checkpoint_run_id))}:{params.checkpoint_version}"
    )
    try:
        if api is None:
            with needs("wandb"), heavy_imports():  # the LoRA worker thread may import TRL
                import wandb

            api = wandb.Api()
        artifact = api.artifact(address, type=ARTIFACT_TYPE)
        return Path(artifact.download(root=str(destination)))
    except Exception as error:
        raise CheckpointError(
            f"checkpoint_run_id={params.checkpoint_run_id!r} is not a run directory, and the "
            f"W&B artifact {address} could not be fetched: {error}"
        ) from error


def apply_starting_models(
    groups: Mapping[str, PureTextSharedModelGroup],
    run_dir: Path,
    *,
    wandb_online: bool,
    api: Any = None,
) -> dict[str, StartingModel]:
    """Start every group whose agents ask for it from its earlier run's model: a run directory,
    or a W&B artifact when W&B is online (:class:`CheckpointError` for neither, or no model for
    the agent); returns each such group's starting model by name."""
    started = {}
    for name, group in groups.items():
        params = group.params
        if not params.load_checkpoint_and_parameters:
            continue
        run = str(params.checkpoint_run_id)
        earlier = Path(run).expanduser()
        if not earlier.is_dir():
            if not wandb_online and api is None:
                raise CheckpointError(
                    f"checkpoint_run_id={run!r} is not a run directory, and W&B is not online "
                    "(set WANDB_API_KEY, or give the earlier run's directory)"
                )
            earlier = download_run_artifact(params, run_dir / "checkpoints" / run, api=api)
        agent_name = next(iter(group.agent_wholes))
        start = model_in_run_directory(earlier, agent_name, base_model=params.model_name)
        group.start_from(start.model, start.adapter_path)
        started[name] = start
    return started


def run_artifact_files(run_dir: Path) -> dict[str, Path]:
    """The files of a run's W&B artifact: its state, parameters and each group's current
    adapter (``adapters/<group>``), by name inside the artifact."""
    files = {name: run_dir / name for name in ("state.json", "hyper_params.json")}
    state = json.loads((run_dir / "state.json").read_text(encoding="utf-8"))
    for group, group_state in state.get("groups", {}).items():
        adapter = group_state.get("adapter_path")
        if adapter and Path(adapter).is_dir():
            files[f"adapters/{group}"] = Path(adapter)
    return files


def build_run_artifact(wandb: Any, run_dir: Path, run_id: str) -> Any:
    """A ``wandb.Artifact`` holding what :func:`model_in_run_directory` needs."""
    artifact = wandb.Artifact(artifact_name(run_id), type=ARTIFACT_TYPE)
    for name, path in run_artifact_files(run_dir).items():
        # File by file: add_dir prints a line per folder, even in a silent offline run.
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            inside = name if file == path else f"{name}/{file.relative_to(path).as_posix()}"
            artifact.add_file(str(file), name=inside)
    return artifact


__all__ = [
    "ARTIFACT_TYPE",
    "CheckpointError",
    "StartingModel",
    "apply_starting_models",
    "artifact_name",
    "build_run_artifact",
    "download_run_artifact",
    "model_in_run_directory",
]
