"""No setting is accepted and silently ignored: each acts, or is refused when configured.

Covers quantization (vLLM's ``--quantization``, QLoRA arguments, refusals), the vLLM port and
the checkpoint fields' consistency. That every field acts, by behaviour, is
tests/test_settings_behaviour.py.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

from nip.errors import FineTuneError, InvalidParameterError
from nip.jobs import FineTuneSpec
from nip.jobs.lora_train import QuantizationUnavailableError, quantized_loading_kwargs
from nip.jobs.self_hosted import SelfHostedFineTuneBackend
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.server.app import create_server_app
from nip.server.config import ServerConfig
from nip.server.vllm_engine import vllm_launch
from nip.testing.server import serve
from tests.doubles.fine_tuning import ScriptedFineTuneBackend

SFT_LINE = {
    "messages": [
        {"role": "user", "content": "Is the code correct?"},
        {"role": "assistant", "content": "Decision: accept"},
    ]
}


# ----------------------------------------------------------------------- quantization
@pytest.mark.parametrize("provider", ["Local", "OpenAI", "OpenRouter", "TogetherAI"])
def test_quantization_is_refused_for_providers_that_cannot_quantize(provider):
    with pytest.raises(InvalidParameterError, match=r"^quantization='bitsandbytes'") as raised:
        PureTextAgentParameters(model_provider=provider, quantization="bitsandbytes")
    assert raised.value.field == "quantization"
    assert f"model_provider={provider!r} ignores it" in str(raised.value)
    if provider == "Local":
        assert "on the CPU" in str(raised.value)


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
    command = vllm_launch(
        ServerConfig(device="cuda", quantization="bitsandbytes"), Path("/m"), "py"
    ).command(8001)
    assert command[command.index("--quantization") + 1] == "bitsandbytes"
    assert "--quantization" not in vllm_launch(
        ServerConfig(device="cuda"), Path("/m"), "py"
    ).command(1)


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


# -------------------------------------------------------- every field acts
# This file once grepped nip's source for each field's name; a grep cannot see a field that
# one trainer ignores. tests/test_settings_behaviour.py changes each field and watches the run
# change; the two tests below keep their names and check that it covers every field.
def behaviour_cases():
    """tests/test_settings_behaviour.py, loaded as a module (tests are not a package)."""
    name = "settings_behaviour_cases"
    if name not in sys.modules:
        path = Path(__file__).with_name("test_settings_behaviour.py")
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def test_every_parameter_field_is_read_somewhere_in_nip():
    cases = behaviour_cases()
    covered = {cases.covered_field(c) for c in cases.CASES} | set(cases.SHOWN_ELSEWHERE)
    assert sorted(cases.all_fields() - covered) == [], "fields without a behavioural case"


def test_the_allow_list_names_only_existing_fields():
    cases = behaviour_cases()
    assert set(cases.SHOWN_ELSEWHERE) <= cases.all_fields()


# ------------------------------------------------ settings the agent's provider ignores
#: Settings an OpenAI or OpenRouter agent ignores, with a value other than the default. Each
#: was accepted and did nothing before the provider table said which settings apply where.
IGNORED_BY_API_PROVIDERS = {
    "num_epochs": 3,
    "per_device_train_batch_size": 8,
    "lora_rank": 16,
    "lora_alpha": 32,
    "lora_alpha_scale": 2.0,
    "lora_dropout": 0.1,
    "stack_lora_adapters": True,
}


@pytest.mark.parametrize("provider", ["OpenAI", "OpenRouter"])
@pytest.mark.parametrize("setting", sorted(IGNORED_BY_API_PROVIDERS))
def test_a_setting_the_agents_provider_ignores_is_refused_naming_field_agent_and_provider(
    setting, provider
):
    agent = {"model_provider": provider, setting: IGNORED_BY_API_PROVIDERS[setting]}
    if setting == "lora_alpha":
        agent["lora_alpha_scale"] = None
    with pytest.raises(InvalidParameterError) as refused:
        HyperParameters(agents={"prover": {"freeze_agent": True}, "verifier": agent})
    assert refused.value.field == f"agents.verifier.{setting}"
    assert f"model_provider={provider!r} ignores it" in str(refused.value)
    assert "SelfHosted" in str(refused.value)  # where it would act


def test_the_same_settings_act_on_a_together_ai_agent():
    agent = {"model_provider": "TogetherAI", "num_epochs": 3, "lora_rank": 16}
    params = HyperParameters(agents={"prover": {"freeze_agent": True}, "verifier": agent})
    assert params.agents["verifier"].lora_rank == 16


def lr_run(**verifier) -> HyperParameters:
    agents = {"prover": {"freeze_agent": True}, "verifier": verifier}
    return HyperParameters(agents=agents, rl={"lr": 3e-4})


def test_rl_lr_is_refused_when_no_trainable_agent_is_sent_a_learning_rate():
    """rl.lr is run-wide: it acts through the jobs of trainable agents whose provider takes a
    learning rate (SelfHosted, Local, TogetherAI); OpenAI is sent a multiplier instead."""
    with pytest.raises(InvalidParameterError, match=r"^rl.lr=0.0003 .*trainable: verifier"):
        lr_run(model_provider="OpenAI")
    with pytest.raises(InvalidParameterError, match=r"^rl.lr=0.0003 .*trainable: none"):
        lr_run(model_provider="TogetherAI", freeze_agent=True)


@pytest.mark.parametrize("provider", ["SelfHosted", "Local", "TogetherAI"])
def test_rl_lr_is_accepted_when_a_trainable_agents_provider_takes_it(provider):
    assert lr_run(model_provider=provider).rl.lr == 3e-4
