"""``nip serve`` over real HTTP on loopback: authentication, versions, the job queue across a
restart, the hand-over of adapters to the inference engine, and the CPU end to end."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import warnings

import httpx
import pytest

from nip.backends.self_hosted import (
    API_VERSION,
    IncompatibleServerError,
    ServerVersionWarning,
    check_server_version,
)
from nip.cli import main as nip_main
from nip.errors import AuthenticationError, FineTuneError
from nip.jobs import FineTuneEvent, FineTuneJob, FineTuneSpec
from nip.jobs.self_hosted import SelfHostedFineTuneBackend
from nip.server.app import create_server_app, run_server
from nip.server.config import InsecureServerError, ServerConfig, check_exposure
from nip.server.engine import EngineReply, EngineStatus
from nip.testing.server import serve

pytestmark = pytest.mark.timeout(120)

TOKEN = "s3cret-token"
SFT_LINE = {
    "messages": [
        {"role": "user", "content": "Is the code correct?"},
        {"role": "assistant", "content": "Decision: accept"},
    ]
}


class SlowTrainer:
    """A fine-tune backend that trains nothing for ``seconds``; its state outlives servers."""

    name = "slow"

    def __init__(self, seconds: float = 0.3):
        self.seconds = seconds
        self.hold = False  # while True, every job keeps running
        self.specs: dict[str, FineTuneSpec] = {}
        self.started: dict[str, float] = {}

    async def create_job(self, spec: FineTuneSpec) -> str:
        job_id = f"slow-{len(self.specs)}"
        self.specs[job_id], self.started[job_id] = spec, time.monotonic()
        return job_id

    async def get_job(self, job_id: str) -> FineTuneJob:
        if job_id not in self.specs:
            return FineTuneJob(job_id, "not_found")
        if self.hold or time.monotonic() - self.started[job_id] < self.seconds:
            return FineTuneJob(job_id, "running")
        name = self.specs[job_id].job_name
        return FineTuneJob(job_id, "succeeded", fine_tuned_model=name, adapter_path=f"/a/{name}")

    async def cancel_job(self, job_id: str) -> None:
        return None

    async def list_events(self, job_id: str) -> list[FineTuneEvent]:
        return []


class RecordingEngine:
    """An inference engine that records what the server asks of it."""

    kind = "recording"

    def __init__(self):
        self.calls: list[tuple[str, ...]] = []
        self.adapters: dict[str, str] = {}

    def status(self) -> EngineStatus:
        return EngineStatus(self.kind, "ready", "base", sorted(self.adapters))

    async def start(self) -> None:
        self.calls.append(("start",))

    async def stop(self) -> None:
        self.calls.append(("stop",))

    async def load_adapter(self, name: str, path: str) -> None:
        self.calls.append(("load_adapter", name, path))
        self.adapters[name] = path

    async def pause(self) -> None:
        self.calls.append(("pause",))

    async def resume(self) -> None:
        self.calls.append(("resume",))

    async def forward(self, endpoint, body) -> EngineReply:
        return EngineReply.json(200, {"echo": body["model"]})


def config_for(tmp_path, **changes) -> ServerConfig:
    # The model is only resolved to a folder; nothing loads it in these tests.
    model = tmp_path / "base"
    model.mkdir(exist_ok=True)
    values = dict(model=str(model), engine="none", storage_dir=str(tmp_path / "srv"))
    return ServerConfig(**{**values, **changes, "poll_interval_s": 0.05})


def start(tmp_path, trainer, engine=None, api_key=None):
    config = config_for(tmp_path)
    app = create_server_app(
        config, api_key=api_key, engine=engine or RecordingEngine(), fine_tune_backend=trainer
    )
    return serve(app)


async def wait_until(check, timeout_s: float = 20.0, interval_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while not (result := await check()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(interval_s)
    return result


async def train_until_succeeded(url: str, spec: FineTuneSpec) -> FineTuneJob:
    """Create ``spec``'s job on the server at ``url`` and wait for it to succeed."""
    backend = SelfHostedFineTuneBackend(url)
    job_id = await backend.create_job(spec)

    async def succeeded():
        job = await backend.get_job(job_id)
        return job if job.status == "succeeded" else None

    return await wait_until(succeeded)


# ---------------------------------------------------------------------- authentication
def test_a_server_beyond_loopback_refuses_to_start_without_a_token():
    with pytest.raises(InsecureServerError, match="NIP_SERVER_API_KEY"):
        check_exposure("0.0.0.0", None)
    with pytest.raises(InsecureServerError):
        run_server(ServerConfig(host="gpu-box.example.org"))  # refused before anything binds
    check_exposure("0.0.0.0", TOKEN)
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        check_exposure(host, None)


def test_nip_serve_exits_with_an_error_when_exposed_without_a_token(monkeypatch, capsys):
    monkeypatch.delenv("NIP_SERVER_API_KEY", raising=False)

    assert nip_main(["serve", "--host", "0.0.0.0", "--engine", "none"]) == 2
    assert "without a bearer token" in capsys.readouterr().err


def test_with_a_token_every_request_needs_it(tmp_path):
    with start(tmp_path, SlowTrainer(), api_key=TOKEN) as server:
        url = server.url
        assert httpx.get(f"{url}/version").status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert httpx.get(f"{url}/health", headers=wrong).status_code == 401
        refused = httpx.post(f"{url}/v1/chat/completions", json={"model": "base"})
        assert refused.status_code == 401 and "bearer token" in refused.json()["error"]["message"]
        good = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(f"{url}/version", headers=good).status_code == 200
        assert httpx.get(f"{url}/v1/fine_tuning/jobs", headers=good).status_code == 200


# ---------------------------------------------------------------------- versions
def test_version_names_the_nip_and_api_versions(tmp_path):
    with start(tmp_path, SlowTrainer()) as server:
        info = httpx.get(f"{server.url}/version").json()
    assert info["api_version"] == API_VERSION and info["version"]


def test_a_different_api_minor_version_warns_and_a_major_one_is_refused():
    with pytest.warns(ServerVersionWarning, match=r"API 1\.7"):
        check_server_version({"api_version": "1.7", "version": "0.9"}, "http://x", client="1.0")
    with pytest.raises(IncompatibleServerError, match=r"API 2\.0"):
        check_server_version({"api_version": "2.0"}, "http://x", client="1.0")
    with pytest.raises(IncompatibleServerError, match="no API version"):
        check_server_version({"version": "0.1.0"}, "http://x")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_server_version({"api_version": API_VERSION}, "http://x")


def test_the_fine_tuning_client_refuses_a_server_of_another_major_version():
    from fastapi import FastAPI

    future = FastAPI()
    future.get("/version")(lambda: {"version": "9.0.0", "api_version": "9.0"})
    with serve(future) as server:
        backend = SelfHostedFineTuneBackend(server.url)
        spec = FineTuneSpec("base", "supervised", (SFT_LINE,))
        with pytest.raises(IncompatibleServerError, match=r"API 9\.0"):
            asyncio.run(backend.create_job(spec))


def test_a_wrong_token_is_an_authentication_error_for_the_client(tmp_path):
    with start(tmp_path, SlowTrainer(), api_key=TOKEN) as server:
        backend = SelfHostedFineTuneBackend(server.url, "wrong")
        with pytest.raises(AuthenticationError, match="NIP_SERVER_API_KEY"):
            asyncio.run(backend.check_server())


# ---------------------------------------------------------------------- queue and engine
def test_jobs_survive_a_server_restart_mid_queue(tmp_path):
    trainer = SlowTrainer(seconds=0.2)  # its jobs outlive the server, like training processes
    trainer.hold = True
    spec = FineTuneSpec("base", "supervised", (SFT_LINE,), job_name="verifier-it0")

    async def submit(url):
        backend = SelfHostedFineTuneBackend(url)
        return [await backend.create_job(spec) for _ in range(2)]

    async def all_done(url):
        backend = SelfHostedFineTuneBackend(url)
        jobs = [await backend.get_job(i) for i in ids]
        return jobs if all(j.status == "succeeded" for j in jobs) else None

    with start(tmp_path, trainer) as first:
        ids = asyncio.run(submit(first.url))
        asyncio.run(wait_until(lambda: asyncio.sleep(0, result=bool(trainer.specs))))
    # Stopped with the first job training and the second queued.
    assert len(trainer.specs) == 1
    trainer.hold = False
    with start(tmp_path, trainer) as second:
        jobs = asyncio.run(wait_until(lambda: all_done(second.url)))
    assert len(trainer.specs) == 2  # the first job was found again, not trained twice
    assert [j.fine_tuned_model for j in jobs] == ["verifier-it0", "verifier-it0-2"]


def test_training_pauses_the_engine_then_the_new_adapter_is_served(tmp_path):
    engine = RecordingEngine()
    spec = FineTuneSpec("base", "supervised", (SFT_LINE,), job_name="prover-it1")

    async def lifecycle(url):
        backend = SelfHostedFineTuneBackend(url)
        job_id = await backend.create_job(spec)

        async def succeeded():
            job = await backend.get_job(job_id)
            return job if job.status == "succeeded" else None

        await wait_until(succeeded)
        return await wait_until(lambda: asyncio.sleep(0, result=len(engine.calls) >= 4))

    with start(tmp_path, SlowTrainer(), engine=engine) as server:
        asyncio.run(lifecycle(server.url))
        models = httpx.get(f"{server.url}/v1/models").json()["data"]
    assert engine.calls[:4] == [
        ("start",),
        ("pause",),
        ("resume",),
        ("load_adapter", "prover-it1", "/a/prover-it1"),
    ]
    assert {"id": "prover-it1", "object": "model", "owned_by": "nip", "parent": "base"} in models


def test_a_job_can_continue_from_an_earlier_fine_tune_by_name(tmp_path):
    trainer = SlowTrainer(seconds=0.0)

    def train(url, model, name):
        spec = FineTuneSpec(model, "supervised", (SFT_LINE,), name)
        return asyncio.run(train_until_succeeded(url, spec))

    with start(tmp_path, trainer) as server:
        first = train(server.url, "base", "verifier-it0")
        train(server.url, first.fine_tuned_model, "verifier-it1")
    continued = trainer.specs["slow-1"]
    assert continued.base_model == str(tmp_path / "base")
    assert continued.previous_adapter == "/a/verifier-it0"


def test_a_rank_above_what_vllm_serves_is_refused_at_creation(tmp_path):
    engine = RecordingEngine()
    engine.kind = "vllm"
    with start(tmp_path, SlowTrainer(), engine=engine) as server:
        backend = SelfHostedFineTuneBackend(server.url)
        spec = FineTuneSpec("base", "supervised", (SFT_LINE,), lora_rank=128)
        with pytest.raises(FineTuneError, match=r"lora.rank=128.*up to 64"):
            asyncio.run(backend.create_job(spec))


def test_a_stack_wider_than_what_vllm_serves_is_refused_at_creation(tmp_path):
    """vLLM is given one adapter as wide as the whole stack (see stacked_adapters)."""

    class RankedTrainer(SlowTrainer):
        """Leaves an adapter folder whose config holds the job's rank."""

        async def get_job(self, job_id: str) -> FineTuneJob:
            job = await super().get_job(job_id)
            if job.status == "succeeded":
                folder = tmp_path / "adapters" / str(job.fine_tuned_model)
                folder.mkdir(parents=True, exist_ok=True)
                rank = self.specs[job_id].lora_rank
                (folder / "adapter_config.json").write_text(json.dumps({"r": rank}))
                job = dataclasses.replace(job, adapter_path=str(folder))
            return job

    engine = RecordingEngine()
    engine.kind = "vllm"

    with start(tmp_path, RankedTrainer(), engine=engine) as server:
        first = FineTuneSpec("base", "supervised", (SFT_LINE,), "verifier-it0", lora_rank=48)
        asyncio.run(train_until_succeeded(server.url, first))
        stacked = dataclasses.replace(
            first,
            base_model="verifier-it0",
            job_name="verifier-it1",
            lora_rank=32,
            stack_lora_adapters=True,
        )
        with pytest.raises(FineTuneError, match=r"adds up to rank 80, above the 64"):
            asyncio.run(train_until_succeeded(server.url, stacked))
        continued = dataclasses.replace(stacked, stack_lora_adapters=False)
        assert asyncio.run(train_until_succeeded(server.url, continued)).status == "succeeded"


def test_a_full_fine_tuning_request_is_refused_at_creation_not_trained_as_lora(tmp_path):
    with start(tmp_path, SlowTrainer()) as server:
        backend = SelfHostedFineTuneBackend(server.url)
        spec = FineTuneSpec("base", "supervised", (SFT_LINE,), use_lora=False)
        with pytest.raises(FineTuneError, match=r"lora.use_lora must be true.*LoRA adapters only"):
            asyncio.run(backend.create_job(spec))


# ---------------------------------------------------------------------- the client side
def test_self_hosted_agents_talk_to_the_server_port_with_the_server_token(monkeypatch):
    from nip.backends.self_hosted import SelfHostedBackend
    from nip.parameters import PureTextAgentParameters
    from nip.providers.pool import BackendPool, endpoint_key
    from nip.settings import ExperimentSettings

    monkeypatch.setenv("NIP_SERVER_API_KEY", TOKEN)
    params = PureTextAgentParameters(
        model_provider="SelfHosted",
        language_model_server_scheme_host="http://gpu-box",
        language_model_server_port=5001,
    )
    backend = BackendPool(ExperimentSettings(cache="off")).backend_for(params)

    assert isinstance(backend, SelfHostedBackend)
    assert backend.config.base_url == "http://gpu-box:5001/v1"
    assert backend.server_url == "http://gpu-box:5001"
    assert backend.config.resolve_api_key() == TOKEN and TOKEN not in repr(backend)
    assert endpoint_key(params) == "selfhosted:http://gpu-box:5001"


def test_the_settings_concurrency_limit_applies_to_self_hosted_agents_too():
    from nip.backends.self_hosted import SelfHostedBackend
    from nip.parameters import PureTextAgentParameters
    from nip.providers.pool import BackendPool
    from nip.settings import ExperimentSettings

    pool = BackendPool(ExperimentSettings(cache="off", max_concurrency=3))
    backend = pool.backend_for(PureTextAgentParameters(model_provider="SelfHosted"))

    assert isinstance(backend, SelfHostedBackend) and backend.config.max_concurrency == 3


def test_waiting_for_a_server_whose_engine_failed_raises_its_error(tmp_path):
    from nip.backends.self_hosted import wait_for_server
    from nip.errors import BackendUnavailableError

    class FailedEngine(RecordingEngine):
        def status(self) -> EngineStatus:
            return EngineStatus("vllm", "failed", "base", error="CUDA out of memory")

    server = start(tmp_path, SlowTrainer(), engine=FailedEngine())
    with server, pytest.raises(BackendUnavailableError, match="CUDA out of memory"):
        asyncio.run(wait_for_server(server.url, None, timeout_s=10))


def test_waiting_for_a_server_that_is_not_there_times_out():
    import socket

    from nip.backends.self_hosted import wait_for_server
    from nip.errors import BackendUnavailableError

    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with pytest.raises(BackendUnavailableError, match=r"not ready in 0\.5 s"):
            asyncio.run(wait_for_server(url, None, timeout_s=0.5, poll_interval_s=0.1))


def test_nip_serve_starts_answers_and_stops_on_sigterm(tmp_path):
    import signal
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "base").mkdir()
    command = [sys.executable, "-m", "nip.cli", "serve", "--port", str(port), "--engine", "none"]
    command += ["--model", str(tmp_path / "base"), "--storage-dir", str(tmp_path / "srv")]
    process = subprocess.Popen(
        [*command, "--api-key", TOKEN], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None and time.monotonic() < deadline, "did not start"
            try:
                info = httpx.get(f"http://127.0.0.1:{port}/version", headers=headers).json()
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert info["api_version"] == API_VERSION
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)  # uvicorn shuts down, then re-raises the signal
        assert b"Application shutdown complete" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def test_a_trainer_waits_for_its_server_before_the_first_stage_and_names_the_setting(tmp_path):
    import socket

    from nip import build_trainer
    from nip.errors import BackendUnavailableError
    from nip.parameters import HyperParameters, PureTextAgentParameters
    from nip.settings import ExperimentSettings

    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        agents = {
            name: PureTextAgentParameters(
                model_provider="SelfHosted",
                model_name="HuggingFaceTB/SmolLM2-135M-Instruct",
                language_model_server_scheme_host="http://127.0.0.1",
                language_model_server_port=port,
            )
            for name in ("prover", "verifier")
        }
        params = HyperParameters(agents=agents)
        settings = ExperimentSettings(
            run_dir=tmp_path / "run", server_ready_timeout_s=0.5, wandb_mode="disabled"
        )
        trainer = build_trainer(params, settings)
        with pytest.raises(BackendUnavailableError, match="server_ready_timeout_s"):
            trainer.train(max_stages=1)
    assert trainer.state.stage == "sample_rollouts" and trainer.state.stages_completed == 0
    assert not list((tmp_path / "run").glob("rollouts/*"))


def test_openai_auto_hyperparameters_become_the_servers_defaults():
    from nip.server.fine_tuning import build_spec
    from nip.server.store import JobRow

    auto = {"n_epochs": "auto", "batch_size": "auto", "beta": "auto"}  # the OpenAI client's
    method = {"type": "dpo", "dpo": {"hyperparameters": auto}}
    job = JobRow("ftjob-1", "base", "file-1", method, None, 0, {}, "queued", *[None] * 5, 0, None)

    spec = build_spec(job, [{"input": {"messages": []}}])

    assert (spec.num_epochs, spec.batch_size, spec.dpo_beta) == (1, 2, None)
