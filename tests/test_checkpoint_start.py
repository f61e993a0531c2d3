"""An agent starts from the model an earlier run trained (``load_checkpoint_and_parameters``):
from that run's directory, or from its W&B artifact."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    RlParameters,
    TextRlParameters,
)
from nip.runs.run_dir import RunDirectory
from nip.settings import ExperimentSettings
from nip.training.checkpoint_start import (
    ARTIFACT_TYPE,
    CheckpointError,
    artifact_name,
    build_run_artifact,
    model_in_run_directory,
    run_artifact_files,
)
from nip.training.trainer import PureTextEiTrainer, build_trainer
from nip.utils.imports import heavy_imports

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def dataset(make_tiny_dataset) -> Path:
    """16 items: 12 train and 4 test, half of them correct."""
    return make_tiny_dataset(items=16, train=12)


def params(dataset: Path, **verifier) -> HyperParameters:
    return HyperParameters(
        trainer="pure_text_ei",
        dataset=str(dataset),
        agents={
            "prover": PureTextAgentParameters(use_dummy_api=True),
            "verifier": PureTextAgentParameters(use_dummy_api=True, **verifier),
        },
        nip_protocol=NipProtocolParameters(max_message_rounds=3),
        rl=RlParameters(num_iterations=2, rollouts_per_iteration=6),
        text_rl=TextRlParameters(min_fine_tune_examples=1, test_scheme="none"),
        pure_text_ei={"reward_threshold": 0.0},
    )


def settings(run_dir: Path) -> ExperimentSettings:
    return ExperimentSettings(run_dir=run_dir, show_progress=False, wandb_mode="disabled")


@pytest.fixture(scope="module")
def first_run(dataset, tmp_path_factory) -> Path:
    """A finished run whose verifier was fine-tuned once."""
    run_dir = tmp_path_factory.mktemp("first") / "run"
    build_trainer(params(dataset), settings(run_dir)).train()
    return run_dir


def verifier_models(run_dir: Path, iteration: int) -> set[str | None]:
    transcripts = RunDirectory(run_dir).load_rollouts("train", iteration)
    return {t.model for tr in transcripts for t in tr.turns if t.agent == "verifier"}


def test_a_second_run_starts_its_verifier_from_the_first_runs_verifier(
    dataset, first_run, tmp_path
):
    trained = json.loads((first_run / "state.json").read_text())["groups"]["verifier"]
    model = trained["fine_tuned_model_name"]
    assert model and model != "gpt-4o-mini-2024-07-18"
    hp = params(dataset, load_checkpoint_and_parameters=True, checkpoint_run_id=str(first_run))
    second = build_trainer(hp, settings(tmp_path / "second"))
    second.train(max_stages=1)  # the first iteration's rollouts
    assert verifier_models(tmp_path / "second", 0) == {model}
    provers = RunDirectory(tmp_path / "second").load_rollouts("train", 0)
    assert {t.model for tr in provers for t in tr.turns if t.agent == "prover"} == {
        "gpt-4o-mini-2024-07-18"
    }


def test_the_starting_model_replaces_the_base_model_for_fine_tuning_and_survives_a_resume(
    dataset, first_run, tmp_path
):
    hp = params(dataset, load_checkpoint_and_parameters=True, checkpoint_run_id=str(first_run))
    started = build_trainer(hp, settings(tmp_path / "second"))
    started.train(max_stages=3)
    resumed = PureTextEiTrainer.resume(tmp_path / "second", settings(tmp_path / "second"))
    group = resumed.groups["verifier"]
    start = json.loads((first_run / "state.json").read_text())["groups"]["verifier"]
    assert group.base_model_name == start["fine_tuned_model_name"]
    assert resumed.train().stage == "done"
    assert resumed.groups["verifier"].state.start_model == start["fine_tuned_model_name"]


def test_an_agent_the_earlier_run_never_fine_tuned_cannot_start_from_it(dataset, tmp_path):
    run_dir = tmp_path / "frozen"
    frozen = params(dataset, freeze_agent=True)
    build_trainer(frozen, settings(run_dir)).train()
    hp = params(dataset, load_checkpoint_and_parameters=True, checkpoint_run_id=str(run_dir))
    with pytest.raises(CheckpointError, match="never fine-tuned"):
        build_trainer(hp, settings(tmp_path / "second"))


def test_a_starting_model_trained_from_another_base_model_is_refused(first_run):
    with pytest.raises(CheckpointError, match="set model_name='gpt-4o-mini-2024-07-18'"):
        model_in_run_directory(first_run, "verifier", base_model="another-model")


def test_a_run_id_that_is_no_directory_needs_wandb_online(dataset, tmp_path):
    hp = params(dataset, load_checkpoint_and_parameters=True, checkpoint_run_id="abc123")
    with pytest.raises(CheckpointError, match="W&B is not online"):
        build_trainer(hp, settings(tmp_path / "second"))


# --------------------------------------------------------------------------- W&B
def test_the_run_artifact_holds_the_state_the_parameters_and_the_adapters(tmp_path):
    with heavy_imports():  # a LoRA worker thread of an earlier test may be importing TRL
        import wandb

    run_dir = tmp_path / "run"
    adapter = tmp_path / "jobs" / "verifier-it0" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    (run_dir).mkdir()
    (run_dir / "hyper_params.json").write_text("{}")
    state = {"groups": {"verifier": {"adapter_path": str(adapter)}, "prover": {}}}
    (run_dir / "state.json").write_text(json.dumps(state))
    artifact = build_run_artifact(wandb, run_dir, "run42")
    assert artifact.name == artifact_name("run42") and artifact.type == ARTIFACT_TYPE
    assert set(artifact.manifest.entries) == {
        "state.json",
        "hyper_params.json",
        "adapters/verifier/adapter_config.json",
    }


class ArtifactApi:
    """Stands in for ``wandb.Api`` (the network boundary): serves a run's artifact files."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.asked: list[tuple[str, str]] = []

    def artifact(self, name: str, type: str):
        self.asked.append((name, type))
        files = run_artifact_files(self.run_dir)

        class Artifact:
            def download(self, root: str) -> str:
                for relative, path in files.items():
                    target = Path(root) / relative
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if path.is_dir():
                        shutil.copytree(path, target)
                    else:
                        shutil.copy2(path, target)
                return root

        return Artifact()


def test_with_wandb_online_an_agent_starts_from_a_runs_artifact(dataset, first_run, tmp_path):
    from nip.training.checkpoint_start import apply_starting_models

    hp = params(
        dataset,
        load_checkpoint_and_parameters=True,
        checkpoint_run_id="run42",
        checkpoint_entity="lab",
        checkpoint_project="nip",
        checkpoint_version="v3",
    )
    api = ArtifactApi(first_run)
    trainer = build_trainer(params(dataset), settings(tmp_path / "second"))
    # The same groups, configured to start from the artifact (the W&B boundary is faked).
    for group in trainer.groups.values():
        group.params = hp.agents[next(iter(group.agent_wholes))]
    started = apply_starting_models(trainer.groups, tmp_path / "second", wandb_online=True, api=api)
    assert api.asked == [("lab/nip/nip-run-run42:v3", ARTIFACT_TYPE)]
    expected = json.loads((first_run / "state.json").read_text())["groups"]["verifier"]
    assert started["verifier"].model == expected["fine_tuned_model_name"]
    assert trainer.groups["verifier"].model_name == expected["fine_tuned_model_name"]
    assert (tmp_path / "second" / "checkpoints" / "run42" / "state.json").exists()
