"""LoRA jobs trained in a worker thread of the calling process (the `Local` provider's way).

Same job folders as the one-process-per-job backend; a job whose process was killed is
trained again by the next backend that looks at it, so a resumed run completes its jobs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nip.jobs import FineTuneSpec
from nip.jobs.local_lora import InProcessLoraFineTuneBackend
from nip.parameters import PureTextAgentParameters
from nip.providers import fine_tune_backend_for
from nip.settings import ExperimentSettings

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
        "input": {"messages": [{"role": "user", "content": "Is it correct?"}]},
        "preferred_output": [{"role": "assistant", "content": "Decision: accept"}],
        "non_preferred_output": [{"role": "assistant", "content": "Decision: reject"}],
    }
    for _ in range(6)
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from tests.doubles.tiny_model import build_tiny_chat_model

    return build_tiny_chat_model(tmp_path_factory.mktemp("models") / "tiny")


def spec(model: Path, method: str = "supervised", name: str = "job", **kwargs) -> FineTuneSpec:
    values = dict(lora_rank=4, lora_alpha=8.0, learning_rate=1e-3)
    values.update(kwargs)
    examples = SFT if method == "supervised" else DPO
    return FineTuneSpec(str(model), method, examples, job_name=name, **values)


async def wait_done(backend, job_id: str, timeout_s: float = 240):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = await backend.get_job(job_id)
        if job.done:
            return job
        await asyncio.sleep(0.2)
    raise TimeoutError(job_id)


@pytest.mark.timeout(300)
async def test_an_sft_job_trains_in_this_process_and_logs_its_loss(tiny_model, tmp_path):
    backend = InProcessLoraFineTuneBackend(tmp_path / "jobs")
    job_id = await backend.create_job(spec(tiny_model, name="verifier-it0", num_epochs=2))
    job = await wait_done(backend, job_id)
    backend.close()

    assert job.status == "succeeded", job.error
    assert (Path(job.adapter_path) / "adapter_config.json").exists()
    assert (tmp_path / "jobs" / job_id / "pid").read_text() == str(os.getpid())
    events = await backend.list_events(job_id)
    assert any("loss" in e.data for e in events)
    assert job.trained_tokens == 2 * sum(template_tokens(tiny_model, e["messages"]) for e in SFT)


def template_tokens(model: Path, messages: list[dict]) -> int:
    """Tokens of a conversation as SFT trains on it (the training template)."""
    from transformers import AutoTokenizer

    from nip.jobs.lora_train import CHATML_TRAINING_TEMPLATE

    tokenizer = AutoTokenizer.from_pretrained(model)
    ids = tokenizer.apply_chat_template(
        messages, chat_template=CHATML_TRAINING_TEMPLATE, tokenize=True, return_dict=True
    )["input_ids"]
    return len(ids)


@pytest.mark.timeout(300)
async def test_a_dpo_job_trains_in_this_process(tiny_model, tmp_path):
    backend = InProcessLoraFineTuneBackend(tmp_path / "jobs", warm_up=False)
    job_id = await backend.create_job(spec(tiny_model, "dpo", name="prover-dpo", dpo_beta=0.2))
    job = await wait_done(backend, job_id)
    backend.close()

    assert job.status == "succeeded", job.error
    config = json.loads((Path(job.adapter_path) / "adapter_config.json").read_text())
    assert config["r"] == 4
    pair = DPO[0]
    prompt = template_tokens(tiny_model, pair["input"]["messages"])
    answers = [pair["preferred_output"], pair["non_preferred_output"]]
    whole = [template_tokens(tiny_model, pair["input"]["messages"] + a) for a in answers]
    assert prompt < whole[0] and 0 < job.trained_tokens <= len(DPO) * sum(whole)


@pytest.mark.timeout(300)
async def test_jobs_of_two_backends_in_one_process_all_succeed(tiny_model, tmp_path):
    prover = InProcessLoraFineTuneBackend(tmp_path / "jobs", warm_up=False)
    verifier = InProcessLoraFineTuneBackend(tmp_path / "jobs", warm_up=False)
    ids = [
        await prover.create_job(spec(tiny_model, name="prover-it0")),
        await verifier.create_job(spec(tiny_model, name="verifier-it0")),
    ]
    jobs = [await wait_done(prover, ids[0]), await wait_done(verifier, ids[1])]
    prover.close()
    verifier.close()

    assert [j.status for j in jobs] == ["succeeded", "succeeded"], [j.error for j in jobs]


@pytest.mark.timeout(120)
async def test_a_job_on_an_unknown_model_fails_with_the_reason(tmp_path):
    backend = InProcessLoraFineTuneBackend(tmp_path / "jobs", warm_up=False)
    job = await wait_done(backend, await backend.create_job(spec(tmp_path / "no-such-model")))
    backend.close()

    assert job.status == "failed"
    assert "no-such-model" in job.error


@pytest.mark.timeout(120)
async def test_a_job_named_like_a_failed_one_is_a_new_attempt_in_its_own_folder(tmp_path):
    backend = InProcessLoraFineTuneBackend(tmp_path / "jobs", warm_up=False)
    failing = spec(tmp_path / "no-such-model", name="verifier-it0")
    first = await backend.create_job(failing)
    assert (await wait_done(backend, first)).status == "failed"
    second = await backend.create_job(failing)
    third = await backend.create_job(failing)  # while the second is pending or done
    backend.close()

    assert (first, second) == ("verifier-it0", "verifier-it0-2")
    assert third in (second, "verifier-it0-3")  # the same job while it may still succeed
    assert (tmp_path / "jobs" / "verifier-it0" / "status.json").exists()


@pytest.mark.timeout(300)
async def test_a_cancelled_job_stops_and_saves_no_adapter(tiny_model, tmp_path):
    backend = InProcessLoraFineTuneBackend(tmp_path / "jobs", warm_up=False)
    job_id = await backend.create_job(spec(tiny_model, name="long", num_epochs=200))
    deadline = time.monotonic() + 120
    while not (await backend.list_events(job_id))[1:]:  # a first step was logged
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    await backend.cancel_job(job_id)
    backend.close()  # waits for the job's thread

    assert (await backend.get_job(job_id)).status == "cancelled"
    assert not (tmp_path / "jobs" / job_id / "adapter").exists()


CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    from nip.jobs import FineTuneSpec
    from nip.jobs.local_lora import InProcessLoraFineTuneBackend

    async def main():
        import json
        data = json.loads(open(sys.argv[2]).read())
        data["examples"] = tuple(data["examples"])
        backend = InProcessLoraFineTuneBackend(sys.argv[1], warm_up=False)
        job_id = await backend.create_job(FineTuneSpec(**data))
        while True:  # poll like the trainer, until killed
            await backend.get_job(job_id)
            await asyncio.sleep(0.1)
    asyncio.run(main())
    """
)


@pytest.mark.timeout(300)
async def test_kill_minus_nine_during_a_job_then_a_new_backend_completes_it(tiny_model, tmp_path):
    jobs_dir = tmp_path / "jobs"
    spec_file = tmp_path / "spec.json"
    long_job = spec(tiny_model, name="verifier-it0", num_epochs=30)
    spec_file.write_text(json.dumps(long_job.to_dict()))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(jobs_dir), str(spec_file)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    events = jobs_dir / "verifier-it0" / "events.jsonl"
    try:
        deadline = time.monotonic() + 120
        # Kill it mid-training: after its first logged step.
        while not (events.exists() and len(events.read_text().splitlines()) >= 2):
            assert child.poll() is None, child.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the job never started training"
            await asyncio.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        child.stderr.close()
    status = json.loads((jobs_dir / "verifier-it0" / "status.json").read_text())
    assert status["status"] == "running"

    resumed = InProcessLoraFineTuneBackend(jobs_dir, warm_up=False)
    assert await resumed.create_job(long_job) == "verifier-it0"  # the same job, not a new one
    job = await wait_done(resumed, "verifier-it0")
    resumed.close()

    assert job.status == "succeeded", job.error
    assert (Path(job.adapter_path) / "adapter_model.safetensors").exists()


def test_the_local_provider_trains_in_process(tmp_path):
    params = PureTextAgentParameters(model_provider="Local", model_name="SmolLM2-135M-Instruct")
    backend = fine_tune_backend_for(params, ExperimentSettings(run_dir=tmp_path / "run"))

    assert isinstance(backend, InProcessLoraFineTuneBackend)
    assert backend.jobs_dir == tmp_path / "run" / "jobs"
    backend.close()


@pytest.mark.timeout(300)
async def test_a_stacked_job_records_the_adapters_it_sits_on(tiny_model, tmp_path):
    """What a stacked job writes is the training's, whichever backend runs it: here, in this
    process (one import of the training libraries instead of three processes' 10 s each)."""
    from nip.backends.local.adapters import predecessors

    backend = InProcessLoraFineTuneBackend(tmp_path / "jobs", warm_up=False)

    async def trained(**kwargs):
        return await wait_done(backend, await backend.create_job(spec(tiny_model, **kwargs)))

    first = await trained(name="verifier-it0")
    stacked = await trained(
        name="verifier-it1", previous_adapter=first.adapter_path, stack_lora_adapters=True
    )
    continued = await trained(name="verifier-it2", previous_adapter=stacked.adapter_path)
    backend.close()
    assert first.status == stacked.status == continued.status == "succeeded", continued.error

    assert predecessors(first.adapter_path) == []
    assert predecessors(stacked.adapter_path) == [Path(first.adapter_path).resolve()]
    # Training a stacked adapter further keeps it on the adapter beneath it.
    assert predecessors(continued.adapter_path) == [Path(first.adapter_path).resolve()]


@pytest.mark.timeout(300)
async def test_the_same_job_twice_gives_the_same_adapter(tiny_model, tmp_path):
    backend = InProcessLoraFineTuneBackend(tmp_path / "jobs", warm_up=False)
    first = await wait_done(backend, await backend.create_job(spec(tiny_model, name="a")))
    second = await wait_done(backend, await backend.create_job(spec(tiny_model, name="b")))
    backend.close()

    weights = [
        (Path(j.adapter_path) / "adapter_model.safetensors").read_bytes() for j in (first, second)
    ]
    assert weights[0] == weights[1]


@pytest.mark.timeout(300)
async def test_a_step_collects_only_the_young_generations_and_the_job_end_all_of_them(
    tiny_model, tmp_path, monkeypatch
):
    """A full collection walks every object of the process: 0.27 s a step in a test worker,
    two thirds of this job's time; a step's reference cycles are in the young generations."""
    from nip.backends.local import _memory

    real, generations = _memory.gc.collect, []

    def recording(generation: int = 2) -> int:
        generations.append(generation)
        return real(generation)

    monkeypatch.setattr(_memory.gc, "collect", recording)
    backend = InProcessLoraFineTuneBackend(tmp_path / "jobs", warm_up=False)
    job = await wait_done(backend, await backend.create_job(spec(tiny_model, name="steps")))
    backend.close()

    assert job.status == "succeeded", job.error
    steps = len(_losses(tmp_path / "jobs" / "steps"))
    assert steps == 3  # 6 examples, batches of 2
    # Accelerate collects once as its trainer starts; then each step, and the job's end.
    assert generations[-(steps + 1) :] == [1] * steps + [2], generations
    assert generations.count(2) == 2, generations


def _losses(job_dir: Path) -> list[float]:
    events = [json.loads(line) for line in (job_dir / "events.jsonl").read_text().splitlines()]
    return [e["data"]["loss"] for e in events if "loss" in e["data"]]


@pytest.mark.timeout(300)
def test_mixed_precision_training_gives_the_float32_losses_within_two_percent(tiny_model, tmp_path):
    """On every CPU: without native bfloat16 it is emulated (slower, the same numbers)."""
    from nip.jobs.lora_train import TrainingOptions, run_job

    losses = {}
    for mixed in (False, True):
        job_dir = tmp_path / f"mixed-{mixed}"
        job_dir.mkdir()
        job = spec(tiny_model, name=job_dir.name, num_epochs=2)
        (job_dir / "spec.json").write_text(json.dumps(job.to_dict()))
        assert run_job(job_dir, TrainingOptions(quiet=True, mixed_precision=mixed))
        losses[mixed] = _losses(job_dir)

    assert len(losses[True]) == len(losses[False]) > 1
    for exact, mixed in zip(losses[False], losses[True], strict=True):
        assert mixed == pytest.approx(exact, rel=0.02)


def _tensor_bytes(weights) -> dict[str, bytes]:
    return {name: t.detach().contiguous().numpy().tobytes() for name, t in weights.items()}


@pytest.mark.timeout(300)
async def test_a_job_shares_the_local_backends_loaded_weights_and_learns_the_same(
    tiny_model, tmp_path
):
    from nip.backends import GenerationRequest, SharesBaseWeights, capability
    from nip.backends.local import LocalBackend

    # float32, what a job loads on a CPU: weights of another dtype (NIP_CPU_DTYPE=bfloat16)
    # are not shared, and the job loads its own.
    chat = LocalBackend(str(tiny_model), device="cpu", dtype="float32")
    host = capability(chat, SharesBaseWeights)
    assert host is chat and chat.loaded_base_weights(str(tiny_model)) is None  # not loaded
    await chat.generate(
        GenerationRequest(str(tiny_model), ({"role": "user", "content": "Hi"},), max_tokens=2)
    )
    weights = chat.loaded_base_weights(str(tiny_model))
    assert weights is not None and chat.loaded_base_weights("another-model") is None
    before = _tensor_bytes(weights)

    shared = InProcessLoraFineTuneBackend(
        tmp_path / "jobs", warm_up=False, base_weights=chat.loaded_base_weights
    )
    own = InProcessLoraFineTuneBackend(tmp_path / "jobs", warm_up=False)
    with_shared = await wait_done(shared, await shared.create_job(spec(tiny_model, name="shared")))
    with_own = await wait_done(own, await own.create_job(spec(tiny_model, name="own")))
    shared.close()
    own.close()
    await chat.aclose()

    assert with_shared.status == with_own.status == "succeeded"
    messages = [e.message for e in await shared.list_events("shared")]
    assert any("weights are shared" in m for m in messages)
    assert not any("shared" in e.message for e in await own.list_events("own"))
    # Training read the backend's tensors and wrote none of them...
    assert _tensor_bytes(weights) == before
    # ...and learned what a job that loaded its own copy learned.
    adapters = [
        (Path(j.adapter_path) / "adapter_model.safetensors").read_bytes()
        for j in (with_shared, with_own)
    ]
    assert adapters[0] == adapters[1]


@pytest.mark.timeout(400)
async def test_an_iterations_two_jobs_load_the_base_model_once(tiny_model, tmp_path, monkeypatch):
    """Generation elsewhere (vLLM): the prover's and the verifier's jobs, from two backends,
    train one after the other on the weights the first job loaded (kept, as on a GPU)."""
    from transformers import AutoModelForCausalLM

    from nip.jobs.local_lora import KeptBaseWeights

    loads = []
    original = AutoModelForCausalLM.from_pretrained.__func__

    def counting(cls, *args, **kwargs):
        loads.append(args[0] if args else kwargs.get("pretrained_model_name_or_path"))
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(counting))
    kept = KeptBaseWeights()
    backends = [
        InProcessLoraFineTuneBackend(
            tmp_path / group, warm_up=False, keep_base_weights=True, kept=kept
        )
        for group in ("prover", "verifier")
    ]
    job_ids = [
        await backends[0].create_job(spec(tiny_model, name="prover-it0")),
        await backends[1].create_job(spec(tiny_model, "dpo", name="verifier-it0")),
    ]
    jobs = [await wait_done(b, j) for b, j in zip(backends, job_ids, strict=True)]
    for backend in backends:
        backend.close()

    assert [j.status for j in jobs] == ["succeeded", "succeeded"]
    assert len(loads) == kept.loads == 1  # the first job loaded it; the second shared it
    second = [e.message for e in await backends[1].list_events("verifier-it0")]
    assert any("weights are shared" in m for m in second)


@pytest.mark.timeout(300)
def test_low_memory_training_takes_the_same_steps_from_the_same_first_loss(tiny_model, tmp_path):
    """Micro-batches of one example (gradient accumulation) and recomputed activations: the
    same optimizer steps, and the same first loss (the new adapter starts at zero, so
    dropout cannot change it yet)."""
    from nip.jobs.lora_train import TrainingOptions, run_job

    losses = {}
    for low in (False, True):
        job_dir = tmp_path / f"low-{low}"
        job_dir.mkdir()
        job = spec(tiny_model, name=job_dir.name, batch_size=3, lora_dropout=0.0)
        (job_dir / "spec.json").write_text(json.dumps(job.to_dict()))
        # float32 on every CPU kind (auto is bfloat16 where it is native): the tolerances
        # below are float32's; bfloat16's own are the mixed-precision test's.
        options = TrainingOptions(quiet=True, low_memory=low, mixed_precision=False)
        assert run_job(job_dir, options)
        losses[low] = _losses(job_dir)

    assert len(losses[True]) == len(losses[False]) == 2  # 6 examples, batches of 3
    assert losses[True][0] == pytest.approx(losses[False][0], rel=1e-4)
    assert losses[True][1] == pytest.approx(losses[False][1], rel=1e-3)
