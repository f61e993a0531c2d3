"""No setting is accepted and silently ignored: each acts, or is refused when configured.

Covers quantization (vLLM's ``--quantization``, QLoRA arguments, refusals), the vLLM port,
the checkpoint fields' consistency, and a walk over every field of every parameters class
that fails when a field is read nowhere in nip outside the parameters package.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import re
from pathlib import Path

import pytest

import nip
import nip.parameters as parameters_package
from nip.errors import FineTuneError, InvalidParameterError
from nip.jobs import FineTuneSpec
from nip.jobs.lora_train import QuantizationUnavailableError, quantized_loading_kwargs
from nip.jobs.self_hosted import SelfHostedFineTuneBackend
from nip.parameters import PureTextAgentParameters
from nip.parameters._base import BaseParameters
from nip.server.app import create_server_app
from nip.server.config import ServerConfig
from nip.server.vllm_engine import vllm_command
from nip.testing.fine_tuning import ScriptedFineTuneBackend
from nip.testing.server import serve

SFT_LINE = {
    "messages": [
        {"role": "user", "content": "Is the code correct?"},
        {"role": "assistant", "content": "Decision: accept"},
    ]
}


# ----------------------------------------------------------------------- quantization
@pytest.mark.parametrize("provider", ["Local", "OpenAI", "OpenRouter"])
def test_quantization_is_refused_for_providers_that_cannot_quantize(provider):
    with pytest.raises(InvalidParameterError, match=r"^quantization='bitsandbytes'") as raised:
        PureTextAgentParameters(model_provider=provider, quantization="bitsandbytes")
    assert raised.value.field == "quantization"
    assert ("CPU" if provider == "Local" else "its own weights") in str(raised.value)


def test_quantization_is_accepted_for_a_self_hosted_agent():
    agent = PureTextAgentParameters(model_provider="SelfHosted", quantization="bitsandbytes")
    assert agent.quantization == "bitsandbytes"


def test_a_self_hosted_agents_quantization_reaches_the_servers_trainer(tmp_path):
    """The agent's setting travels in the job request (``lora.quantization``) to the spec
    that ``nip serve`` hands its LoRA trainer."""
    (tmp_path / "base").mkdir()
    config = ServerConfig(
        model=str(tmp_path / "base"), engine="none", device="cuda", storage_dir=str(tmp_path)
    )
    trainer = ScriptedFineTuneBackend()
    spec = FineTuneSpec("base", "supervised", (SFT_LINE,), quantization="bitsandbytes")

    async def submit(url):
        backend = SelfHostedFineTuneBackend(url)
        await backend.create_job(spec)
        while not trainer.specs:
            await asyncio.sleep(0.02)

    with serve(create_server_app(config, fine_tune_backend=trainer)) as server:
        asyncio.run(asyncio.wait_for(submit(server.url), 30))
    assert [s.quantization for s in trainer.specs.values()] == ["bitsandbytes"]


def test_a_server_training_on_the_cpu_refuses_a_quantized_job_at_creation(tmp_path):
    (tmp_path / "base").mkdir()
    config = ServerConfig(
        model=str(tmp_path / "base"), engine="none", device="cpu", storage_dir=str(tmp_path)
    )
    trainer = ScriptedFineTuneBackend()
    spec = FineTuneSpec("base", "supervised", (SFT_LINE,), quantization="bitsandbytes")
    with (
        serve(create_server_app(config, fine_tune_backend=trainer)) as server,
        pytest.raises(FineTuneError, match="QLoRA needs a CUDA GPU"),
    ):
        asyncio.run(SelfHostedFineTuneBackend(server.url).create_job(spec))
    assert trainer.specs == {}


def test_the_qlora_trainer_loads_the_base_model_in_4_bit_on_cuda():
    kwargs = quantized_loading_kwargs("bitsandbytes", cuda=True)
    config = kwargs["quantization_config"]
    assert config.load_in_4bit and config.bnb_4bit_quant_type == "nf4"
    assert config.bnb_4bit_use_double_quant
    assert quantized_loading_kwargs("none", cuda=True) == {}


def test_the_qlora_trainer_refuses_to_quantize_on_the_cpu():
    with pytest.raises(QuantizationUnavailableError, match="needs a CUDA GPU"):
        quantized_loading_kwargs("bitsandbytes", cuda=False)


def test_the_servers_quantization_is_passed_to_vllm():
    command = vllm_command(
        ServerConfig(device="cuda", quantization="bitsandbytes"), Path("/m"), 8001, "py"
    )
    assert command[command.index("--quantization") + 1] == "bitsandbytes"
    assert "--quantization" not in vllm_command(ServerConfig(device="cuda"), Path("/m"), 1, "py")


@pytest.mark.parametrize("where", [{"device": "cpu"}, {"engine": "transformers"}])
def test_a_server_without_a_gpu_engine_refuses_quantization(where):
    with pytest.raises(InvalidParameterError, match="bitsandbytes quantizes on CUDA only"):
        ServerConfig(quantization="bitsandbytes", **where)


# ------------------------------------------------------------------------ vLLM port
def test_a_vllm_port_other_than_the_default_is_refused_with_where_to_set_it():
    with pytest.raises(InvalidParameterError, match="nip serve --vllm-port") as raised:
        PureTextAgentParameters(model_provider="SelfHosted", vllm_server_port=9000)
    assert raised.value.field == "vllm_server_port"
    assert PureTextAgentParameters(vllm_server_port=8000).vllm_server_port == 8000


# ---------------------------------------------------------------------- checkpoints
def test_loading_a_checkpoint_without_naming_the_run_is_refused():
    with pytest.raises(InvalidParameterError, match="checkpoint_run_id=None"):
        PureTextAgentParameters(load_checkpoint_and_parameters=True)


@pytest.mark.parametrize(
    "field, value", [("checkpoint_run_id", "runs/first"), ("checkpoint_version", "v3")]
)
def test_a_checkpoint_field_without_load_checkpoint_and_parameters_is_refused(field, value):
    with pytest.raises(InvalidParameterError, match="load_checkpoint_and_parameters=True"):
        PureTextAgentParameters(**{field: value})


# ------------------------------------------------------------- every field is read
#: Fields read nowhere outside nip/parameters, on purpose. Keep this list short: a field
#: here must be refused when set to anything that would need code to act on it.
PASSED_THROUGH_ONLY = {
    # Refused unless 8000 (PureTextAgentParameters.validate): kept so the original's configs
    # load; the port is ServerConfig.vllm_port.
    "PureTextAgentParameters.vllm_server_port",
}


def parameter_classes() -> list[type[BaseParameters]]:
    """Every parameters class defined in nip.parameters (and ServerConfig)."""
    from nip.server.config import ServerConfig

    found = {ServerConfig}
    for module in Path(parameters_package.__file__).parent.glob("*.py"):
        name = f"nip.parameters.{module.stem}".removesuffix(".__init__")
        imported = __import__(name, fromlist=["_"])
        for _, cls in inspect.getmembers(imported, inspect.isclass):
            if issubclass(cls, BaseParameters) and cls is not BaseParameters:
                found.add(cls)
    return sorted(found, key=lambda c: c.__name__)


def source_outside_parameters() -> str:
    root = Path(nip.__file__).parent
    return "\n".join(
        path.read_text(encoding="utf-8")
        for path in root.rglob("*.py")
        if "parameters" not in path.relative_to(root).parts
    )


def is_read(name: str, source: str) -> bool:
    """Whether ``name`` is read as an attribute, a keyword, a dotted address or a quoted name."""
    return re.search(rf"(\.{name}\b|\b{name}=|[\"'.]{name}[\"'])", source) is not None


def derived_readers(cls: type, field: str) -> list[str]:
    """Public properties and methods of ``cls`` that use ``field`` (``computed_lora_alpha``
    reads ``lora_alpha_scale``); validation does not count as use."""
    readers = []
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") or name == "validate":
            continue
        function = member.fget if isinstance(member, property) else member
        if not inspect.isfunction(function) or not function.__qualname__.startswith(cls.__name__):
            continue
        if re.search(rf"self\.{field}\b", inspect.getsource(function)):
            readers.append(name)
    return readers


def test_every_parameter_field_is_read_somewhere_in_nip():
    source = source_outside_parameters()
    unread = []
    for cls in parameter_classes():
        for field in dataclasses.fields(cls):
            key = f"{cls.__name__}.{field.name}"
            names = [field.name, *derived_readers(cls, field.name)]
            if key not in PASSED_THROUGH_ONLY and not any(is_read(n, source) for n in names):
                unread.append(key)
    assert unread == [], f"accepted but read nowhere: {unread}"


def test_the_allow_list_names_only_existing_fields():
    names = {f"{c.__name__}.{f.name}" for c in parameter_classes() for f in dataclasses.fields(c)}
    assert names >= PASSED_THROUGH_ONLY
