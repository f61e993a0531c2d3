"""Every setting acts: change it, and the run changes (or the configuration is refused).

For every field of every parameters class and of ``ServerConfig`` there is one case below: a
valid value other than the default and what it changes, seen from outside the code that
reads it:

* ``requests``: the requests the agents send in a session's first dialogues (a recording
  backend in front of the deterministic dummy one);
* ``transcripts``: those dialogues as recorded (stances, rewards, decisions, messages);
* ``providers``: where an agent's requests and fine-tuning jobs go;
* ``jobs``: the fine-tuning jobs a short dummy training run submits (base model, method,
  hyper-parameters and every training line, as the fine-tuning backend receives them);
* ``run``: what a short dummy run does (the stages' files: rollouts, tests, transcripts, and
  the expected rewards of MALT's trees);
* ``server``: how ``nip serve`` starts vLLM and its training processes;
* ``server jobs``: how ``nip serve`` runs two jobs submitted at once (how many train, how
  often they are polled), seen through its HTTP API;
* ``refused``: building the configuration raises an ``InvalidParameterError`` naming the field.

Each case compares the run with the value against the same run without it (``context``: the
settings the field needs to act at all, in both runs). The base run is small (two iterations
of four dialogues of at most three rounds, dummy agents, an 18-item dataset); where it sets a
field for speed (``rl``, ``max_message_rounds``, ``min_fine_tune_examples``,
``reward_threshold``), that field's case compares against the base's value.

A field must act wherever it can: each case runs under every algorithm (Expert Iteration and
MALT: a MALT run's requests and dialogues are those its tree sampling sends and grows), unless
it belongs to one (``pure_text_ei.*``, guess replacement: Expert Iteration; a case whose
``context`` names its trainer: that one), and in every protocol where it acts when it acts in
some only (``PROTOCOLS_OF``). A case that ran under Expert Iteration alone passed while MALT's
sampling dropped ``temperature``; ``test_a_field_ignored_by_one_trainer_alone_fails_its_case``
shows that it no longer would.

A field whose effect can only be seen elsewhere (a W&B address, a timing, a Hub dataset, the
server's own address) is in ``SHOWN_ELSEWHERE`` with the test that shows it. A new field with
neither fails ``test_every_field_has_a_behavioural_case``, naming it.
"""

from __future__ import annotations

import asyncio
import atexit
import copy
import dataclasses
import inspect
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest

import nip.parameters as parameters_package
from nip.backends import Completion, GenerationResult
from nip.errors import InvalidParameterError
from nip.parameters import BaseParameters, HyperParameters
from nip.server.config import ServerConfig
from nip.settings import ExperimentSettings
from nip.training.cost_estimate import plan_run

pytestmark = pytest.mark.timeout(120)

TESTS = Path(__file__).parent

Shows = Literal[
    "plan",
    "requests",
    "transcripts",
    "providers",
    "jobs",
    "run",
    "server",
    "server jobs",
    "refused",
]


#: Stands for the directory of a finished run (an earlier run to start from).
EARLIER_RUN = "<earlier run>"
#: Stands for a custom system prompt template file.
TEMPLATE = "<template file>"


@dataclasses.dataclass(frozen=True)
class Case:
    """One setting changed, and where the change shows.

    Attributes:
        address: The field's address in ``HyperParameters`` (``agents.verifier.temperature``)
            or, for ``nip serve``, ``server.<field>``.
        value: A valid value other than the default (for ``refused``: the refused value).
        shows: Where the run with ``value`` differs from the run without it.
        context: Settings of both runs, without which the field has nothing to act on.
        together: Settings that must change with the field (``lora_alpha`` needs
            ``lora_alpha_scale=None``).
        invalid_from: An agent whose every response the backend makes unusable.
        jobs_fail: Every fine-tuning job fails.
        label: Added to the test id where one field has several cases.
    """

    address: str
    value: Any
    shows: Shows
    context: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    together: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    invalid_from: str | None = None
    jobs_fail: bool = False
    label: str = ""

    @property
    def id(self) -> str:
        return f"{self.address} ({self.label})" if self.label else self.address


V = "agents.verifier"
P = "agents.prover"
MALT = {"trainer": "pure_text_malt"}
THREE_ITERATIONS = {"rl.num_iterations": 3}
WEIGHTED = {
    "pure_text_ei.rollout_selection_method": "weighted_sampling",
    "rl.rollouts_per_iteration": 12,
}
SELF_HOSTED = {f"{V}.model_provider": "SelfHosted"}
DEBATE = {"interaction_protocol": "debate"}
MNIP = {"interaction_protocol": "mnip"}
CONTIGUOUS = {f"{V}.update_schedule": {"_type": "ContiguousPeriodicUpdateSchedule"}}
ALTERNATING = {f"{V}.update_schedule": {"_type": "AlternatingPeriodicUpdateSchedule"}}
FOUR_ITERATIONS = {"rl.num_iterations": 4}
ANNEALED = {
    "text_rl.verifier_guess_replacement_proportion": 0.8,
    "text_rl.verifier_guess_replacement_annealing": "linear",
}
CUDA = {"server.device": "cuda"}

CASES: tuple[Case, ...] = (
    # ------------------------------------------------------------ HyperParameters
    Case("scenario", "graph_isomorphism", "refused"),
    Case("trainer", "pure_text_malt", "jobs"),
    Case("dataset", "humaneval_cv", "requests"),
    Case("interaction_protocol", "debate", "requests"),
    Case("seed", 1, "requests"),
    # ------------------------------------------------------ PureTextAgentParameters
    Case(
        f"{V}.update_schedule",
        {"_type": "AlternatingPeriodicUpdateSchedule", "first_on": False},
        "jobs",
    ),
    Case(
        f"{V}.load_checkpoint_and_parameters",
        True,
        "jobs",
        together={f"{V}.checkpoint_run_id": EARLIER_RUN},
    ),
    Case(f"{V}.checkpoint_run_id", "runs/first", "refused"),
    Case(f"{V}.checkpoint_version", "v3", "refused"),
    Case(f"{V}.model_provider", "SelfHosted", "providers", context={f"{V}.use_dummy_api": False}),
    Case(f"{V}.model_name", "gpt-4.1-mini", "requests"),
    Case(f"{V}.vllm_server_port", 9000, "refused"),
    Case(f"{V}.use_dummy_api", False, "providers"),
    Case(
        f"{V}.shared_model_group",
        "shared",
        "jobs",
        together={f"{P}.shared_model_group": "shared"},
    ),
    Case(f"{V}.temperature", 0.3, "requests"),
    Case(f"{V}.top_p", 0.5, "requests"),
    Case(f"{V}.repetition_penalty", 1.2, "requests"),
    Case(f"{V}.freeze_agent", True, "jobs"),
    Case(f"{V}.system_prompt_template_path", TEMPLATE, "requests"),
    Case(f"{V}.use_supervisor_message", "all", "requests"),
    Case(
        f"{V}.supervisor_name",
        "Referee",
        "requests",
        context={f"{V}.use_supervisor_message": "all"},
    ),
    Case(f"{V}.max_response_words", 40, "requests"),
    Case(f"{V}.max_tokens_per_message", 50, "requests"),
    Case(f"{V}.num_invalid_generation_retries", 1, "requests", invalid_from="verifier"),
    # ------------------------------------------------------------ update schedules
    Case(f"{V}.update_schedule.period", 3, "jobs", context={**CONTIGUOUS, **FOUR_ITERATIONS}),
    Case(
        f"{V}.update_schedule.update_iterations",
        0,
        "jobs",
        context={**CONTIGUOUS, **FOUR_ITERATIONS},
    ),
    Case(f"{V}.update_schedule.start", 1, "jobs", context={**CONTIGUOUS, **FOUR_ITERATIONS}),
    Case(
        f"{V}.update_schedule.period",
        2,
        "jobs",
        context={**ALTERNATING, **FOUR_ITERATIONS},
        label="alternating",
    ),
    Case(
        f"{V}.update_schedule.first_on", False, "jobs", context={**ALTERNATING, **FOUR_ITERATIONS}
    ),
    # ---------------------------------------------------------------- RlParameters
    Case("rl.num_iterations", 3, "jobs"),
    Case("rl.rollouts_per_iteration", 3, "plan"),
    Case("rl.num_test_iterations", 2, "run"),
    Case("rl.num_epochs", 2, "jobs"),
    # ------------------------------------------------------------ TextRlParameters
    Case("text_rl.fine_tune_on_all_previous_rollouts", True, "jobs", context=THREE_ITERATIONS),
    Case("text_rl.verifier_guess_replacement_proportion", 1.0, "jobs"),
    Case(
        "text_rl.verifier_guess_replacement_annealing",
        "linear",
        "jobs",
        context={"text_rl.verifier_guess_replacement_proportion": 0.8, **THREE_ITERATIONS},
    ),
    Case(
        "text_rl.verifier_guess_replacement_annealing_rate",
        0.9,
        "jobs",
        context={**ANNEALED, **THREE_ITERATIONS},
    ),
    Case("text_rl.save_transcripts", False, "run"),
    Case("text_rl.transcript_format", "markdown", "run"),
    Case("text_rl.test_scheme", "all", "run"),
    Case("text_rl.test_dataset_split", "validation", "run"),
    Case("text_rl.test_on_whole_dataset", False, "run", context={"rl.rollouts_per_iteration": 2}),
    Case("text_rl.min_fine_tune_examples", 1000, "jobs"),
    Case("text_rl.on_fine_tune_failure", "keep_previous", "jobs", jobs_fail=True),
    Case("text_rl.max_fine_tune_retries", 1, "jobs", jobs_fail=True),
    # -------------------------------------------------------- PureTextEiParameters
    Case(
        "pure_text_ei.rollout_selection_method",
        "weighted_sampling",
        "jobs",
        context={"rl.rollouts_per_iteration": 12},
    ),
    Case("pure_text_ei.reward_threshold", -1.0, "jobs"),
    Case("pure_text_ei.weighting_minimum", 1.0, "jobs", context=WEIGHTED),
    Case("pure_text_ei.weighting_epsilon", 0.9, "jobs", context=WEIGHTED),
    Case("pure_text_ei.weighting_sample_size_factor", 2.0, "jobs", context=WEIGHTED),
    Case(
        "pure_text_ei.weighting_use_replacement",
        False,
        "jobs",
        context={**WEIGHTED, "pure_text_ei.weighting_sample_size_factor": 1.0},
    ),
    # ------------------------------------------------------ PureTextMaltParameters
    Case("pure_text_malt.num_responses_per_timestep", 3, "jobs", context=MALT),
    Case(
        "pure_text_malt.frozen_agents_generate_one_response",
        False,
        "jobs",
        context={**MALT, f"{P}.freeze_agent": True},
    ),
    Case("pure_text_malt.pair_selection_method", "interval", "jobs", context=MALT),
    Case(
        "pure_text_malt.interval_threshold_proportion",
        0.6,
        "jobs",
        context={**MALT, "pure_text_malt.pair_selection_method": "interval"},
    ),
    Case("pure_text_malt.num_initial_ei_iterations", 1, "jobs", context=MALT),
    Case(
        "pure_text_malt.expected_reward_estimator",
        "leaf_mean",
        "run",
        context={
            **MALT,
            "nip_protocol.max_message_rounds": 4,
            "protocol_common.verifier_no_guess_reward": 0.5,
        },
    ),
    # ---------------------------------------------------- CommonProtocolParameters
    Case("protocol_common.verifier_reward", 2.0, "transcripts"),
    Case("protocol_common.verifier_incorrect_penalty", -2.0, "transcripts"),
    Case(
        "protocol_common.verifier_terminated_penalty",
        -3.0,
        "transcripts",
        invalid_from="verifier",
    ),
    Case("protocol_common.verifier_no_guess_reward", 0.1, "transcripts"),
    Case("protocol_common.prover_reward", 2.0, "transcripts"),
    Case("protocol_common.shared_reward", True, "transcripts"),
    Case("protocol_common.force_guess", "one", "transcripts"),
    Case("protocol_common.verifier_first", False, "requests"),
    *(
        Case(
            "protocol_common.verifier_first",
            False,
            "refused",
            context={"interaction_protocol": protocol},
            label=protocol,
        )
        for protocol in ("adp", "merlin_arthur")  # solo_verifier: tests/test_protocols.py
    ),
    Case("protocol_common.randomize_prover_stance", True, "transcripts"),
    Case(
        "protocol_common.randomize_prover_stance",
        True,
        "refused",
        context=DEBATE,
        label="debate",
    ),
    Case(
        "protocol_common.randomize_prover_stance",
        True,
        "refused",
        context={"interaction_protocol": "merlin_arthur"},
        label="merlin_arthur",
    ),
    Case("protocol_common.verifier_decision_scale", "likert_5", "requests"),
    Case(
        "protocol_common.prover_invalid_response_penalty",
        -2.0,
        "transcripts",
        invalid_from="prover",
    ),
    # -------------------------------------------------------- protocol lengths
    Case("nip_protocol.max_message_rounds", 2, "requests"),
    Case("nip_protocol.min_message_rounds", 3, "requests"),
    Case("debate_protocol.max_message_rounds", 2, "requests", context=DEBATE),
    Case("debate_protocol.min_message_rounds", 3, "requests", context=DEBATE),
    Case("debate_protocol.sequential", True, "requests", context=DEBATE),
    Case(
        "debate_protocol.prover0_first",
        False,
        "requests",
        context={
            **DEBATE,
            "debate_protocol.sequential": True,
            "debate_protocol.max_message_rounds": 6,
        },
    ),
    Case("debate_protocol.randomize_channel_order", False, "requests", context=DEBATE),
    Case("mnip_protocol.max_message_rounds", 2, "requests", context=MNIP),
    Case("mnip_protocol.min_message_rounds", 3, "requests", context=MNIP),
    Case("mnip_protocol.sequential", True, "requests", context=MNIP),
    Case(
        "mnip_protocol.prover0_first",
        False,
        "requests",
        context={**MNIP, "mnip_protocol.sequential": True, "mnip_protocol.max_message_rounds": 6},
    ),
    Case("mnip_protocol.randomize_channel_order", False, "requests", context=MNIP),
    # ---------------------------------------------------- CodeValidationParameters
    Case("code_validation.difficulty", "hard", "requests"),
    Case("code_validation.max_train_size", 2, "requests"),
    Case("code_validation.max_test_size", 1, "run"),
    # ------------------------------------------------------------------ ServerConfig
    Case("server.storage_dir", "/srv/nip", "server"),
    Case("server.model", "/models/Qwen2.5-0.5B-Instruct", "server"),
    Case("server.served_model_name", "verifier-base", "server"),
    Case("server.engine", "none", "server"),
    Case("server.device", "cuda", "server"),
    Case("server.vllm_python", "/opt/vllm/bin/python", "server"),
    Case("server.max_lora_rank", 32, "server"),
    Case("server.max_loras", 2, "server"),
    Case("server.max_cpu_loras", 32, "server"),
    Case("server.gpu_sharing", "pause", "server", context=CUDA),
    Case("server.gpu_memory_utilization", 0.7, "server", context=CUDA),
    Case("server.tensor_parallel_size", 2, "server"),
    Case("server.data_parallel_size", 2, "server"),
    Case("server.dtype", "float16", "server"),  # auto is float32 or bfloat16 on a CPU
    Case("server.quantization", "bitsandbytes", "server", context=CUDA),
    Case("server.max_model_len", 4096, "server"),
    Case("server.enforce_eager", True, "server"),
    Case("server.vllm_args", ["--seed", "1"], "server"),
    Case("server.cpu_kv_cache_gib", 4, "server", context={"server.device": "cpu"}),
    Case("server.inference_devices", "0", "server"),
    Case("server.training_devices", "1", "server"),
    Case("server.training_processes", 2, "server"),
    Case("server.accelerate_config", "/etc/accelerate.yaml", "server"),
    Case("server.max_concurrent_jobs", 2, "server jobs"),
    Case("server.poll_interval_s", 0.05, "server jobs"),
)

# --------------------------------------------------------------- where each case runs
#: Where a case's change shows without a trainer: it runs once.
TRAINER_FREE: tuple[Shows, ...] = ("providers", "server", "server jobs", "refused")
#: Fields of one algorithm, by the start of their address: their cases run under it alone.
EXPERT_ITERATION_ONLY = ("pure_text_ei.", "text_rl.verifier_guess_replacement")
#: Fields that act in some protocols only: their cases run in each of them.
PROTOCOLS_OF: Mapping[str, tuple[str, ...]] = {
    "protocol_common.randomize_prover_stance": ("nip", "adp", "mnip"),
    "protocol_common.verifier_first": ("nip", "debate", "mnip"),
}


@dataclasses.dataclass(frozen=True)
class Variant:
    """A case under one algorithm and protocol: its context says which."""

    case: Case
    context: Mapping[str, Any]
    labels: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        labels = [label for label in (self.case.label, *self.labels) if label]
        return f"{self.case.address} ({', '.join(labels)})" if labels else self.case.address


def variants(case: Case) -> list[Variant]:
    """``case`` under every algorithm and protocol where its field can act (the first, under
    Expert Iteration on the base protocol, keeps the case's own id)."""
    one_trainer = (
        case.shows in TRAINER_FREE
        or case.address == "trainer"
        or "trainer" in case.context
        or case.address.startswith(EXPERT_ITERATION_ONLY)
    )
    trainers = [None] if one_trainer else [None, "pure_text_malt"]
    protocols = [None]
    if "interaction_protocol" not in case.context and case.address in PROTOCOLS_OF:
        protocols = [p if p != "nip" else None for p in PROTOCOLS_OF[case.address]]
    found = []
    for protocol in protocols:
        for trainer in trainers:
            context = dict(case.context)
            if protocol:
                context["interaction_protocol"] = protocol
            if trainer:
                context["trainer"] = trainer
            found.append(Variant(case, context, tuple(x for x in (protocol, trainer) if x)))
    return found


#: The settings whose effect depends on the agent's provider (the table of
#: ``nip.parameters.providers``), each with a value other than its default, where it shows and
#: what it needs. The table decides each provider's case: where the setting applies, the
#: verifier's jobs as that provider sends them (the plan holds each job's request as sent;
#: it is made without a key and sends nothing) or where its requests go differ; elsewhere the
#: configuration is refused, naming the field.
PROVIDER_SETTING_CASES: Mapping[str, tuple[Any, Shows, Mapping[str, Any]]] = {
    "language_model_server_scheme_host": ("http://gpu-box", "providers", {}),
    "language_model_server_port": (5001, "providers", {}),
    "quantization": ("bitsandbytes", "plan", {}),
    "num_epochs": (3, "plan", {}),
    "per_device_train_batch_size": (4, "plan", {}),
    "use_lora": (False, "plan", {}),
    "lora_rank": (8, "plan", {}),
    "lora_alpha": (16, "plan", {f"{V}.lora_alpha_scale": None}),
    "lora_alpha_scale": (2.0, "plan", {}),
    "lora_dropout": (0.1, "plan", {}),
    "stack_lora_adapters": (True, "plan", THREE_ITERATIONS),
    "fine_tune_from_scratch": (False, "plan", THREE_ITERATIONS),
    "openai_n_epochs": (3, "plan", {}),
    "openai_batch_size": (4, "plan", {}),
    "openai_learning_rate_multiplier": (0.5, "plan", {}),
    "dpo_beta": (0.5, "plan", MALT),
    "rl.lr": (1e-3, "plan", {}),
}


def provider_setting_cases() -> tuple[Case, ...]:
    """One case per provider-dependent setting and provider, as the table says."""
    from nip.parameters import PROVIDER_FACTS

    cases = []
    for setting, (value, shows, needs) in PROVIDER_SETTING_CASES.items():
        address = setting if "." in setting else f"{V}.{setting}"
        together = {k: v for k, v in needs.items() if k == f"{V}.lora_alpha_scale"}
        for provider, facts in PROVIDER_FACTS.items():
            context = {
                f"{V}.model_provider": provider,
                f"{V}.use_dummy_api": False,
                f"{P}.freeze_agent": True,  # the verifier's jobs alone decide
                f"{V}.freeze_agent": not facts.can_fine_tune,  # else refused for that
                **{k: v for k, v in needs.items() if k not in together},
            }
            refused = not facts.applies(setting) or (setting == "use_lora" and facts.lora_only)
            shown: Shows = "refused" if refused else shows
            cases.append(Case(address, value, shown, context, together, label=provider))
    return tuple(cases)


CASES = CASES + provider_setting_cases()
#: Fields whose effect is outside what a run or a server's launch shows (a network address,
#: a W&B address, a timing, a Hub dataset), with the test that shows it.
SHOWN_ELSEWHERE: Mapping[str, str] = {
    "PureTextAgentParameters.checkpoint_entity": (
        "test_checkpoint_start.py::test_with_wandb_online_an_agent_starts_from_a_runs_artifact"
    ),
    "PureTextAgentParameters.checkpoint_project": (
        "test_checkpoint_start.py::test_with_wandb_online_an_agent_starts_from_a_runs_artifact"
    ),
    "CodeValidationParameters.apps_difficulty": (
        "test_data_buggy_apps.py::"
        "test_the_apps_difficulty_defaults_to_interview_and_all_keeps_every_tier"
    ),
    "CodeValidationParameters.apps_exclude_flagged": (
        "test_data_buggy_apps.py::"
        "test_flagged_problems_are_dropped_and_empty_flags_mean_not_flagged"
    ),
    "CodeValidationParameters.dataset_revision": (
        "test_data_buggy_apps.py::test_a_run_on_a_hub_dataset_records_the_revision_it_used"
    ),
    "TextRlParameters.fine_tune_retry_backoff_s": (
        "test_fine_tune_failure.py::"
        "test_resuming_a_stopped_run_resubmits_the_job_and_never_waits_on_the_failed_one"
    ),
    "ServerConfig.host": (
        "test_server_selfhosted.py::test_a_server_beyond_loopback_refuses_to_start_without_a_token"
    ),
    "ServerConfig.port": (
        "test_server_selfhosted.py::test_nip_serve_starts_answers_and_stops_on_sigterm"
    ),
    "ServerConfig.vllm_port": (
        "test_server_engines.py::test_a_job_trained_through_the_server_is_served_by_vllm_at_run_time"
    ),
    "ServerConfig.vllm_startup_timeout_s": (
        "test_server_engines.py::test_a_vllm_that_never_gets_ready_fails_after_the_time_out"
    ),
    "ServerConfig.vllm_max_restarts": (
        "test_server_engines.py::test_vllm_is_restarted_after_a_crash_and_its_adapters_are_loaded_again"
    ),
}


# ----------------------------------------------------------------- the fields
def parameter_classes() -> list[type[BaseParameters]]:
    """Every parameters class defined in nip.parameters, and ServerConfig."""
    found: set[type[BaseParameters]] = {ServerConfig}
    for module in Path(parameters_package.__file__).parent.glob("*.py"):
        name = f"nip.parameters.{module.stem}".removesuffix(".__init__")
        imported = __import__(name, fromlist=["_"])
        for _, cls in inspect.getmembers(imported, inspect.isclass):
            public = cls is not BaseParameters and not cls.__name__.startswith("_")  # no mixins
            if issubclass(cls, BaseParameters) and public:
                found.add(cls)
    return sorted(found, key=lambda c: c.__name__)


def is_container(cls: type[BaseParameters], name: str) -> bool:
    """Whether a field only holds other parameters (``rl``, ``agents``): its own fields have
    cases. A field whose class has subclasses to choose from (``update_schedule``) has one."""
    tp = cls.model_fields[name].annotation
    if get_origin(tp) is dict:
        tp = get_args(tp)[1]
    return isinstance(tp, type) and issubclass(tp, BaseParameters) and not tp.__subclasses__()


def all_fields() -> set[str]:
    return {
        f"{cls.__name__}.{name}"
        for cls in parameter_classes()
        for name in cls.model_fields
        if not is_container(cls, name)
    }


def covered_field(case: Case) -> str:
    """``Class.field`` that ``case`` changes, found by walking its address."""
    parent, name = case.address.rsplit(".", 1) if "." in case.address else ("", case.address)
    if parent == "server":
        return f"ServerConfig.{name}"
    params = build(case.context)
    holder = params.get(parent) if parent else params
    return f"{type(holder).__name__}.{name}"


# ----------------------------------------------------------- building a run
DATA_DIR = Path(tempfile.mkdtemp(prefix="nip-settings-"))
atexit.register(shutil.rmtree, DATA_DIR, True)


@cache
def tiny_dataset() -> str:
    """12 train, 4 test and 2 validation items, half correct, two tiers of difficulty."""
    splits = ["train"] * 12 + ["test"] * 4 + ["validation"] * 2
    rows = [
        {
            "id": f"item{i}",
            "question": f"Return {i} plus the argument.",
            "solution": f"def f(x):\n    return x + {i + i % 2}\n",
            "y": 1 - i % 2,
            "split": split,
            "difficulty": "hard" if i % 3 else "easy",
            "source_task_id": f"task{i}",
        }
        for i, split in enumerate(splits)
    ]
    path = DATA_DIR / "tiny.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@cache
def custom_template() -> str:
    path = DATA_DIR / "verifier.txt"
    path.write_text(
        "You check code. Ask the prover about it, then write 'Decision: accept/reject'."
    )
    return str(path)


def base_settings() -> dict[str, Any]:
    """A small dummy run: two iterations of four dialogues of at most three rounds."""
    return {
        "dataset": tiny_dataset(),
        "agents": {name: {"use_dummy_api": True} for name in ("prover", "verifier")},
        "nip_protocol": {"max_message_rounds": 3},
        "debate_protocol": {"max_message_rounds": 3},
        "mnip_protocol": {"max_message_rounds": 3},
        "rl": {"num_iterations": 2, "rollouts_per_iteration": 4},
        "text_rl": {"min_fine_tune_examples": 1, "fine_tune_retry_backoff_s": 0.0},
        "pure_text_ei": {"reward_threshold": 0.5},
    }


def set_address(tree: dict[str, Any], address: str, value: Any) -> None:
    *parents, name = address.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    if isinstance(value, Mapping) and "_type" in value:
        tree[name] = dict(value)
    elif isinstance(value, Mapping) and isinstance(tree.get(name), dict):
        tree[name].update(value)
    else:
        tree[name] = value


def resolve(value: Any) -> Any:
    if value == TEMPLATE:
        return custom_template()
    if value == EARLIER_RUN:
        return str(earlier_run())
    return value


def build(settings: Mapping[str, Any]) -> HyperParameters:
    """The parameters of the base run with ``settings`` (addresses to values) applied."""
    tree = copy.deepcopy(base_settings())
    protocol = settings.get("interaction_protocol")
    if protocol in ("debate", "mnip", "merlin_arthur"):
        tree["agents"] = {n: {"use_dummy_api": True} for n in ("prover0", "prover1", "verifier")}
    for address, value in settings.items():
        if not address.startswith("server."):
            set_address(tree, address, resolve(value))
    return HyperParameters.from_dict(tree)


# ------------------------------------------------------------------- observing
class RecordingBackend:
    """A chat backend in front of another that records every request; it can make one
    agent's every response unusable (the provider's content filter blocked it)."""

    name = "recording"

    def __init__(self, inner: Any, requests: list, invalid_from: str | None = None):
        self.inner = inner
        self.requests = requests
        self.invalid_from = invalid_from

    async def generate(self, request):
        self.requests.append(request)
        if request.metadata.get("agent") == self.invalid_from:
            blocked = Completion("", "content_filter")
            return GenerationResult(completions=(blocked,) * request.n)
        return await self.inner.generate(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def request_record(request) -> str:
    fields = ("model", "messages", "max_tokens", "temperature", "top_p", "repetition_penalty")
    record = {f: getattr(request, f) for f in fields} | {"n": request.n, "seed": request.seed}
    return json.dumps(record, sort_keys=True, default=list)


def transcript_record(transcript) -> str:
    return json.dumps(
        {
            "item": transcript.datapoint.id,
            "stances": transcript.stances,
            "rewards": transcript.rewards,
            "decision": str(transcript.decision),
            "terminated": transcript.terminated,
            "messages": [(m.round, m.channel, m.sender, m.content) for m in transcript.messages],
        },
        sort_keys=True,
        default=str,
    )


def session_observation(settings: Mapping[str, Any], invalid_from: str | None) -> dict:
    """The requests and transcripts of a session's first four dialogues."""
    from nip.session import Session

    session = Session(build(settings), ExperimentSettings(show_progress=False, cache="off"))
    requests: list = []
    for agent in session.agents.values():
        agent.backend = RecordingBackend(agent.backend, requests, invalid_from)
    try:
        batch = session.rollouts(n=4)
    finally:
        session.close()
    return {
        "requests": sorted(map(request_record, requests)),
        "transcripts": [transcript_record(t) for t in batch.transcripts],
    }


def sampling_observation(settings: Mapping[str, Any], invalid_from: str | None) -> dict:
    """The requests and dialogues of a run's first sampling stage (MALT: its trees' requests,
    and the dialogues of their leaves)."""
    from nip.training.trainer import build_trainer

    run_dir = Path(tempfile.mkdtemp(dir=DATA_DIR, prefix="sampling-"))
    run_settings = ExperimentSettings(
        run_dir=run_dir, show_progress=False, cache="off", wandb_mode="disabled"
    )
    trainer = build_trainer(build(settings), run_settings)
    requests: list = []
    for agent in trainer.session.agents.values():
        agent.backend = RecordingBackend(agent.backend, requests, invalid_from)
    try:
        trainer.train(max_stages=1)
    finally:
        trainer.session.close()
    return {
        "requests": sorted(map(request_record, requests)),
        "transcripts": [transcript_record(t) for t in trainer.run_dir.load_rollouts("train", 0)],
    }


def providers_observation(settings: Mapping[str, Any]) -> dict:
    """Where each agent's requests go, and which backend runs its fine-tuning jobs."""
    from nip.providers import provider_for
    from nip.providers.pool import endpoint_key

    params = build(settings)
    # A provider's fine-tuning backend is the one its provider module builds.
    return {
        "providers": {
            name: (provider_for(agent).name, endpoint_key(agent))
            for name, agent in params.agents.items()
        }
    }


def run_observation(settings: Mapping[str, Any], invalid_from: str | None, jobs_fail: bool):
    """A whole short dummy run: the jobs it submits and the files it writes."""
    from nip.parameters.groups import group_members
    from nip.training.trainer import build_trainer
    from tests.doubles.fine_tuning import ScriptedFineTuneBackend

    params = build(settings)
    run_dir = Path(tempfile.mkdtemp(dir=DATA_DIR, prefix="run-"))
    jobs = ScriptedFineTuneBackend(always_fail=jobs_fail)
    run_settings = ExperimentSettings(
        run_dir=run_dir, show_progress=False, cache="off", wandb_mode="disabled"
    )
    trainer = build_trainer(
        params, run_settings, fine_tune_backends={g: jobs for g in group_members(params)}
    )
    trainer.poll_interval_s = 0.01
    requests: list = []
    for agent in trainer.session.agents.values():
        agent.backend = RecordingBackend(agent.backend, requests, invalid_from)
    try:
        trainer.train()
    except Exception as error:  # a run stopped by a failed job is an outcome too
        outcome = type(error).__name__
    else:
        outcome = "done"
    finally:
        trainer.session.close()
    specs = [spec.to_dict() | {"seed": None} for spec in jobs.specs.values()]
    return {
        "jobs": json.dumps(specs, sort_keys=True, default=str),
        "run": {
            "outcome": outcome,
            "files": sorted(
                p.relative_to(run_dir).as_posix()
                for p in run_dir.rglob("*")
                if p.is_file() and p.parent.name in ("rollouts", "transcripts", "fine_tune")
            ),
            "expected rewards": [
                [node.get("expected_reward") for node in json.loads(line)["nodes"]]
                for path in sorted((run_dir / "malt").glob("trees_*.jsonl"))
                for line in path.read_text().splitlines()
            ],
            "test rollouts": sorted(
                (p.name, len(p.read_text().splitlines()))
                for p in (run_dir / "rollouts").glob("test_*")
            ),
        },
    }


@cache
def earlier_run() -> Path:
    """A finished dummy run to start from."""
    from nip.training.trainer import build_trainer

    run_dir = DATA_DIR / "earlier"
    settings = ExperimentSettings(run_dir=run_dir, show_progress=False, wandb_mode="disabled")
    trainer = build_trainer(build({}), settings)
    trainer.train()
    trainer.session.close()
    return run_dir


def server_observation(settings: Mapping[str, Any]) -> dict:
    """How ``nip serve`` would start: vLLM's command and environment, which engine, and how
    training processes are launched."""
    from nip.server.app import build_engine, build_fine_tune_backend
    from nip.server.vllm_engine import vllm_launch

    values = {a.removeprefix("server."): v for a, v in settings.items() if a.startswith("server.")}
    config = ServerConfig(**{"device": "cpu", **values})
    model = Path(config.model)
    engine = build_engine(config, model, DATA_DIR) if config.engine != "auto" else None
    training = build_fine_tune_backend(config)
    launch = vllm_launch(config, model, config.vllm_python or "python")
    environment = launch.environment_for("token")
    return {
        "server": {
            "vllm command": launch.command(8001),
            "vllm environment": {
                k: environment.get(k)
                for k in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_SERVER_DEV_MODE", "CUDA_VISIBLE_DEVICES")
            },
            "engine": type(engine).__name__ if engine else "auto",
            "training": (
                str(training.jobs_dir),
                training.processes,
                training.accelerate_config,
                training.env,
            ),
        }
    }


class HoldingFineTuneBackend:
    """A training backend whose jobs run until the server stops; counts polls."""

    name = "holding"

    def __init__(self):
        self.started: list[str] = []
        self.polls = 0

    async def create_job(self, spec):
        self.started.append(spec.job_name)
        return f"held-{len(self.started)}"

    async def get_job(self, job_id: str):
        from nip.jobs import FineTuneJob

        self.polls += 1
        return FineTuneJob(job_id, "running")

    async def cancel_job(self, job_id: str) -> None:
        return None

    async def list_events(self, job_id: str) -> list:
        return []


def server_jobs_observation(settings: Mapping[str, Any]) -> dict:
    """Two jobs submitted at once to ``nip serve`` (on loopback): how many start training,
    and whether running jobs are polled more than twice in 0.6 s."""
    from nip.jobs import FineTuneSpec
    from nip.jobs.self_hosted import SelfHostedFineTuneBackend
    from nip.server.app import create_server_app
    from nip.testing.server import serve

    root = Path(tempfile.mkdtemp(dir=DATA_DIR, prefix="server-"))
    (root / "base").mkdir()
    values = {a.removeprefix("server."): v for a, v in settings.items() if a.startswith("server.")}
    config = ServerConfig(
        **{"model": str(root / "base"), "engine": "none", "storage_dir": str(root), **values}
    )
    line = {"messages": [{"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}]}
    training = HoldingFineTuneBackend()

    async def submit_two(url: str) -> None:
        client = SelfHostedFineTuneBackend(url)
        for name in ("first", "second"):
            await client.create_job(FineTuneSpec("base", "supervised", (line,), job_name=name))
        await asyncio.sleep(0.6)

    with serve(create_server_app(config, fine_tune_backend=training)) as server:
        asyncio.run(submit_two(server.url))
    return {"server jobs": (len(training.started), training.polls > 2)}


_observed: dict[str, dict] = {}


def observe(case: Case, settings: Mapping[str, Any]) -> Any:
    """What ``case.shows`` looks like in a run with ``settings`` (computed once).

    Requests and dialogues are a session's under Expert Iteration (its sampling plays the
    session's dialogues) and the first sampling stage's under MALT (its trees).
    """
    kind = {"requests": "session", "transcripts": "session"}.get(case.shows, case.shows)
    kind = {"jobs": "run"}.get(kind, kind)
    if kind == "session" and build(settings).trainer == "pure_text_malt":
        kind = "sampling"
    key = json.dumps(
        [kind, case.invalid_from, case.jobs_fail, settings], sort_keys=True, default=str
    )
    if key not in _observed:
        if kind == "plan":
            _observed[key] = {"plan": plan_run(build(settings)).to_dict()}
        elif kind == "session":
            _observed[key] = session_observation(settings, case.invalid_from)
        elif kind == "sampling":
            _observed[key] = sampling_observation(settings, case.invalid_from)
        elif kind == "providers":
            _observed[key] = providers_observation(settings)
        elif kind == "server":
            _observed[key] = server_observation(settings)
        elif kind == "server jobs":
            _observed[key] = server_jobs_observation(settings)
        else:
            _observed[key] = run_observation(settings, case.invalid_from, case.jobs_fail)
    return _observed[key][case.shows]


# ------------------------------------------------------------------------ tests
def changes_the_run(variant: Variant) -> bool:
    """Whether the run with the case's value differs from the run without it (a refused case:
    whether building it raises an error naming the field)."""
    case = variant.case
    changed = {**variant.context, **case.together, case.address: case.value}
    if case.shows == "refused":
        try:
            if case.address.startswith("server."):
                ServerConfig(**{case.address.removeprefix("server."): case.value})
            else:
                build(changed)
        except InvalidParameterError as refused:
            return refused.field.endswith(case.address.rsplit(".", 1)[-1])
        return False
    return observe(case, changed) != observe(case, dict(variant.context))


@pytest.mark.parametrize("variant", [pytest.param(v, id=v.id) for c in CASES for v in variants(c)])
def test_setting_changes_the_run(variant: Variant):
    case = variant.case
    assert changes_the_run(variant), (
        f"{variant.id}={case.value!r} changed nothing in the {case.shows}"
        if case.shows != "refused"
        else f"{variant.id}={case.value!r} was not refused naming the field"
    )


def test_a_field_ignored_by_one_trainer_alone_fails_its_case(monkeypatch):
    """A copy of nip whose MALT sampling drops ``temperature`` (its requests sample ``n`` at
    once; Expert Iteration's ask for one): the Expert Iteration case passes, as it did when it
    was the only one, and the MALT case fails."""
    from nip.agents import PureTextWholeAgent

    make_request = PureTextWholeAgent.make_request

    def malt_drops_temperature(self, *args, n: int = 1, **kwargs):
        request = make_request(self, *args, n=n, **kwargs)
        return dataclasses.replace(request, temperature=None) if n > 1 else request

    monkeypatch.setattr(PureTextWholeAgent, "make_request", malt_drops_temperature)
    monkeypatch.setattr(sys.modules[__name__], "_observed", {})  # this copy's own observations
    (case,) = [c for c in CASES if c.address == f"{V}.temperature"]
    expert_iteration, malt = variants(case)
    assert malt.context == {"trainer": "pure_text_malt"}
    assert changes_the_run(expert_iteration)
    assert not changes_the_run(malt)


def test_every_field_has_a_behavioural_case():
    covered = {covered_field(c) for c in CASES} | set(SHOWN_ELSEWHERE)
    missing = sorted(all_fields() - covered)
    assert not missing, (
        "no behavioural case for: "
        + ", ".join(missing)
        + " (add a Case to CASES in tests/test_settings_behaviour.py that changes the field "
        "and shows what differs, or an entry to SHOWN_ELSEWHERE naming the test that does)"
    )


def test_the_cases_and_the_table_name_only_existing_fields():
    known = all_fields()
    assert {covered_field(c) for c in CASES} <= known
    assert set(SHOWN_ELSEWHERE) <= known


@pytest.mark.parametrize("field", sorted(SHOWN_ELSEWHERE))
def test_a_field_shown_elsewhere_names_a_test_that_exists(field):
    module, name = SHOWN_ELSEWHERE[field].split("::")
    source = (TESTS / module).read_text(encoding="utf-8")
    assert re.search(rf"^def {name}\(", source, re.MULTILINE), f"{field}: no test {name}"
