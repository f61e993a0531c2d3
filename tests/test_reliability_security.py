"""Secrets and hostile input: API keys never leave the client, servers stay on loopback unless
protected, uploads cannot escape their directory.

The dataset sandbox's defences against hostile code (no processes, sockets, writes outside
its directory; CPU, memory, time and output limits) are tested in ``test_data_sandbox.py``.
"""

from __future__ import annotations

import json
import logging
import pickle
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import httpx
import pytest

from nip.backends import DummyBackend, DummyPolicy, GenerationRequest
from nip.backends.openai_compatible import OpenAIBackend, OpenAIBackendConfig
from nip.errors import AuthenticationError
from nip.jobs.dummy import DummyFineTuneBackend
from nip.jobs.openai_api import OpenAIFineTuneBackend
from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    RlParameters,
    TextRlParameters,
)
from nip.settings import ExperimentSettings
from nip.testing.server import create_app, serve
from nip.training.trainer import PureTextEiTrainer

pytestmark = pytest.mark.timeout(60)

PLANTED = "sk-test-PLANTED-4f9c2a7e1b8d3c6a5e0f"


@pytest.fixture
def dataset(tmp_path) -> Path:
    path = tmp_path / "tiny.jsonl"
    rows = [
        {
            "id": f"item{i}",
            "question": f"Return {i} plus the argument.",
            "solution": f"def f(x):\n    return x + {i + i % 2}\n",
            "y": 1 - i % 2,
            "split": "train" if i < 8 else "test",
        }
        for i in range(12)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def params(dataset: Path) -> HyperParameters:
    agents = {
        n: PureTextAgentParameters(model_provider="OpenAI", model_name="gpt-test")
        for n in ("prover", "verifier")
    }
    return HyperParameters(
        dataset=str(dataset),
        agents=agents,
        nip_protocol=NipProtocolParameters(max_message_rounds=5),
        rl=RlParameters(num_iterations=2, rollouts_per_iteration=4),
        text_rl=TextRlParameters(min_fine_tune_examples=1, test_scheme="all"),
    )


def shown(*things: object) -> str:
    """Everything a notebook or a log would show of these objects."""
    parts = []
    for thing in things:
        parts += [repr(thing), str(thing)]
        if hasattr(thing, "_repr_html_"):
            parts.append(thing._repr_html_())
        if isinstance(thing, BaseException):
            parts.append("".join(traceback.format_exception(thing)))
    return "\n".join(parts)


def leaks_in(directory: Path) -> list[str]:
    """Files under ``directory`` whose bytes contain the planted key."""
    return [
        str(p) for p in directory.rglob("*") if p.is_file() and PLANTED.encode() in p.read_bytes()
    ]


@pytest.mark.timeout(90)
def test_a_planted_api_key_appears_in_no_artefact_of_a_full_run(
    dataset, tmp_path, monkeypatch, caplog, capfd, fine_tuning_app
):
    caplog.set_level(logging.DEBUG)  # every library's debug log, the SDK's and httpx's too
    chat = serve(create_app(DummyBackend(DummyPolicy(decide_on_turn=3)), api_key=PLANTED))
    fine_tuning = serve(
        fine_tuning_app(DummyFineTuneBackend(), tmp_path / "ft-server", model="gpt-test")
    )
    monkeypatch.setenv("OPENAI_BASE_URL", chat.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
    run_dir = tmp_path / "run"
    try:
        hp = params(dataset)
        hp.save(tmp_path / "experiment.yaml")
        trainer = PureTextEiTrainer(
            hp,
            ExperimentSettings(run_dir=run_dir, cache="on", cache_path=tmp_path / "cache.sqlite"),
            fine_tune_backends={
                "prover": OpenAIFineTuneBackend(fine_tuning.base_url, PLANTED),
                "verifier": DummyFineTuneBackend(),
            },
        )
        trainer.train()
        batch = trainer.session.rollouts(trainer.session.datapoints(2))
        monkeypatch.setenv("OPENAI_API_KEY", PLANTED + "-revoked")  # the server echoes it
        refused = PureTextEiTrainer.resume(run_dir, ExperimentSettings(cache="off"))
        with pytest.raises(AuthenticationError) as caught:
            refused.session.rollouts(refused.session.datapoints(1))
    finally:
        chat.stop()
        fine_tuning.stop()

    assert trainer.finished and chat.stats().completed > 0
    assert leaks_in(run_dir) == [] and leaks_in(tmp_path / "ft-server") == []
    assert PLANTED not in (tmp_path / "experiment.yaml").read_text()
    assert PLANTED not in (tmp_path / "cache.sqlite").read_bytes().decode("latin-1")
    session = trainer.session
    objects = [trainer, session, batch, batch[0], *session.agents.values(), hp]
    objects += session.backends.backends.values()
    assert PLANTED not in shown(*objects, caught.value)
    assert all(PLANTED.encode() not in pickle.dumps(a) for a in session.agents.values())
    assert PLANTED not in caplog.text
    out, err = capfd.readouterr()
    assert PLANTED not in out + err
    assert "401" in str(caught.value)


async def test_a_refused_key_is_redacted_from_errors_and_debug_logs(caplog):
    caplog.set_level(logging.DEBUG)
    with serve(create_app(api_key="the-right-key")) as server:
        config = OpenAIBackendConfig(base_url=server.base_url, api_key=PLANTED)
        backend = OpenAIBackend(config)
        request = GenerationRequest(model="m", messages=({"role": "user", "content": "hi"},))
        with pytest.raises(AuthenticationError) as caught:
            await backend.generate(request)
        await backend.aclose()

    assert "Incorrect API key provided: ***" in str(caught.value)
    assert PLANTED not in shown(caught.value, backend, config) + caplog.text
    assert PLANTED.encode() not in pickle.dumps(caught.value)


# ----------------------------------------------------------------- binding and uploads
def test_the_server_refuses_a_non_loopback_address_without_a_token(tmp_path, monkeypatch):
    """``nip serve --host 0.0.0.0`` without a token refuses to start, naming the token
    (skipped where ``nip serve`` does not exist)."""
    config = pytest.importorskip("nip.server.config", reason="nip serve does not exist yet")
    monkeypatch.delenv(config.API_KEY_ENV, raising=False)
    command = [sys.executable, "-m", "nip.cli", "serve", "--host", "0.0.0.0", "--port", "0"]
    command += ["--engine", "none", "--storage-dir", str(tmp_path / "server")]
    try:
        finished = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("nip serve listened on 0.0.0.0 without a token (it ran for 30 s)")

    assert finished.returncode != 0
    assert "without a bearer token" in finished.stderr
    assert config.API_KEY_ENV in finished.stderr


def files_outside(root: Path, top: Path) -> set[Path]:
    return {p for p in top.rglob("*") if p.is_file() and root not in p.parents}


@pytest.mark.parametrize(
    "filename", ["../../x", "/tmp/nip-upload-escape", "..", "a/../../x", r"..\..\x"]
)
def test_an_uploaded_file_name_cannot_escape_the_storage_directory(
    tmp_path, filename, fine_tuning_app
):
    root = tmp_path / "deep" / "store"
    line = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    content = (json.dumps(line) + "\n").encode()
    boundary = "nip-boundary"
    disposition = f'Content-Disposition: form-data; name="file"; filename="{filename}"'
    body = (
        f"--{boundary}\r\n"
        'Content-Disposition: form-data; name="purpose"\r\n\r\nfine-tune\r\n'
        f"--{boundary}\r\n{disposition}\r\nContent-Type: application/jsonl\r\n\r\n"
    ).encode()
    body += content + f"\r\n--{boundary}--\r\n".encode()
    outside_before = files_outside(root, tmp_path)

    with serve(fine_tuning_app(DummyFineTuneBackend(), root)) as server:
        reply = httpx.post(
            f"{server.base_url}/files",
            content=body,
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
        )
        stored = reply.json()
        echoed = httpx.get(f"{server.base_url}/files/{stored['id']}/content").content

    assert reply.status_code == 200
    assert "/" not in stored["filename"] and stored["filename"] not in ("..", ".")
    assert echoed == content
    assert (root / "files" / stored["id"]).read_bytes() == content
    assert files_outside(root, tmp_path) == outside_before
    assert not Path("/tmp/nip-upload-escape").exists()
    shutil.rmtree(root)
