"""The tables that tie a configuration name to the code serving it, and the layers of nip.

Each name a configuration may hold (a protocol, a shipped dataset) is listed once in the
configuration layer and served by exactly one class or file above it; these tests keep the two
in step, so that adding one without the other fails here and not in a run.
"""

from __future__ import annotations

import subprocess
import sys
import typing

import pytest

from nip.backends import DummyBackend, OpenAIBackend
from nip.backends.local import LocalBackend
from nip.backends.self_hosted import SelfHostedBackend
from nip.data import SHIPPED_DATASETS
from nip.jobs import DummyFineTuneBackend
from nip.jobs.local_lora import LocalLoraFineTuneBackend
from nip.jobs.openai_api import OpenAIFineTuneBackend
from nip.jobs.self_hosted import SelfHostedFineTuneBackend
from nip.jobs.tinker import TinkerFineTuneBackend
from nip.parameters import (
    PROTOCOL_AGENT_NAMES,
    PROVIDER_FACTS,
    SHIPPED_DATASET_NAMES,
    HyperParameters,
    InteractionProtocolType,
    PureTextAgentParameters,
)
from nip.parameters.agents import ModelProvider
from nip.parameters.hyper_parameters import TrainerType
from nip.protocols import PROTOCOLS, Decision, build_protocol_handler
from nip.providers import (
    DUMMY,
    PROVIDERS,
    NotFineTunableBackend,
    fine_tune_backend_for,
    provider_for,
)
from nip.providers.pool import BackendPool, endpoint_key
from nip.providers.tinker import TinkerChatBackend
from nip.providers.together import TogetherFineTuneBackend
from nip.settings import ExperimentSettings
from nip.training.algorithms import ALGORITHMS
from nip.training.trainer import build_trainer


# ------------------------------------------------------------------------- protocols
def test_every_protocol_name_a_configuration_accepts_has_a_handler_and_no_other():
    assert set(typing.get_args(InteractionProtocolType)) == set(PROTOCOLS)


def test_the_configuration_layer_knows_each_protocols_agents_as_its_handler_does():
    assert {name: cls.agent_names for name, cls in PROTOCOLS.items()} == dict(PROTOCOL_AGENT_NAMES)


WITH_OWN_PARAMETERS = sorted(n for n, cls in PROTOCOLS.items() if cls.params_field is not None)


def test_the_protocols_with_parameters_of_their_own_name_their_hyper_parameters_field():
    fields = set(HyperParameters.model_fields)
    assert {PROTOCOLS[name].params_field for name in WITH_OWN_PARAMETERS} <= fields
    assert WITH_OWN_PARAMETERS == ["debate", "mnip", "nip"]


@pytest.mark.parametrize("name", WITH_OWN_PARAMETERS)
def test_the_handler_is_built_from_the_field_its_class_names(name):
    params = HyperParameters(interaction_protocol=name)
    params.get(PROTOCOLS[name].params_field).max_message_rounds = 5
    handler = build_protocol_handler(params)
    assert type(handler) is PROTOCOLS[name]
    assert handler.max_message_rounds == 5


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_every_handler_is_built_with_the_common_protocol_parameters(name):
    params = HyperParameters(interaction_protocol=name)
    handler = build_protocol_handler(params)
    assert type(handler) is PROTOCOLS[name]
    assert handler.common is params.protocol_common


# ------------------------------------------------------------------------- providers
def test_every_model_provider_a_configuration_accepts_is_in_the_provider_table_and_no_other():
    """The configuration knows a provider by its facts (beneath), the run by its module
    (above): one entry each, tied here."""
    providers = set(typing.get_args(ModelProvider))
    assert set(PROVIDERS) == providers == set(PROVIDER_FACTS)
    for name, provider in PROVIDERS.items():
        assert provider.name == name
        assert provider.facts is PROVIDER_FACTS[name]


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_a_provider_fine_tunes_and_bills_exactly_as_its_facts_say(name):
    provider = PROVIDERS[name]
    assert (provider.fine_tune is not None) is provider.facts.can_fine_tune
    assert (provider.job_settings is not None) is provider.facts.can_fine_tune
    assert (provider.prices is not None) is provider.facts.bills_tokens


SERVED_BY = {
    # provider: (endpoint key, chat backend, fine-tuning backend, bills tokens)
    "OpenAI": ("openai", OpenAIBackend, OpenAIFineTuneBackend, True),
    "OpenRouter": ("openrouter", OpenAIBackend, NotFineTunableBackend, True),
    "SelfHosted": (
        "selfhosted:http://gpu:5001",
        SelfHostedBackend,
        SelfHostedFineTuneBackend,
        False,
    ),
    "Local": ("local:SmolLM2-135M-Instruct", LocalBackend, LocalLoraFineTuneBackend, False),
    "TogetherAI": ("together", OpenAIBackend, TogetherFineTuneBackend, True),
    "Tinker": ("tinker:gpt-4o-mini", TinkerChatBackend, TinkerFineTuneBackend, True),
    DUMMY: ("dummy", DummyBackend, DummyFineTuneBackend, False),
}


@pytest.mark.parametrize("name", sorted(SERVED_BY))
def test_the_provider_table_decides_the_endpoint_backends_and_billing_of_an_agent(
    name, monkeypatch, tmp_path
):
    for variable in ("OPENAI_API_KEY", "OPENROUTER_API_KEY", "TOGETHER_API_KEY"):
        monkeypatch.setenv(variable, "sk-test")
    server = {"language_model_server_scheme_host": "http://gpu", "language_model_server_port": 5001}
    params = PureTextAgentParameters(
        model_provider="OpenAI" if name == DUMMY else name,
        model_name="SmolLM2-135M-Instruct" if name == "Local" else "gpt-4o-mini",
        use_dummy_api=name == DUMMY,
        freeze_agent=True,
        **(server if name == "SelfHosted" else {}),
    )
    key, chat, fine_tuning, bills = SERVED_BY[name]
    settings = ExperimentSettings(cache="off", run_dir=tmp_path)
    # The in-process LoRA backend's worker thread would import TRL (3 s of CPU) while later
    # tests run; which backend the table builds is the question here, not what it imports.
    from nip.jobs import lora_train

    monkeypatch.setattr(lora_train, "import_training_libraries", lambda: None)

    assert provider_for(params).name == name
    assert endpoint_key(params) == key
    assert isinstance(BackendPool(settings).backend_for(params), chat)
    fine_tune_backend = fine_tune_backend_for(params, settings)
    assert isinstance(fine_tune_backend, fine_tuning)
    assert provider_for(params).bills_tokens is bills
    if hasattr(fine_tune_backend, "close"):
        fine_tune_backend.close()  # its worker thread ends here, not during a later test


def test_every_local_engine_the_settings_accept_has_a_backend_and_no_other():
    from nip.backends.local.engines import LOCAL_ENGINE_NAMES, LOCAL_ENGINES
    from nip.settings import LocalEngine

    assert set(typing.get_args(LocalEngine)) == set(LOCAL_ENGINE_NAMES)
    assert set(LOCAL_ENGINE_NAMES) == {"auto", *LOCAL_ENGINES}  # auto picks one of them


# -------------------------------------------------------------------------- trainers
def test_every_trainer_name_a_configuration_accepts_has_an_algorithm_and_no_other():
    assert set(typing.get_args(TrainerType)) == set(ALGORITHMS)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_trainer_runs_the_algorithm_the_table_names(name, tmp_path):
    agents = {a: PureTextAgentParameters(use_dummy_api=True) for a in ("prover", "verifier")}
    params = HyperParameters(trainer=name, agents=agents)
    settings = ExperimentSettings(run_dir=tmp_path / "run", show_progress=False, cache="off")
    trainer = build_trainer(params, settings)
    assert trainer.algorithm is ALGORITHMS[name]
    assert {it.algorithm for it in trainer.plan} == {ALGORITHMS[name].name}


# -------------------------------------------------------------------------- datasets
def test_every_shipped_dataset_name_the_configuration_accepts_has_a_file():
    assert set(SHIPPED_DATASETS) == set(SHIPPED_DATASET_NAMES)
    assert all(path.is_file() for path in SHIPPED_DATASETS.values())


# ------------------------------------------------------------------- decision words
def test_a_decision_has_one_word_used_by_prompts_transcripts_and_plots():
    assert [d.word for d in Decision] == ["reject", "accept", "no decision", "neither"]


# ----------------------------------------------------------------- lazy attributes
def test_a_lazy_attribute_of_a_package_loads_its_module_only_when_first_used():
    code = (
        "import sys, nip\n"
        "print('nip.session' in sys.modules, 'Session' in dir(nip))\n"
        "nip.Session\n"
        "print('nip.session' in sys.modules)\n"
        "try:\n"
        "    nip.NoSuchThing\n"
        "except AttributeError as error:\n"
        "    print(error)\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert output == ["False True", "True", "module 'nip' has no attribute 'NoSuchThing'"]


# ---------------------------------------------------------------------------- layers
def _package(module: str) -> str:
    """``nip.backends.pool`` -> ``nip.backends``; ``nip`` itself stays ``nip``."""
    return ".".join(module.split(".")[:2])


def test_no_package_of_nip_is_in_an_import_cycle_with_another():
    """Function-level imports count: grimp reads every import statement, wherever it is.

    The layers contract (``lint-imports``) already forbids upward imports between the layers;
    this also covers what it leaves out, the ``nip`` package itself and ``nip.testing``.
    """
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("nip", cache_dir=None)
    imports: dict[str, set[str]] = {}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if _package(module) != _package(imported):
                imports.setdefault(_package(module), set()).add(_package(imported))

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in imports.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    in_cycles = sorted(package for package in imports if package in reaches(package))
    assert in_cycles == []
