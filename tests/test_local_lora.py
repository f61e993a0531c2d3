"""Local LoRA fine-tuning with TRL + PEFT, on a tiny model built for the tests."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

from nip.jobs import FineTuneSpec
from nip.jobs.local_lora import LocalLoraFineTuneBackend
from nip.jobs.lora_train import CHATML_TRAINING_TEMPLATE

pytestmark = pytest.mark.slow

SFT = tuple(
    {
        "messages": [
            {"role": "system", "content": "You are Verifier."},
            {"role": "user", "content": "Expert: Answer: the loop is fine."},
            {"role": "assistant", "content": f"Decision: {'accept' if i % 2 else 'reject'}"},
        ]
    }
    for i in range(6)
)
DPO = tuple(
    {
        "input": {
            "messages": [
                {"role": "system", "content": "Decide."},
                {"role": "user", "content": "Is it correct?"},
            ]
        },
        "preferred_output": [{"role": "assistant", "content": "Decision: accept"}],
        "non_preferred_output": [{"role": "assistant", "content": "Decision: reject"}],
    }
    for _ in range(6)
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from tests.doubles.tiny_model import build_tiny_chat_model

    return build_tiny_chat_model(tmp_path_factory.mktemp("models") / "tiny")


def run_job(backend: LocalLoraFineTuneBackend, spec: FineTuneSpec, timeout_s: float = 240):
    async def go():
        job_id = await backend.create_job(spec)
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            job = await backend.get_job(job_id)
            if job.done:
                return job
            await asyncio.sleep(0.3)
        raise TimeoutError(job_id)

    return asyncio.run(go())


def spec(model: Path, method: str = "supervised", name: str = "job", **kwargs) -> FineTuneSpec:
    examples = SFT if method == "supervised" else DPO
    values = dict(lora_rank=4, lora_alpha=8.0, learning_rate=1e-3)
    values.update(kwargs)
    return FineTuneSpec(str(model), method, examples, job_name=name, **values)


@pytest.mark.timeout(300)
def test_an_sft_job_trains_an_adapter_and_logs_its_loss(tiny_model, tmp_path):
    backend = LocalLoraFineTuneBackend(tmp_path / "jobs")
    job = run_job(backend, spec(tiny_model, name="verifier-it0"))
    assert job.status == "succeeded", job.error
    assert job.fine_tuned_model == "verifier-it0"
    assert (Path(job.adapter_path) / "adapter_config.json").exists()
    events = asyncio.run(backend.list_events(job.id))
    assert any("loss" in e.data for e in events)
    assert job.training_loss is not None and job.training_loss > 0


@pytest.mark.timeout(300)
def test_a_dpo_job_trains_an_adapter(tiny_model, tmp_path):
    backend = LocalLoraFineTuneBackend(tmp_path / "jobs")
    job = run_job(backend, spec(tiny_model, "dpo", name="prover-dpo", dpo_beta=0.2))
    assert job.status == "succeeded", job.error
    config = json.loads((Path(job.adapter_path) / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8.0


def test_the_training_template_masks_everything_but_the_agents_own_turns(tiny_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "Expert: other"},
        {"role": "assistant", "content": "second"},
    ]
    encoded = tokenizer.apply_chat_template(
        messages,
        chat_template=CHATML_TRAINING_TEMPLATE,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    ids, mask = encoded["input_ids"], encoded["assistant_masks"]
    trained = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert trained == "first<|im_end|>second<|im_end|>"


@pytest.mark.timeout(120)
def test_a_job_on_an_unknown_model_fails_with_the_reason(tmp_path):
    """Before training starts: checked before the training libraries are imported (about
    10 s of a job's start)."""
    backend = LocalLoraFineTuneBackend(tmp_path / "jobs")
    job = run_job(backend, spec(tmp_path / "no-such-model"))
    assert job.status == "failed"
    assert "no-such-model" in job.error
    events = asyncio.run(backend.list_events(job.id))
    assert not any(e.message.startswith("Training started") for e in events)


@pytest.mark.timeout(120)
def test_a_killed_training_process_is_reported_as_failed(tiny_model, tmp_path):
    backend = LocalLoraFineTuneBackend(tmp_path / "jobs")
    job_id = asyncio.run(backend.create_job(spec(tiny_model, name="doomed")))
    pid = int((tmp_path / "jobs" / job_id / "pid").read_text())
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (job := asyncio.run(backend.get_job(job_id))).status != "failed":
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    assert "died" in job.error


def test_submitting_the_same_job_twice_trains_once(tiny_model, tmp_path):
    backend = LocalLoraFineTuneBackend(tmp_path / "jobs")
    first = asyncio.run(backend.create_job(spec(tiny_model, name="once")))
    pid = (tmp_path / "jobs" / first / "pid").read_text()
    second = asyncio.run(backend.create_job(spec(tiny_model, name="once")))
    assert first == second and (tmp_path / "jobs" / first / "pid").read_text() == pid
    asyncio.run(backend.cancel_job(first))
    assert asyncio.run(backend.get_job(first)).status == "cancelled"


def test_an_unknown_job_is_not_found(tmp_path):
    backend = LocalLoraFineTuneBackend(tmp_path / "jobs")
    assert asyncio.run(backend.get_job("nothing")).status == "not_found"


def test_jobs_made_without_a_name_in_the_same_second_are_two_jobs(tmp_path, monkeypatch):
    """A job without a name was named for the second it was made: the second job of that
    second was taken for the first (submitted before a restart) and never trained."""
    monkeypatch.setattr(time, "time", lambda: 1_790_000_000.0)  # one and the same second
    backend = LocalLoraFineTuneBackend(tmp_path / "jobs", python="/bin/true")
    unnamed = FineTuneSpec("base-model", "supervised", SFT)

    async def two_jobs():
        return await backend.create_job(unnamed), await backend.create_job(unnamed)

    first, second = asyncio.run(two_jobs())
    assert first != second
    assert (tmp_path / "jobs" / first / "spec.json").exists()
    assert (tmp_path / "jobs" / second / "spec.json").exists()
