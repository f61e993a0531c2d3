"""Where metrics go besides the run directory: Weights & Biases, if wanted.

Mode "auto" (the default) is online with ``WANDB_API_KEY``, else offline (synced later with
``wandb sync``); "disabled" turns W&B off; ``WANDB_MODE`` overrides all. Starting W&B never hangs
a run (init times out, a failure falls back to offline) and nip writes the API key nowhere.
Without the ``wandb`` extra, "auto" logs to the run directory only and says so; a mode asked for
explicitly is refused before the run writes anything (:func:`check_wandb`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nip.extras import FEATURES, available, require
from nip.runs.run_dir import RunDirectory
from nip.runs.transcript_export import save_processed_and_prompts
from nip.settings import ExperimentSettings, WandbMode
from nip.utils.imports import heavy_imports
from nip.utils.notices import warn


def _asked_for(mode: WandbMode) -> str | None:
    """The mode asked for explicitly (``WANDB_MODE``, then the setting), or None for "auto"."""
    return os.environ.get("WANDB_MODE") or (None if mode == "auto" else mode)


def check_wandb(mode: WandbMode) -> None:
    """Refuse (``MissingExtraError``) a W&B mode asked for explicitly without W&B installed."""
    if _asked_for(mode) not in (None, "disabled"):
        require("wandb")


def resolve_mode(mode: WandbMode) -> str:
    """The W&B mode to use, from the setting, the environment, a key and W&B itself
    ("disabled" when not installed nor asked for; ``MissingExtraError`` when asked for)."""
    check_wandb(mode)
    asked = _asked_for(mode)
    if asked:
        return asked
    if not available("wandb"):
        return "disabled"
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def make_logger(run_dir: Path, config: dict[str, Any], settings: ExperimentSettings) -> WandbLogger:
    """The logger of a run: W&B as :func:`resolve_mode` says, else a :class:`NullLogger`."""
    mode = resolve_mode(settings.wandb_mode)
    if mode == "disabled":
        if _asked_for(settings.wandb_mode) is None:
            print(
                f"W&B is not installed: metrics are logged to {run_dir} only "
                f"({FEATURES['wandb'].install_command} to log them to W&B too)",
                file=sys.stderr,
            )
        return NullLogger()
    return WandbLogger(
        run_dir,
        config,
        mode=settings.wandb_mode,
        project=settings.wandb_project,
        run_name=Path(run_dir).name,
        group=settings.wandb_group,
    )


class WandbLogger:
    """Logs metrics and the run's configuration (``config``) to a W&B run, offline under
    ``run_dir``; ``group`` is a sweep's, ``init_timeout_s`` how long W&B may take to start."""

    def __init__(
        self,
        run_dir: str | Path,
        config: dict[str, Any],
        *,
        mode: WandbMode = "auto",
        project: str = "nip",
        run_name: str | None = None,
        group: str | None = None,
        init_timeout_s: float = 30.0,
    ):
        require("wandb")
        with heavy_imports():  # TRL, imported by the LoRA worker thread meanwhile, imports it too
            import wandb

        self.mode = resolve_mode(mode)
        self._run = None
        if self.mode == "disabled":
            return
        kwargs = dict(
            project=project,
            name=run_name,
            # In a group (a sweep), the id carries the group's name: cells of two sweeps are
            # named alike (nip_seed0) and must not resume each other's W&B run.
            id=f"{group}-{run_name}" if group and run_name else run_name,
            group=group,
            resume="allow",
            config=config,
            dir=str(run_dir),
        )
        try:
            self._run = wandb.init(
                mode=self.mode,
                # create_new: a sweep's cells each log to their own run from one process.
                # console="off": W&B does not wrap the process's standard streams, which the
                # run's own progress bars (and its other cells, in a sweep) write to while W&B
                # starts and finishes in a worker thread.
                settings=wandb.Settings(
                    init_timeout=init_timeout_s, silent=True, reinit="create_new", console="off"
                ),
                **kwargs,
            )
        except Exception as error:  # W&B must never stop a run
            if self.mode == "offline":
                warn(f"W&B could not start ({error}); metrics stay in the run directory")
                return
            warn(f"W&B could not start online ({error}); logging offline")
            self.mode = "offline"
            self._run = wandb.init(
                mode="offline",
                settings=wandb.Settings(silent=True, reinit="create_new", console="off"),
                **kwargs,
            )
        if self._run is not None:
            self._run.define_metric("analysis_iteration")
            self._run.define_metric("analysis_*", step_metric="analysis_iteration")

    def log(self, metrics: dict[str, Any], step: int | None) -> None:
        if self._run is not None:
            values = {k: v for k, v in metrics.items() if v is not None}
            self._run.log(values, **({} if step is None else {"step": step}))

    def finish(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None

    def summarise(self, metrics: dict[str, Any]) -> None:
        """Set the run's summary values (what the run spent; unknown ones left out)."""
        if self._run is not None:
            self._run.summary.update({k: v for k, v in metrics.items() if v is not None})

    def save_run_artifact(self, run_dir: Path) -> None:
        """Save the run's state and adapters as the ``nip-run-<run>`` artifact (for a later
        run's ``checkpoint_run_id``). Never stops a run."""
        if self._run is None:
            return
        import wandb

        from nip.training.checkpoint_start import build_run_artifact

        try:
            self._run.log_artifact(build_run_artifact(wandb, Path(run_dir), self._run.id))
        except Exception as error:
            warn(f"W&B could not save the run's artifact: {error}")

    def on_stage_end(
        self, run_dir: Path, stage: str, iteration: int, agents: Mapping[str, Any] | None = None
    ) -> None:
        """After a stage that saved dialogues, log the run's records as the original's
        artifacts (:data:`ARTIFACTS`); with ``agents``, first write the stage's processed
        transcripts and prompts, which only they use. Never stops a run."""
        split = {"log_stats": "train", "test": "test"}.get(stage)
        if self._run is None or split is None:
            return
        directory = RunDirectory(run_dir)
        if not directory.has_rollouts(split, iteration):
            return  # an iteration the test scheme does not test
        import wandb

        try:
            if agents is not None:
                save_processed_and_prompts(directory, split, iteration, agents)
            for artifact in build_rollout_artifacts(wandb, Path(run_dir), self._run.id):
                self._run.log_artifact(artifact)
        except Exception as error:
            warn(f"W&B could not save the rollouts' artifact: {error}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mode={self.mode!r})"


class NullLogger(WandbLogger):
    """Logs nothing (metrics are in the run directory anyway): a W&B logger without a run."""

    def __init__(self) -> None:
        self.mode, self._run = "disabled", None


#: The artifacts of a run's records, by folder: the artifact name's prefix (the original's
#: names; MALT's trees, which the original kept inside its rollouts, as ``malt_trees_``).
ARTIFACTS = {
    "rollouts": "full_rollouts_",
    "transcripts": "raw_transcript_",
    "processed_transcripts": "processed_transcript_",
    "prompts": "prompts_",
    "malt": "malt_trees_",
}


def build_rollout_artifacts(wandb: Any, run_dir: Path, run_id: str) -> list[Any]:
    """One artifact (``<prefix><run>``) per folder of :data:`ARTIFACTS` that holds files."""
    artifacts = []
    for folder, prefix in ARTIFACTS.items():
        files = sorted(p for p in (run_dir / folder).glob("*") if p.is_file())
        if not files:
            continue
        artifact = wandb.Artifact(f"{prefix}{run_id}", type=folder)
        for file in files:  # file by file: add_dir prints a line per folder
            artifact.add_file(str(file), name=f"{folder}/{file.name}")
        artifacts.append(artifact)
    return artifacts
