"""Fine-tuning through the OpenAI API, against the project's own server over real HTTP."""

from __future__ import annotations

import asyncio
import gc
import os
import time

import pytest

from nip.errors import FineTuneError, FineTuneJobFailed
from nip.jobs import FineTuneEvent, FineTuneJob, FineTuneSpec
from nip.jobs.openai_api import OpenAIFineTuneBackend
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.rollouts import Datapoint
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.testing.server import serve
from nip.training.groups import PureTextSharedModelGroup

pytestmark = pytest.mark.timeout(120)


class QuickTrainer:
    """Trains nothing, after a short pause; a job whose name contains "fail" fails."""

    name = "quick"

    def __init__(self):
        self.specs: dict[str, FineTuneSpec] = {}
        self.started: dict[str, float] = {}

    async def create_job(self, spec: FineTuneSpec) -> str:
        job_id = f"quick-{len(self.specs)}"
        self.specs[job_id], self.started[job_id] = spec, time.monotonic()
        return job_id

    async def get_job(self, job_id: str) -> FineTuneJob:
        if job_id not in self.specs:
            return FineTuneJob(job_id, "not_found")
        if time.monotonic() - self.started[job_id] < 0.3:
            return FineTuneJob(job_id, "running")
        if "fail" in (self.specs[job_id].job_name or ""):
            return FineTuneJob(job_id, "failed", error="CUDA out of memory (simulated)")
        return FineTuneJob(
            job_id,
            "succeeded",
            fine_tuned_model=f"ft:{self.specs[job_id].job_name}",
            trained_tokens=42 * len(self.specs[job_id].examples),
        )

    async def cancel_job(self, job_id: str) -> None:
        return None

    async def list_events(self, job_id: str) -> list[FineTuneEvent]:
        return []


@pytest.fixture
def server(tmp_path, fine_tuning_app):
    """``nip serve``'s app training with the quick trainer; its base model answers to "base"
    and to the agents' default model name."""
    trainer = QuickTrainer()
    model = PureTextAgentParameters().model_name
    running = serve(fine_tuning_app(trainer, tmp_path / "server", model=model))
    try:
        yield running, trainer
    finally:
        running.stop()


def group_for(server_url: str, **agent) -> tuple[PureTextSharedModelGroup, Session]:
    hp = HyperParameters(
        agents={
            "prover": PureTextAgentParameters(use_dummy_api=True, freeze_agent=True),
            "verifier": PureTextAgentParameters(use_dummy_api=True, **agent),
        },
        text_rl={"min_fine_tune_examples": 1},
    )
    session = Session(hp, ExperimentSettings(show_progress=False))
    backend = OpenAIFineTuneBackend(server_url, "test-key")
    group = PureTextSharedModelGroup(
        hp,
        None,
        session.handler,
        {"verifier": session.agents["verifier"]},
        "verifier",
        fine_tune_backend=backend,
    )
    return group, session


ITEMS = [Datapoint(id=f"d{i}", question="q", solution=f"s{i}", y=i % 2) for i in range(6)]


def test_an_sft_job_goes_from_upload_to_a_new_model(server):
    running, trainer = server
    group, session = group_for(running.base_url)
    batch = session.rollouts(ITEMS)

    async def lifecycle():
        job_id = await group.create_supervised_fine_tune_job(
            {"verifier": batch.transcripts}, job_name="verifier-it0"
        )
        assert await group.get_fine_tune_job_status() in ("pending", "running")
        job = await group.wait_for_fine_tune_job(poll_interval_s=0.05, timeout_s=30)
        return job_id, job, await group.switch_to_next_model()

    job_id, job, model = asyncio.run(lifecycle())
    assert job_id.startswith("ftjob-") and job.status == "succeeded"
    assert job.trained_tokens == 42 * len(ITEMS)  # as the trainer counted them
    assert model == "ft:verifier-it0" and session.agents["verifier"].model_name == model
    (spec,) = trainer.specs.values()
    assert spec.method == "supervised" and len(spec.examples) == len(ITEMS)
    assert spec.examples[0]["messages"][-1]["role"] == "assistant"


def test_a_failed_job_reports_its_error(server):
    running, _ = server
    group, session = group_for(running.base_url)
    batch = session.rollouts(ITEMS)

    async def lifecycle():
        await group.create_supervised_fine_tune_job(
            {"verifier": batch.transcripts}, job_name="will-fail"
        )
        with pytest.raises(FineTuneJobFailed, match="CUDA out of memory"):
            await group.wait_for_fine_tune_job(poll_interval_s=0.05, timeout_s=30)
        return await group.fine_tune_job_failed(), await group.get_fine_tune_job_error_repr()

    failed, error = asyncio.run(lifecycle())
    assert failed and "CUDA out of memory (simulated)" in error


def test_an_unknown_job_is_not_found(server):
    running, _ = server
    backend = OpenAIFineTuneBackend(running.base_url, "test-key")
    assert asyncio.run(backend.get_job("ftjob-does-not-exist")).status == "not_found"


def test_dpo_lines_in_the_current_format_are_accepted(server):
    running, trainer = server
    backend = OpenAIFineTuneBackend(running.base_url, "test-key")
    line = {
        "input": {"messages": [{"role": "user", "content": "Is it correct?"}]},
        "preferred_output": [{"role": "assistant", "content": "Decision: accept"}],
        "non_preferred_output": [{"role": "assistant", "content": "Decision: reject"}],
    }
    spec = FineTuneSpec("base", "dpo", (line,), job_name="dpo", dpo_beta=0.3)
    job_id = asyncio.run(backend.create_job(spec))
    deadline = time.monotonic() + 20
    while (job := asyncio.run(backend.get_job(job_id))).status != "succeeded":
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
    (received,) = trainer.specs.values()
    assert received.method == "dpo" and received.dpo_beta == 0.3
    events = asyncio.run(backend.list_events(job_id))
    assert any("succeeded" in e.message for e in events)


def test_the_server_refuses_an_sft_file_for_a_dpo_job(server):
    running, _ = server
    backend = OpenAIFineTuneBackend(running.base_url, "test-key")
    line = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    with pytest.raises(FineTuneError, match=r"line 1: each line must be \{\"input\""):
        asyncio.run(backend.create_job(FineTuneSpec("base", "dpo", (line,))))


def test_a_malformed_supervised_file_is_refused_with_the_supervised_formats_message(server):
    import openai

    running, _ = server
    client = openai.OpenAI(base_url=running.base_url, api_key="test-key", max_retries=0)
    malformed = ("bad.jsonl", b'{"messages": "not a list"}\n')
    with pytest.raises(openai.BadRequestError) as refused:
        client.files.create(file=malformed, purpose="fine-tune")
    message = str(refused.value)
    assert "line 1: messages must be a non-empty list" in message
    assert "preferred_output" not in message  # not the DPO format's message
    with pytest.raises(openai.BadRequestError, match=r"for supervised fine-tuning .* for DPO"):
        client.files.create(file=("bad.jsonl", b'{"prompt": "q"}\n'), purpose="fine-tune")
    client.close()


def test_the_server_refuses_an_unknown_model(server):
    running, _ = server
    backend = OpenAIFineTuneBackend(running.base_url, "test-key")
    line = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    with pytest.raises(FineTuneError, match="'unknown-model' is not available"):
        asyncio.run(backend.create_job(FineTuneSpec("unknown-model", "supervised", (line,))))


def open_connections_to(port: int) -> int:
    """Established TCP connections whose far end is ``port`` on this machine (loopback)."""
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(1 for row in rows if int(row[2].split(":")[1], 16) == port and row[3] == "01")


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux's /proc/net/tcp")
def test_each_job_call_closes_its_connections_before_it_returns(server):
    """None is left for the garbage collector, which would try to close it on an event loop
    that has gone ("Task exception was never retrieved ... Event loop is closed")."""
    running, _ = server
    backend = OpenAIFineTuneBackend(running.base_url, "key")

    gc.disable()  # only an explicit close may end the connections
    try:
        for _ in range(3):  # what sync wrappers do: a new event loop each time
            assert asyncio.run(backend.get_job("quick-404")).status == "not_found"
        still_open = open_connections_to(running.port)
    finally:
        gc.enable()

    assert still_open == 0


def test_job_calls_on_several_event_loops_share_one_tls_context(server, ca_bundle_reads):
    """Building one reads the CA bundle (30-45 ms of CPU); a run polls its jobs for hours."""
    import pickle

    running, _ = server
    backend = OpenAIFineTuneBackend(running.base_url, "key")

    for _ in range(3):  # a new event loop each time, as sync wrappers do
        assert asyncio.run(backend.get_job("quick-404")).status == "not_found"

    assert len(ca_bundle_reads) == 1
    assert pickle.loads(pickle.dumps(backend))._ssl_context is None  # not pickled: rebuilt


def openai_hyperparameters(method: str = "supervised", **agent) -> dict:
    """What OpenAI's fine-tuning API is sent for the verifier's group."""
    from nip.jobs.openai_api import spec_to_method

    hp = HyperParameters(
        agents={
            "prover": PureTextAgentParameters(use_dummy_api=True),
            "verifier": PureTextAgentParameters(use_dummy_api=True, **agent),
        }
    )
    session = Session(hp)
    group = PureTextSharedModelGroup(
        hp, None, session.handler, {"verifier": session.agents["verifier"]}, "verifier"
    )
    return spec_to_method(group._spec(method, [], "job"))[method]["hyperparameters"]


@pytest.mark.parametrize("method", ["supervised", "dpo"])
def test_openai_chooses_its_own_hyper_parameters_unless_the_agent_sets_them(method):
    """As the original: "auto" for epochs, batch size and learning rate (the LoRA training's
    num_epochs and per_device_train_batch_size are refused for an OpenAI agent: see
    tests/test_settings_act_or_refused.py)."""
    sent = openai_hyperparameters(method)
    assert {k: sent[k] for k in ("n_epochs", "batch_size", "learning_rate_multiplier")} == {
        "n_epochs": "auto",
        "batch_size": "auto",
        "learning_rate_multiplier": "auto",
    }
    chosen = openai_hyperparameters(
        method, openai_n_epochs=3, openai_batch_size=16, openai_learning_rate_multiplier=0.5
    )
    assert (chosen["n_epochs"], chosen["batch_size"], chosen["learning_rate_multiplier"]) == (
        3,
        16,
        0.5,
    )


def test_nip_serve_is_sent_the_lora_trainings_epochs_and_batch_size():
    from nip.jobs.openai_api import job_request

    spec = FineTuneSpec("base", "supervised", (), num_epochs=3, batch_size=4, lora_rank=16)
    request = job_request(spec, lora_settings=True)
    hyper = request["method"]["supervised"]["hyperparameters"]
    assert (hyper["n_epochs"], hyper["batch_size"]) == (3, 4)
    assert request["extra_body"]["lora"]["rank"] == 16
    assert "extra_body" not in job_request(spec)
