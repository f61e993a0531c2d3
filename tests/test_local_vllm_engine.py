"""The ``Local`` provider's vLLM engine: the embedded model served by a vLLM process of its own.

``ExperimentSettings(local_engine="vllm")`` (``nip run --local-engine vllm``) gives Local agents
a :class:`LocalVllmBackend`: the same model names and adapters as the transformers engine,
greedy answers token for token the same, vLLM started with the first request and stopped with
the backend; a stacked adapter is served as the one adapter equal to its stack. The end-to-end
test needs vLLM (``scripts/setup_vllm_cpu.sh``); the others use a stand-in interpreter.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from nip.backends import GenerationRequest
from nip.backends.local import LocalBackend, LocalVllmBackend, local_backend
from nip.backends.local.adapters import write_predecessors
from nip.backends.local.vllm_python import VLLM_PYTHON_ENV
from nip.errors import BackendUnavailableError, InvalidParameterError, UnservableAdapterError
from nip.parameters import PureTextAgentParameters
from nip.providers import PROVIDERS
from nip.settings import ExperimentSettings
from tests.doubles.fake_vllm import FAKE_VLLM_SERVER, fake_vllm_python
from tests.doubles.processes import live_group_members

VLLM_VENV_PYTHON = Path(__file__).resolve().parents[1] / ".vllm-venv" / "bin" / "python"
PROMPT = ({"role": "user", "content": "Is the loop correct? Answer with a decision."},)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from tests.doubles.tiny_model import build_tiny_chat_model

    return build_tiny_chat_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch) -> str:
    python = fake_vllm_python(tmp_path / "fake")
    monkeypatch.setenv(VLLM_PYTHON_ENV, python)
    return python


def test_the_settings_choose_the_local_engine(fake_vllm):
    params = PureTextAgentParameters.local_default()
    local = PROVIDERS["Local"]
    assert isinstance(local.chat(params, ExperimentSettings()), LocalBackend)
    chosen = local.chat(params, ExperimentSettings(local_engine="vllm"))
    assert isinstance(chosen, LocalVllmBackend) and not chosen.running  # starts on first use
    assert chosen.python == fake_vllm
    assert chosen.max_lora_rank == params.lora_rank == 8  # room for the agents' adapters
    params.lora_rank = 12  # rounded up to a rank vLLM accepts
    assert local.chat(params, ExperimentSettings(local_engine="vllm")).max_lora_rank == 16
    with pytest.raises(InvalidParameterError, match="'transformers', 'vllm' or 'auto'"):
        ExperimentSettings(local_engine="llama.cpp")
    with pytest.raises(InvalidParameterError, match="local_engine"):
        local_backend(engine="llama.cpp")


def test_auto_picks_vllm_on_a_cuda_device_where_vllm_is_installed(fake_vllm, monkeypatch, capsys):
    import torch

    from nip.backends.local.engines import choose_local_engine

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    params = PureTextAgentParameters.local_default()
    chosen = PROVIDERS["Local"].chat(params, ExperimentSettings(local_engine="auto"))
    assert isinstance(chosen, LocalVllmBackend) and chosen.python == fake_vllm
    assert chosen.dtype == "auto" and "--gpu-memory-utilization" in chosen.vllm_args
    assert chosen.max_lora_rank == 8  # the agents' options still apply
    assert (
        capsys.readouterr().err
        == f"nip: local_engine=auto: vllm (a CUDA device and vLLM ({fake_vllm}))\n"
    )
    assert choose_local_engine(cuda=False).engine == "transformers"


@pytest.mark.parametrize(
    ("cuda", "vllm", "why"),
    [
        (False, True, "no CUDA device, where vLLM is not faster"),
        (True, False, "a CUDA device but no vLLM: run scripts/setup_vllm_cpu.sh"),
    ],
)
def test_auto_picks_transformers_otherwise_and_says_why_in_one_line(
    tmp_path, monkeypatch, capsys, cuda, vllm, why
):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    python = fake_vllm_python(tmp_path / "fake") if vllm else "none"
    monkeypatch.setenv(VLLM_PYTHON_ENV, python)
    chosen = local_backend(engine="auto")
    assert isinstance(chosen, LocalBackend)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"nip: local_engine=auto: transformers ({why}")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_asking_for_vllm_where_there_is_none_says_how_to_get_it():
    with pytest.raises(BackendUnavailableError, match=r"setup_vllm_cpu\.sh"):
        LocalVllmBackend(vllm_python=sys.executable)


def test_a_vllm_that_exits_while_starting_is_reported_with_its_log(tmp_path, tiny_model):
    crashing = 'print("fake vLLM: out of memory", flush=True)\nraise SystemExit(3)\n'
    python = fake_vllm_python(tmp_path / "fake", api_server=crashing)
    backend = LocalVllmBackend(str(tiny_model), vllm_python=python)
    request = GenerationRequest(str(tiny_model), PROMPT, max_tokens=4, temperature=0.0)
    with pytest.raises(BackendUnavailableError, match=r"status 3(.|\n)*out of memory"):
        asyncio.run(backend.generate(request))
    assert not backend.running and backend.log_path is None  # nothing left behind
    asyncio.run(backend.aclose())


def test_vllm_serves_adapters_and_stacks_up_to_the_rank_it_was_started_for(
    tmp_path, tiny_model, fake_vllm
):
    from tests.doubles.tiny_model import build_tiny_lora_adapter

    backend = LocalVllmBackend(str(tiny_model), max_lora_rank=8)
    first = build_tiny_lora_adapter(tiny_model, tmp_path / "first", rank=4)
    backend.register_adapter("verifier-it0", first)
    assert backend.model_names[-1] == "verifier-it0"
    assert backend.model_fingerprint("verifier-it0") is not None
    wide = build_tiny_lora_adapter(tiny_model, tmp_path / "wide", rank=16)
    with pytest.raises(UnservableAdapterError, match="max_lora_rank=16 or more"):
        backend.register_adapter("wide", wide)
    stacked = build_tiny_lora_adapter(tiny_model, tmp_path / "stacked", rank=4, seed=1)
    write_predecessors(stacked, [first])
    backend.register_adapter("verifier-it1", stacked)  # served as one adapter of rank 4 + 4
    too_wide = build_tiny_lora_adapter(tiny_model, tmp_path / "too-wide", rank=8, seed=2)
    write_predecessors(too_wide, [first])
    with pytest.raises(UnservableAdapterError, match=r"rank 12, above .*larger max_lora_rank"):
        backend.register_adapter("verifier-it2", too_wide)
    with pytest.raises(InvalidParameterError, match="max_lora_rank"):
        LocalVllmBackend(str(tiny_model), max_lora_rank=10)  # not a rank vLLM accepts


@pytest.mark.timeout(180)
def test_a_vllm_whose_owner_is_killed_with_sigkill_goes_with_its_workers(
    tmp_path, tiny_model, monkeypatch
):
    """vLLM runs in a session of its own: only its watchdog can end it once its owner is gone."""
    python = fake_vllm_python(tmp_path / "fake", api_server=FAKE_VLLM_SERVER)
    monkeypatch.setenv("FAKE_VLLM_WORKER", str(tmp_path / "worker.pid"))  # deaf to SIGTERM
    script = (
        "import asyncio, time\n"
        "from nip.backends.local import LocalVllmBackend\n"
        f"backend = LocalVllmBackend({str(tiny_model)!r}, vllm_python={python!r})\n"
        "asyncio.run(backend.wait_for_ready(90))\n"
        "print(backend._process.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        vllm = int(owner.stdout.readline())  # the owner exits (and this fails) on a start error
        worker = int((tmp_path / "worker.pid").read_text())
        assert worker in live_group_members(vllm, wait_s=0)
    finally:
        owner.kill()  # SIGKILL: no atexit, no finalizer
        owner.wait(timeout=60)
    assert live_group_members(vllm, wait_s=60) == []


def _vllm_python() -> str | None:
    if VLLM_VENV_PYTHON.exists():
        return str(VLLM_VENV_PYTHON)
    return sys.executable if importlib.util.find_spec("vllm") else None


async def _answers(backend, names: list[str]) -> list[str]:
    answers = []
    for name in names:
        request = GenerationRequest(name, PROMPT, max_tokens=12, temperature=0.0)
        answers.append((await backend.generate(request)).completions[0].text)
    return answers


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.timeout(600)
def test_the_vllm_engine_answers_as_the_transformers_engine_does(tmp_path, tiny_model):
    from tests.doubles.tiny_model import build_tiny_lora_adapter

    python = _vllm_python()
    if python is None:
        pytest.skip("no vLLM: run scripts/setup_vllm_cpu.sh (CPU) or install vllm (GPU)")
    adapters = [build_tiny_lora_adapter(tiny_model, tmp_path / f"a{i}", seed=i) for i in (0, 1)]
    stacked = build_tiny_lora_adapter(tiny_model, tmp_path / "stacked", seed=2)
    write_predecessors(stacked, [adapters[0]])  # served by vLLM as one adapter of rank 8
    transformers = LocalBackend(str(tiny_model), device="cpu")
    vllm = LocalVllmBackend(
        str(tiny_model), vllm_python=python, max_model_len=512, vllm_args=["--enforce-eager"]
    )
    names = [str(tiny_model), "verifier"]

    async def both(adapter: Path) -> tuple[list[str], list[str]]:
        for backend in (transformers, vllm):
            backend.register_adapter("verifier", adapter)  # again: new weights, same name
        return await _answers(transformers, names), await _answers(vllm, names)

    async def run() -> tuple:
        try:
            first, second = await both(adapters[0]), await both(adapters[1])
            third = await both(stacked)
            process = vllm._process
            return first, second, third, process
        finally:
            await transformers.aclose()
            await vllm.aclose()

    first, second, third, process = asyncio.run(run())
    assert first[0] == first[1] and second[0] == second[1]  # token for token
    assert third[0] == third[1]  # a stack too
    assert first[0][0] != first[0][1]  # the adapter changes the answer
    assert first[0][1] != second[0][1]  # and the re-registered one is served
    assert not process.running  # stopped with the backend
    assert live_group_members(process.pid) == []  # its workers too


def test_nip_run_and_resume_take_the_local_engine():
    from nip.cli import build_parser
    from nip.cli._args import run_settings as _settings

    for command in (["run", "quickstart"], ["resume", "runs/x"]):
        args = build_parser().parse_args([*command, "--local-engine", "vllm"])
        if command[0] == "resume":
            args.run_dir = args.run_dir_positional  # as `nip resume` does
        assert _settings(args).local_engine == "vllm"
    default = build_parser().parse_args(["run", "quickstart"])
    assert _settings(default).local_engine == "transformers"


def test_the_kv_cache_size_given_wins_over_the_environment(fake_vllm, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "8")
    assert LocalVllmBackend(kv_cache_gib=2).environment()["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert LocalVllmBackend().environment()["VLLM_CPU_KVCACHE_SPACE"] == "8"
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE")
    environment = LocalVllmBackend().environment()
    assert environment["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert environment["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert environment["VLLM_API_KEY"]  # a key of its own: nothing else can drive it
