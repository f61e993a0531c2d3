"""Which extra each feature needs: one table, one check, one line for the user.

A missing module is simulated by setting ``sys.modules[name] = None`` (Python's own way to
make an import fail), so these tests run in the full development environment;
``tests/test_base_install.py`` checks the same on a real base install.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import threading
import tomllib
from pathlib import Path

import pytest

from nip.errors import MissingExtraError, NipError
from nip.extras import FEATURES, available, needs, require

ROOT = Path(__file__).resolve().parents[1]


def block(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``modules`` (and every nip module that imported them) fail to import."""
    for name in list(sys.modules):
        if name.startswith(("nip.viz", "nip.widgets", "nip.server.app")):
            monkeypatch.delitem(sys.modules, name)
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def _extra_requirements() -> dict[str, set[str]]:
    """Each extra of pyproject.toml and the distributions it installs (nip[...] expanded)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]

    def names(extra: str) -> set[str]:
        found = set()
        for requirement in extras[extra]:
            name = re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]
            if name == "nip":
                for inner in re.search(r"\[(.*)\]", requirement).group(1).split(","):
                    found |= names(inner.strip())
            else:
                found.add(name.lower().replace("_", "-"))
        return found

    return {extra: names(extra) for extra in extras}


def test_every_module_a_feature_needs_is_installed_by_that_features_extra():
    extras = _extra_requirements()
    providers = importlib.metadata.packages_distributions()
    for name, feature in FEATURES.items():
        assert feature.extra in extras, f"{name}: no extra {feature.extra!r} in pyproject.toml"
        for module in feature.modules:
            # A module not installed here (bitsandbytes, without a GPU) is named like its
            # distribution.
            distributions = {d.lower().replace("_", "-") for d in providers.get(module, [module])}
            assert distributions & extras[feature.extra], (
                f"{name}: {module} comes from {distributions or 'nothing installed'}, "
                f"which nip[{feature.extra}] does not install"
            )


def test_a_missing_module_is_one_line_naming_the_feature_and_the_install_command(monkeypatch):
    block(monkeypatch, "fastapi")
    assert not available("server")
    with pytest.raises(MissingExtraError) as raised:
        require("server")
    error = raised.value
    assert isinstance(error, NipError) and isinstance(error, ImportError)
    assert (error.feature, error.extra, error.modules) == ("nip serve", "server", ["fastapi"])
    assert str(error) == "nip serve needs fastapi (not installed): pip install 'nip[server]'"


def test_everything_installed_passes_and_an_unknown_feature_is_a_key_error():
    require("server")
    assert available("viz")
    with pytest.raises(KeyError):
        require("no-such-feature")


def test_needs_turns_a_failed_import_of_the_features_module_into_the_one_line(monkeypatch):
    with needs("viz"):
        import pandas  # noqa: F401
    monkeypatch.setitem(sys.modules, "plotly.graph_objects", None)  # a broken install
    with pytest.raises(MissingExtraError, match=r"pip install 'nip\[notebook\]'"), needs("viz"):
        import plotly.graph_objects  # noqa: F401
    # A module that is not the feature's keeps its own error.
    with pytest.raises(ModuleNotFoundError, match="no_such_module"), needs("viz"):
        import no_such_module  # noqa: F401


@pytest.mark.parametrize(
    ("module", "statement", "extra"),
    [
        ("fastapi", "import nip.server.app", "server"),
        ("pandas", "import nip.viz", "notebook"),
        ("ipywidgets", "from nip.widgets import ParametersForm", "notebook"),
    ],
)
def test_importing_a_feature_without_its_extra_names_the_extra(
    monkeypatch, module, statement, extra
):
    block(monkeypatch, module)
    with pytest.raises(MissingExtraError, match=re.escape(f"pip install 'nip[{extra}]'")):
        exec(statement, {})


@pytest.mark.parametrize(
    ("argv", "module", "extra"),
    [
        (["serve", "--engine", "none"], "fastapi", "server"),
        (["serve", "--engine", "transformers", "--storage-dir", "RUN"], "torch", "local"),
        (["compare", "RUN"], "pandas", "notebook"),
    ],
)
def test_the_cli_prints_one_line_and_fails_without_an_extra(
    monkeypatch, capsys, tmp_path, argv, module, extra
):
    from nip.cli import main

    block(monkeypatch, module)
    argv = [str(tmp_path) if a == "RUN" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nip: error: ")
    assert f"pip install 'nip[{extra}]'" in err


def test_the_lora_backend_is_refused_in_the_caller_not_in_a_worker_thread(monkeypatch, tmp_path):
    from nip.jobs.local_lora import InProcessLoraFineTuneBackend

    block(monkeypatch, "trl")
    threads = threading.active_count()
    with pytest.raises(MissingExtraError, match=r"pip install 'nip\[train\]'"):
        InProcessLoraFineTuneBackend(tmp_path / "jobs")
    assert threading.active_count() == threads


# -------------------------------------------------------------------------------- runs
def _params(dataset: Path, provider: str = "dummy"):
    from nip.parameters import HyperParameters, PureTextAgentParameters, RlParameters

    agent = (
        PureTextAgentParameters(use_dummy_api=True)
        if provider == "dummy"
        else PureTextAgentParameters(model_provider=provider, model_name="SmolLM2-135M-Instruct")
    )
    return HyperParameters(
        dataset=str(dataset),
        agents={"prover": agent, "verifier": agent},
        nip_protocol={"max_message_rounds": 3},
        rl=RlParameters(num_iterations=2, rollouts_per_iteration=4),
        text_rl={"min_fine_tune_examples": 1, "test_scheme": "none"},
    )


@pytest.fixture
def dataset(make_tiny_dataset) -> Path:
    return make_tiny_dataset(items=8, train=6)


def test_without_wandb_a_run_left_at_auto_logs_to_its_directory_and_says_so(
    monkeypatch, capsys, tmp_path, dataset
):
    from nip.settings import ExperimentSettings
    from nip.training.trainer import PureTextEiTrainer

    monkeypatch.delenv("WANDB_MODE", raising=False)
    block(monkeypatch, "wandb")
    run_dir = tmp_path / "run"
    settings = ExperimentSettings(run_dir=run_dir, show_progress=False, wandb_mode="auto")
    state = PureTextEiTrainer(_params(dataset), settings).train()
    assert state.stage == "done"
    said = [line for line in capsys.readouterr().err.splitlines() if "W&B" in line]
    assert said == [
        f"W&B is not installed: metrics are logged to {run_dir} only "
        "(pip install 'nip[wandb]' to log them to W&B too)"
    ]
    assert not (run_dir / "wandb").exists()


@pytest.mark.parametrize(("setting", "environment"), [("online", None), ("auto", "offline")])
def test_asking_for_wandb_without_it_is_refused_before_the_run_directory_is_made(
    monkeypatch, tmp_path, dataset, setting, environment
):
    from nip.settings import ExperimentSettings
    from nip.training.trainer import PureTextEiTrainer

    if environment:
        monkeypatch.setenv("WANDB_MODE", environment)
    else:
        monkeypatch.delenv("WANDB_MODE", raising=False)
    block(monkeypatch, "wandb")
    settings = ExperimentSettings(run_dir=tmp_path / "run", wandb_mode=setting)
    with pytest.raises(MissingExtraError, match=r"pip install 'nip\[wandb\]'"):
        PureTextEiTrainer(_params(dataset), settings)
    assert not (tmp_path / "run").exists()


def test_analysing_a_local_run_starts_no_training_machinery(monkeypatch, tmp_path, dataset):
    from nip.cli import main
    from nip.settings import ExperimentSettings
    from nip.training.trainer import PureTextEiTrainer

    run_dir = tmp_path / "run"
    PureTextEiTrainer(_params(dataset, "Local"), ExperimentSettings(run_dir=run_dir))
    block(monkeypatch, "accelerate", "trl", "peft")  # building a LoRA backend would fail
    assert main(["analyse", str(run_dir), "--dummy", "--quiet"]) == 0


def test_the_readme_says_what_every_extra_brings():
    readme = (ROOT / "README.md").read_text()
    for extra in _extra_requirements():
        assert f"\n| `{extra}` | " in readme, f"README.md: no row for the extra {extra!r}"
