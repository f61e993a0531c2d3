"""End to end through ``nip serve``: a real LoRA SFT job trains a tiny model, the engine serves
the adapter at run time under a versioned name, and greedy completions change.

The transformers engine runs everywhere (CI included); the vLLM engine end to end runs on a
GPU machine with vLLM (on the CPU, tutorial 07 runs it with ``.vllm-venv``'s CPU build); its
supervision (restarts, stacks, process groups) is tested here against a stand-in vLLM.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import pytest

from nip.backends import GenerationRequest
from nip.jobs import FineTuneSpec
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.server.app import create_server_app
from nip.server.config import ServerConfig
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.testing.server import serve
from nip.training.groups import PureTextSharedModelGroup
from nip.utils.precision import cpu_dtype
from tests.doubles.fake_vllm import FAKE_VLLM_SERVER
from tests.doubles.processes import live_group_members
from tests.doubles.tiny_model import build_tiny_chat_model

VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".vllm-venv" / "bin" / "python"
PROMPT = ({"role": "user", "content": "Is the code correct?"},)
TARGET = "Decision: accept. The verifier asks the prover."
EXAMPLES = tuple(
    {"messages": [*PROMPT, {"role": "assistant", "content": TARGET}]} for _ in range(8)
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_chat_model(tmp_path_factory.mktemp("models") / "tiny-chat")


async def train_and_compare(port: int, ready_timeout_s: float) -> tuple[str, str, str]:
    """Through a shared model group: wait for the server, train, switch, generate.

    Returns:
        (base completion, fine-tuned completion, fine-tuned model name).
    """
    verifier = PureTextAgentParameters(
        model_provider="SelfHosted",
        model_name="tiny-chat",
        language_model_server_scheme_host="http://127.0.0.1",
        language_model_server_port=port,
        lora_rank=8,
    )
    hp = HyperParameters(
        agents={
            "prover": PureTextAgentParameters(use_dummy_api=True, freeze_agent=True),
            "verifier": verifier,
        }
    )
    settings = ExperimentSettings(cache="off", show_progress=False)
    session = Session(hp, settings)
    agent = session.agents["verifier"]
    group = PureTextSharedModelGroup(hp, settings, session.handler, {"verifier": agent}, "verifier")
    await group.wait_for_ready(ready_timeout_s)

    async def complete(model: str) -> str:
        request = GenerationRequest(model, PROMPT, max_tokens=12, temperature=0.0)
        return (await agent.backend.generate(request)).completions[0].text

    base = await complete(group.model_name)
    spec = FineTuneSpec(
        "tiny-chat",
        "supervised",
        EXAMPLES,
        job_name="verifier-it1",
        num_epochs=3,
        learning_rate=1e-2,
        batch_size=4,
        lora_rank=8,
        lora_alpha=16.0,
        lora_dropout=0.0,
    )
    group.state.fine_tune_job_id = await group.fine_tune_backend.create_job(spec)
    await group.wait_for_fine_tune_job(poll_interval_s=0.25, timeout_s=240)
    name = await group.switch_to_next_model()
    tuned = await complete(group.model_name)
    assert await complete("tiny-chat") == base  # the base model is still served as it was
    await session.aclose()
    return base, tuned, name


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_job_trained_through_the_server_is_served_by_the_transformers_engine(
    tiny_model, tmp_path, monkeypatch
):
    monkeypatch.setenv("NIP_SERVER_API_KEY", "e2e-token")
    config = ServerConfig(
        model=str(tiny_model),
        engine="transformers",
        device="cpu",
        storage_dir=str(tmp_path / "srv"),
        poll_interval_s=0.2,
    )
    with serve(create_server_app(config, api_key="e2e-token")) as server:
        base, tuned, name = asyncio.run(train_and_compare(server.port, ready_timeout_s=30))
    assert name == "verifier-it1"
    assert tuned != base and tuned.startswith("Decision")  # it learnt its training text


def _has_vllm() -> str | None:
    if VLLM_PYTHON.exists():
        return str(VLLM_PYTHON)
    import importlib.util

    return sys.executable if importlib.util.find_spec("vllm") else None


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.vllm
@pytest.mark.timeout(600)
def test_a_job_trained_through_the_server_is_served_by_vllm_at_run_time(
    tiny_model, tmp_path, monkeypatch
):
    """On a GPU machine. On the CPU, the same path (vLLM's CPU build behind ``nip serve``,
    jobs trained through the server and served at run time) runs in tutorial 07, and a
    stack served by vLLM equal to transformers' in ``test_local_vllm_engine.py`` (the same
    stack writer and adapter loading): one vLLM start less on CI's two cores, about 100 s
    of CPU with its two jobs."""
    python = _has_vllm()
    if shutil.which("nvidia-smi") is None or python is None:
        pytest.skip("needs a CUDA GPU and vLLM (on the CPU: tutorial 07)")
    config = ServerConfig(
        model=str(tiny_model),
        engine="vllm",
        vllm_python=python,
        vllm_port=0,
        storage_dir=str(tmp_path / "srv"),
        dtype=cpu_dtype(fast=False),  # the transformers engine's, whose answers it must give
        max_model_len=512,
        enforce_eager=True,
        max_lora_rank=16,  # the stack below: 8 + 4, padded to 16
        gpu_sharing="pause",
        vllm_startup_timeout_s=400,
        poll_interval_s=0.2,
    )
    app = create_server_app(config)
    with serve(app, startup_timeout_s=30) as server:
        base, tuned, name = asyncio.run(train_and_compare(server.port, ready_timeout_s=420))
        stacked_by_vllm = asyncio.run(train_stacked_on(server.port, name, "verifier-it2"))
        status = app.state.engine.status()
    assert name == "verifier-it1" and status.kind == "vllm" and status.restarts == 0
    assert tuned != base and tuned.startswith("Decision")
    # vLLM serves the stack (it1 merged, it2 on top) as transformers does, token for token.
    stack_folder = tmp_path / "srv" / "jobs" / "verifier-it2" / "adapter"
    stacked_by_transformers = asyncio.run(local_answer(tiny_model, stack_folder))
    assert (tmp_path / "srv" / "jobs" / "verifier-it2" / "adapter-for-vllm").is_dir()
    assert stacked_by_vllm == stacked_by_transformers


async def train_stacked_on(port: int, previous: str, name: str) -> str:
    """Train ``name`` stacked on ``previous`` through the server; returns its greedy answer."""
    from nip.backends.openai_compatible import OpenAIBackend, OpenAIBackendConfig
    from nip.jobs.self_hosted import SelfHostedFineTuneBackend

    jobs = SelfHostedFineTuneBackend(f"http://127.0.0.1:{port}")
    spec = FineTuneSpec(
        previous,
        "supervised",
        tuple({"messages": [*PROMPT, {"role": "assistant", "content": "No."}]} for _ in range(8)),
        job_name=name,
        learning_rate=1e-2,
        batch_size=4,
        lora_rank=4,
        lora_alpha=8.0,
        lora_dropout=0.0,
        stack_lora_adapters=True,
    )
    job_id = await jobs.create_job(spec)
    for _ in range(960):
        job = await jobs.get_job(job_id)
        if job.status not in ("pending", "running"):
            break
        await asyncio.sleep(0.25)
    assert job.status == "succeeded", job
    for _ in range(240):  # the adapter is loaded into the engine after the job succeeds
        messages = [e.message for e in await jobs.list_events(job_id)]
        if any(m.startswith(("Serving", "The model could not be loaded")) for m in messages):
            break
        await asyncio.sleep(0.25)
    assert f"Serving {name} for inference." in messages, messages
    backend = OpenAIBackend(OpenAIBackendConfig(base_url=f"http://127.0.0.1:{port}/v1"))
    request = GenerationRequest(name, PROMPT, max_tokens=12, temperature=0.0)
    try:
        result = await backend.generate(request)
    finally:
        await backend.aclose()
    return result.completions[0].text


async def local_answer(model_dir: Path, adapter: Path) -> str:
    """The transformers backend's greedy answer from the stack whose top is ``adapter``."""
    from nip.backends.local import LocalBackend

    backend = LocalBackend(str(model_dir), device="cpu")
    try:
        backend.register_adapter("stack", adapter)
        request = GenerationRequest("stack", PROMPT, max_tokens=12, temperature=0.0)
        return (await backend.generate(request)).completions[0].text
    finally:
        await backend.aclose()


# ----------------------------------------------------------- vLLM supervision (a fake vLLM)


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """A stand-in for ``python -m vllm...``: answers /health, loads adapters, can crash."""
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_VLLM_SERVER)
    python = tmp_path / "python-with-fake-vllm"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    python.chmod(0o755)
    record = tmp_path / "adapter_loads.txt"
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(record))
    model = tmp_path / "base"
    model.mkdir()
    config = ServerConfig(
        model=str(model), engine="vllm", vllm_python=str(python), vllm_port=0, device="cpu"
    )
    return config, record


def fake_engine(config: ServerConfig, tmp_path: Path):
    from nip.server.vllm_engine import VllmEngine

    return VllmEngine(
        config, Path(config.model), tmp_path / "logs", paused_wait_s=10, restart_backoff_s=0.1
    )


async def until(check, timeout_s: float = 20.0):
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def test_vllm_is_restarted_after_a_crash_and_its_adapters_are_loaded_again(fake_vllm, tmp_path):
    config, record = fake_vllm
    engine = fake_engine(config, tmp_path)

    async def scenario():
        await engine.start()
        await engine.load_adapter("verifier-it0", "/adapters/0")  # registered while starting
        try:
            await until(lambda: engine.status().state == "ready")
            answer = await engine.forward("chat/completions", {"model": "verifier-it0"})
            crash = await engine.forward("chat/completions", {"model": "crash"})
            await until(lambda: engine.status().restarts == 1)
            await until(lambda: engine.status().state == "ready")
            again = await engine.forward("chat/completions", {"model": "verifier-it0"})
        finally:
            await engine.stop()
        return answer, crash, again

    answer, crash, again = asyncio.run(scenario())
    assert answer.status == 200 and b"verifier-it0 answers" in answer.body
    assert crash.status == 503
    assert again.status == 200
    assert [line.split()[0] for line in record.read_text().splitlines()] == [
        "verifier-it0",
        "verifier-it0",
    ]
    assert "exited with status 3" in engine.status().error
    assert engine.status().state == "stopped"


def test_a_stacked_adapter_reaches_vllm_as_one_adapter_of_the_whole_stack(
    fake_vllm, tiny_model, tmp_path
):
    """vLLM applies one adapter per request: given only the top of a stack, it would serve
    the newest adapter without the ones it was trained on (the original's behaviour)."""
    from nip.backends.local.adapters import write_predecessors
    from nip.server.engine import EngineError
    from tests.doubles.tiny_model import build_tiny_lora_adapter

    config, record = fake_vllm
    config.max_lora_rank = 8
    it0 = build_tiny_lora_adapter(tiny_model, tmp_path / "jobs/it0/adapter", seed=1, rank=4)
    it1 = build_tiny_lora_adapter(tiny_model, tmp_path / "jobs/it1/adapter", seed=2, rank=2)
    write_predecessors(it1, [it0])
    wide = build_tiny_lora_adapter(tiny_model, tmp_path / "jobs/it2/adapter", seed=3, rank=8)
    write_predecessors(wide, [it0, it1])  # 4 + 2 + 8 = 14 > 8
    engine = fake_engine(config, tmp_path)

    async def scenario():
        await engine.start()
        try:
            await until(lambda: engine.status().state == "ready")
            await engine.load_adapter("verifier-it0", str(it0))
            await engine.load_adapter("verifier-it1", str(it1))
            with pytest.raises(EngineError, match=r"rank 14, above .*--max-lora-rank"):
                await engine.load_adapter("verifier-it2", str(wide))
        finally:
            await engine.stop()

    asyncio.run(scenario())
    loads = dict(line.split() for line in record.read_text().splitlines())
    assert loads["verifier-it0"] == str(it0)  # a plain adapter goes as it is
    served = Path(loads["verifier-it1"])
    assert served == it1.with_name("adapter-for-vllm")
    config_written = json.loads((served / "adapter_config.json").read_text())
    assert (config_written["r"], config_written["lora_alpha"]) == (8, 8)  # 4 + 2, padded
    assert "verifier-it2" not in loads


def test_restarts_wait_longer_each_time_from_the_backoff_given():
    from nip.server.vllm_engine import VllmEngine

    config = ServerConfig(device="cpu")
    default = VllmEngine(config, Path("/m"), Path("/logs"))
    assert [default.restart_delay_s(n) for n in range(1, 7)] == [2, 4, 8, 16, 30, 30]
    quick = VllmEngine(config, Path("/m"), Path("/logs"), restart_backoff_s=0.1)
    assert [quick.restart_delay_s(n) for n in (1, 2, 3)] == pytest.approx([0.1, 0.2, 0.4])


def test_a_vllm_that_never_gets_ready_fails_after_the_time_out(fake_vllm, tmp_path, monkeypatch):
    config, _ = fake_vllm
    monkeypatch.setenv("FAKE_VLLM_NEVER_READY", "1")
    config.vllm_startup_timeout_s = 3.0  # long enough for Python to start on a busy machine
    engine = fake_engine(config, tmp_path)

    async def scenario():
        await engine.start()
        await until(lambda: engine.status().state == "failed")
        pid = int(engine.pid_path.read_text()) if engine.pid_path.exists() else None
        reply = await engine.forward("chat/completions", {"model": "base"})
        await engine.stop()
        return reply, pid

    reply, pid_when_failed = asyncio.run(scenario())
    status = engine.status()
    assert "not ready after 3 s" in (status.error or "") and "fake vLLM starting" in status.error
    assert reply.status == 503
    # "failed" is reported only once the process has been ended and its pid file removed.
    assert pid_when_failed is None and not engine.pid_path.exists()


def test_stopping_the_server_ends_the_vllm_process_group(fake_vllm, tmp_path):
    import os

    config, _ = fake_vllm
    engine = fake_engine(config, tmp_path)

    async def scenario():
        await engine.start()
        await until(lambda: engine.status().state == "ready")
        pid = int(engine.pid_path.read_text())
        await engine.stop()
        return pid

    pid = asyncio.run(scenario())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_stopping_the_server_also_kills_a_vllm_worker_that_outlived_vllm(
    fake_vllm, tmp_path, monkeypatch
):
    config, _ = fake_vllm
    worker_pid_file = tmp_path / "worker.pid"
    monkeypatch.setenv("FAKE_VLLM_WORKER", str(worker_pid_file))
    engine = fake_engine(config, tmp_path)

    async def scenario():
        await engine.start()
        await until(lambda: engine.status().state == "ready")
        group = int(engine.pid_path.read_text())
        await engine.stop()
        return group

    group = asyncio.run(scenario())
    worker = int(worker_pid_file.read_text())
    assert worker not in live_group_members(group)
    assert live_group_members(group) == []


def test_a_worker_left_by_a_crashed_vllm_is_killed_before_the_restart(
    fake_vllm, tmp_path, monkeypatch
):
    config, _ = fake_vllm
    monkeypatch.setenv("FAKE_VLLM_WORKER", str(tmp_path / "worker.pid"))
    engine = fake_engine(config, tmp_path)

    async def scenario():
        await engine.start()
        try:
            await until(lambda: engine.status().state == "ready")
            first_group = int(engine.pid_path.read_text())
            await engine.forward("chat/completions", {"model": "crash"})
            await until(lambda: engine.status().restarts == 1)
            await until(lambda: engine.status().state == "ready")
            return first_group
        finally:
            await engine.stop()  # ends the second vLLM's group, not the first's

    first_group = asyncio.run(scenario())
    assert live_group_members(first_group) == []  # its worker, ignoring SIGTERM, did not outlive it


def test_the_vllm_command_follows_the_gpu_sharing_setting(monkeypatch):
    from nip.server.vllm_engine import vllm_launch

    def launch(config: ServerConfig):
        return vllm_launch(config, Path("/m"), "py")

    gpu = ServerConfig(device="cuda", gpu_sharing="pause", tensor_parallel_size=2, max_loras=2)
    command = launch(gpu).command(8001)
    assert command[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    assert "--enable-sleep-mode" in command and "--enable-lora" in command
    assert command[command.index("--gpu-memory-utilization") + 1] == "0.9"
    assert command[command.index("--tensor-parallel-size") + 1] == "2"
    assert command[command.index("--max-cpu-loras") + 1] == "8"
    env = launch(gpu).environment_for("t")
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"

    shared = launch(ServerConfig(device="cuda")).command(8001)
    assert "--enable-sleep-mode" not in shared
    assert shared[shared.index("--gpu-memory-utilization") + 1] == "0.5"

    cpu = ServerConfig(device="cpu", gpu_sharing="pause")
    assert "--gpu-memory-utilization" not in launch(cpu).command(8001)
    assert "VLLM_SERVER_DEV_MODE" not in launch(cpu).environment_for("t")
    assert launch(cpu).environment_for("t")["VLLM_CPU_KVCACHE_SPACE"] == "1"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "8")  # the setting is not ignored for it
    larger = ServerConfig(device="cpu", cpu_kv_cache_gib=3)
    assert launch(larger).environment_for("t")["VLLM_CPU_KVCACHE_SPACE"] == "3"


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.vllm
@pytest.mark.timeout(900)
def test_with_pause_sharing_vllm_sleeps_while_a_job_trains_on_the_gpu(tiny_model, tmp_path):
    import httpx

    from nip.jobs.self_hosted import SelfHostedFineTuneBackend

    python = _has_vllm()
    if shutil.which("nvidia-smi") is None or python is None:
        pytest.skip("needs a CUDA GPU and vLLM")
    config = ServerConfig(
        model=str(tiny_model),
        engine="vllm",
        device="cuda",
        vllm_python=python,
        vllm_port=0,
        storage_dir=str(tmp_path / "srv"),
        max_lora_rank=8,
        gpu_sharing="pause",
        poll_interval_s=0.2,
    )
    app = create_server_app(config)

    async def scenario(url: str) -> list[str]:
        from nip.backends.self_hosted import wait_for_server

        await wait_for_server(url, None, timeout_s=600)
        backend = SelfHostedFineTuneBackend(url)
        spec = FineTuneSpec("tiny-chat", "supervised", EXAMPLES, job_name="verifier-it1")
        job_id = await backend.create_job(spec)
        states = []
        async with httpx.AsyncClient() as client:
            while (await backend.get_job(job_id)).status not in ("succeeded", "failed"):
                states.append((await client.get(f"{url}/health")).json()["engine"]["state"])
                await asyncio.sleep(0.2)
        await wait_for_server(url, None, timeout_s=120)
        return states

    with serve(app, startup_timeout_s=30) as server:
        states = asyncio.run(scenario(server.url))
        engine = app.state.engine
        reply = asyncio.run(
            engine.forward("chat/completions", {"model": "verifier-it1", "messages": list(PROMPT)})
        )
    assert "paused" in states
    assert reply.status == 200


@pytest.mark.parametrize(
    ("device", "native_bf16", "setting", "expected"),
    [
        ("cpu", False, "auto", "float32"),  # vLLM's auto would emulate bfloat16
        ("cpu", True, "auto", "bfloat16"),
        ("cuda", False, "auto", "auto"),
        ("cpu", False, "bfloat16", "bfloat16"),  # an explicit dtype is passed on as it is
    ],
)
def test_vllm_reads_in_float32_on_a_cpu_without_native_bfloat16(
    monkeypatch, device, native_bf16, setting, expected
):
    from nip.server import vllm_engine
    from nip.utils import precision

    monkeypatch.delenv("NIP_CPU_DTYPE", raising=False)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native_bf16)
    config = ServerConfig(device=device, dtype=setting)
    command = vllm_engine.vllm_launch(config, Path("/m"), "py").command(8001)

    assert command[command.index("--dtype") + 1] == expected


@pytest.mark.parametrize("forced", ["float32", "bfloat16"])
@pytest.mark.parametrize("native_bf16", [False, True])
def test_nip_cpu_dtype_decides_what_auto_means_for_vllm_on_any_cpu(
    monkeypatch, forced, native_bf16
):
    from nip.server import vllm_engine
    from nip.utils import precision

    monkeypatch.setenv("NIP_CPU_DTYPE", forced)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native_bf16)
    command = vllm_engine.vllm_launch(ServerConfig(device="cpu"), Path("/m"), "py").command(8001)

    assert command[command.index("--dtype") + 1] == forced


def test_vllm_workers_it_binds_are_not_handed_our_thread_count_unless_the_binding_is_ours(
    monkeypatch,
):
    """vLLM binds its CPU workers to cores it picks; an inherited OMP_NUM_THREADS larger than
    those cores ran several OpenMP threads on one core (tutorial 7: 249 s instead of 24 s).
    With one worker it runs in vLLM's engine process, bound to nothing: the count stands."""
    from nip.backends.local.vllm_process import VllmLaunch

    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("MKL_NUM_THREADS", "2")
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    bound = VllmLaunch("py", Path("/m"), "m", options=("--tensor-parallel-size", "2"))
    env = bound.environment_for("t")
    assert "OMP_NUM_THREADS" not in env and "MKL_NUM_THREADS" not in env

    explicit = VllmLaunch(
        "py", Path("/m"), "m", options=bound.options, environment={"OMP_NUM_THREADS": "4"}
    )
    assert explicit.environment_for("t")["OMP_NUM_THREADS"] == "4"

    one_worker = VllmLaunch("py", Path("/m"), "m")
    assert one_worker.environment_for("t")["OMP_NUM_THREADS"] == "2"

    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")  # the user binds: their count stands
    assert bound.environment_for("t")["OMP_NUM_THREADS"] == "2"


def test_vllm_runs_its_engine_and_model_in_one_process_unless_it_has_several_workers(
    monkeypatch,
):
    """vLLM's CPU build otherwise keeps a core for an engine process that spins while the
    model's worker computes on the rest (on 2 cores: one each). One worker, no binding of the
    user's: one process for both. Several workers, a binding, or the user's own setting: as
    vLLM decides."""
    from nip.backends.local.vllm_process import VllmLaunch

    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)

    def one_process(*options: str) -> bool:
        env = VllmLaunch("py", Path("/m"), "m", options=options).environment_for("t")
        return env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"

    assert one_process()
    assert one_process("--enforce-eager", "--tensor-parallel-size", "1")
    assert not one_process("--tensor-parallel-size", "2")
    assert not one_process("--data-parallel-size=2")
    assert not one_process("-pp", "4")

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # the user's choice stands
    assert not one_process()
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")  # a binding needs vLLM's worker
    assert not one_process()
