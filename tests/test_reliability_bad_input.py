"""Bad input is a typed error that names the problem, and a run that meets one loses nothing.

The table covers what other files do not (they cover, by the same standard: unknown keys,
wrong literals and bounds in ``test_parameters.py``; malformed dataset rows in
``test_data_loader.py``; template variables in ``test_prompts.py``; HTTP 401/402/404 and
400 from the backend in ``test_backend_openai.py``; fine-tune files and models the server
refuses in ``test_openai_fine_tuning.py``). The tests after the table run real training
against the local test server and check that what was done before the error is kept, and
that resuming gives the same run as one that never failed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from nip.backends import DummyBackend, DummyPolicy
from nip.data import DatasetFormatError
from nip.errors import (
    ConfigFileError,
    FineTuneError,
    InsufficientCreditsError,
    InvalidParameterError,
    ModelNotFoundError,
    NipError,
    UnknownKeyError,
)
from nip.jobs.dummy import DummyFineTuneBackend
from nip.jobs.openai_api import OpenAIFineTuneBackend
from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    RlParameters,
    TextRlParameters,
)
from nip.prompts import PromptTemplateError
from nip.settings import ExperimentSettings
from nip.testing.faults import FaultPlan
from nip.testing.server import RunningServer, create_app, serve
from nip.training.trainer import PureTextEiTrainer

pytestmark = pytest.mark.timeout(60)


def _row(i: int, **fields) -> dict:
    return {
        "id": f"item{i}",
        "question": f"Return {i} plus the argument.",
        "solution": f"def f(x):\n    return x + {i + i % 2}\n",
        "y": 1 - i % 2,
        "split": "train" if i < 12 else "test",
        **fields,
    }


@pytest.fixture
def dataset(tmp_path) -> Path:
    """12 train and 4 test items, half of them correct."""
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps(_row(i)) + "\n" for i in range(16)))
    return path


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def openai_params(dataset: Path | str, verifier_model: str = "gpt-test") -> HyperParameters:
    """Expert Iteration with both agents on the OpenAI provider (pointed at a test server)."""
    return HyperParameters(
        trainer="pure_text_ei",
        dataset=str(dataset),
        agents={
            "prover": PureTextAgentParameters(model_provider="OpenAI", model_name="gpt-test"),
            "verifier": PureTextAgentParameters(model_provider="OpenAI", model_name=verifier_model),
        },
        nip_protocol=NipProtocolParameters(max_message_rounds=5),
        rl=RlParameters(num_iterations=2, rollouts_per_iteration=6),
        text_rl=TextRlParameters(min_fine_tune_examples=1, test_scheme="all"),
        pure_text_ei={"reward_threshold": 0.5},
    )


def settings(run_dir: Path) -> ExperimentSettings:
    return ExperimentSettings(
        run_dir=run_dir, show_progress=False, cache="off", wandb_mode="disabled"
    )


def dummy_fine_tuning() -> dict[str, DummyFineTuneBackend]:
    return {"prover": DummyFineTuneBackend(), "verifier": DummyFineTuneBackend()}


@pytest.fixture
def chat_server(monkeypatch):
    """Start a chat test server that nip's OpenAI provider talks to; stopped afterwards."""
    servers: list[RunningServer] = []

    def start(**options) -> RunningServer:
        backend = DummyBackend(DummyPolicy(decide_on_turn=3))
        servers.append(serve(create_app(backend, **options)))
        monkeypatch.setenv("OPENAI_BASE_URL", servers[-1].base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


# ------------------------------------------------------------------------ the table
def _train_on(dataset_path: Path, tmp_path: Path) -> None:
    hp = HyperParameters(
        dataset=str(dataset_path),
        agents={n: PureTextAgentParameters(use_dummy_api=True) for n in ("prover", "verifier")},
    )
    PureTextEiTrainer(hp, ExperimentSettings(run_dir=tmp_path / "run", show_progress=False)).train()


CASES: list[tuple[str, Callable[[Path], object], type[Exception], str]] = [
    (
        "config file that is not YAML",
        lambda tmp: HyperParameters.load(write(tmp / "c.yaml", "agents: [prover,\n")),
        ConfigFileError,
        r"c\.yaml: not valid YAML",
    ),
    (
        "config file that is not JSON",
        lambda tmp: HyperParameters.load(write(tmp / "c.json", '{"rl": {"seed": 1,}}')),
        ConfigFileError,
        r"c\.json: not valid JSON: .*line 1",
    ),
    (
        "config file that is a list",
        lambda tmp: HyperParameters.load(write(tmp / "c.yaml", "- nip\n- debate\n")),
        InvalidParameterError,
        "expected a mapping of field values",
    ),
    (
        "config file naming an unknown protocol",
        lambda tmp: HyperParameters.load(write(tmp / "c.yaml", "interaction_protocol: nipp\n")),
        InvalidParameterError,
        r"interaction_protocol='nipp'.*'debate'",
    ),
    (
        "config file naming an agent the protocol lacks",
        lambda tmp: HyperParameters.load(write(tmp / "c.yaml", "agents:\n  judge: {}\n")),
        InvalidParameterError,
        "'nip' has no agent 'judge'.*prover, verifier",
    ),
    (
        "config file with a wrong-typed value",
        lambda tmp: HyperParameters.load(write(tmp / "c.yaml", "rl:\n  num_iterations: many\n")),
        InvalidParameterError,
        r"rl\.num_iterations='many'",
    ),
    (
        "config file with a misspelt field",
        lambda tmp: HyperParameters.load(write(tmp / "c.yaml", "rl:\n  num_iteration: 3\n")),
        UnknownKeyError,
        "num_iteration.*num_iterations",
    ),
    (
        "unknown response-cache mode",
        lambda tmp: ExperimentSettings(cache="sometimes"),  # type: ignore[arg-type]
        InvalidParameterError,
        "cache='sometimes'.*'auto', 'on' or 'off'",
    ),
    (
        "dataset row without a solution, met by a training run",
        lambda tmp: _train_on(write(tmp / "d.jsonl", json.dumps(_row(0, solution=None))), tmp),
        DatasetFormatError,
        r"d\.jsonl, row 1.*solution",
    ),
    (
        "dataset row whose label is a string",
        lambda tmp: _train_on(write(tmp / "d.jsonl", json.dumps(_row(0, y="yes"))), tmp),
        DatasetFormatError,
        r"row 1.*\by\b",
    ),
    (
        "prompt template with an unknown variable, at session start",
        lambda tmp: _train_on_template(write(tmp / "t.txt", "Check $soluton, $agent_name."), tmp),
        PromptTemplateError,
        "unknown template variable.*soluton",
    ),
]


def _train_on_template(template: Path, tmp_path: Path) -> None:
    hp = HyperParameters(
        agents={
            "prover": PureTextAgentParameters(use_dummy_api=True),
            "verifier": PureTextAgentParameters(
                use_dummy_api=True, system_prompt_template_path=str(template)
            ),
        }
    )
    PureTextEiTrainer(hp, ExperimentSettings(run_dir=tmp_path / "run", show_progress=False)).train()


@pytest.mark.parametrize(
    ("action", "error", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_a_typed_error_naming_the_problem(tmp_path, action, error, message):
    with pytest.raises(error, match=message) as caught:
        action(tmp_path)

    assert isinstance(caught.value, NipError)
    assert not list((tmp_path / "run").glob("rollouts/*"))  # nothing half-written


# ------------------------------------------------------------- during a training run
def conversation(run_dir: Path) -> dict[str, list]:
    """Everything a run produced that does not depend on timing: each rollout file's
    dialogues (messages and decisions) and each fine-tune dataset."""
    found = {}
    for path in sorted(run_dir.glob("rollouts/*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        found[path.name] = [
            (r["id"], [(t["agent"], t["raw_text"]) for t in r["turns"]], r["decision"])
            for r in rows
        ]
    for path in sorted(run_dir.glob("fine_tune/*.jsonl")):
        found[path.name] = path.read_text().splitlines()
    return found


def test_an_exhausted_credit_balance_stops_the_run_and_resuming_loses_nothing(
    dataset, tmp_path, chat_server
):
    chat_server()
    PureTextEiTrainer(
        openai_params(dataset), settings(tmp_path / "clean"), fine_tune_backends=dummy_fine_tuning()
    ).train()
    # Request 40 falls in iteration 0's test stage (30 training calls come first).
    chat_server(faults=FaultPlan(schedule={40: "insufficient_credits"}))
    trainer = PureTextEiTrainer(
        openai_params(dataset), settings(tmp_path / "run"), fine_tune_backends=dummy_fine_tuning()
    )

    with pytest.raises(InsufficientCreditsError, match=r"402.*add credits"):
        trainer.train()

    state = json.loads((tmp_path / "run" / "state.json").read_text())
    assert (state["iteration"], state["stage"]) == (0, "test")
    assert (tmp_path / "run" / "rollouts" / "train_it0000.jsonl").exists()
    assert not (tmp_path / "run" / "rollouts" / "test_it0000.jsonl").exists()
    PureTextEiTrainer.resume(
        tmp_path / "run", settings(tmp_path / "run"), fine_tune_backends=dummy_fine_tuning()
    ).train()
    assert conversation(tmp_path / "run") == conversation(tmp_path / "clean")


def test_a_model_the_server_does_not_know_stops_the_run_before_anything_is_saved(
    dataset, tmp_path, chat_server
):
    chat_server(model_names=["gpt-test"])
    trainer = PureTextEiTrainer(
        openai_params(dataset, verifier_model="gpt-nope"),
        settings(tmp_path / "run"),
        fine_tune_backends=dummy_fine_tuning(),
    )

    with pytest.raises(ModelNotFoundError, match="gpt-nope"):
        trainer.train()

    assert not (tmp_path / "run" / "state.json").exists()
    assert not list((tmp_path / "run").glob("rollouts/*"))


def test_a_fine_tune_job_the_server_refuses_keeps_the_rollouts_and_resumes(
    dataset, tmp_path, chat_server, fine_tuning_app
):
    chat_server()
    refusing = serve(fine_tuning_app(DummyFineTuneBackend(), tmp_path / "ft-server"))
    try:
        backends = {
            "prover": DummyFineTuneBackend(),
            "verifier": OpenAIFineTuneBackend(refusing.base_url, "sk-test-key"),
        }
        trainer = PureTextEiTrainer(
            openai_params(dataset), settings(tmp_path / "run"), fine_tune_backends=backends
        )
        with pytest.raises(FineTuneError, match="'gpt-test' is not available for fine-tuning"):
            trainer.train()
    finally:
        refusing.stop()

    state = json.loads((tmp_path / "run" / "state.json").read_text())
    assert (state["iteration"], state["stage"]) == (0, "create_fine_tune_jobs")
    assert (tmp_path / "run" / "rollouts" / "test_it0000.jsonl").exists()
    resumed = PureTextEiTrainer.resume(
        tmp_path / "run", settings(tmp_path / "run"), fine_tune_backends=dummy_fine_tuning()
    )
    assert resumed.train().stage == "done"
