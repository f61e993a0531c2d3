"""Typed configuration on pydantic, validated at construction and on assignment, with
``to_dict`` / ``from_dict`` / ``get("a.b.c")`` / ``construct_test_params`` / ``save`` / ``load``."""

from nip.parameters._base import BaseParameters, FieldInfo
from nip.parameters.agents import DEFAULT_LOCAL_MODEL, PureTextAgentParameters
from nip.parameters.hyper_parameters import (
    DEFAULT_DATASET,
    PARAMETERS_SCHEMA_VERSION,
    SHIPPED_DATASET_NAMES,
    HyperParameters,
    check_compatibility,
    config_json_schema,
)
from nip.parameters.protocol import (
    PROTOCOL_AGENT_NAMES,
    CommonProtocolParameters,
    DebateProtocolParameters,
    InteractionProtocolType,
    MnipProtocolParameters,
    NipProtocolParameters,
    is_shipped_protocol,
    protocol_agent_names,
)
from nip.parameters.providers import PROVIDER_FACTS, ProviderFacts
from nip.parameters.scenario import CodeValidationParameters
from nip.parameters.trainers import (
    PureTextEiParameters,
    PureTextMaltParameters,
    RlParameters,
    TextRlParameters,
)
from nip.parameters.update_schedule import (
    AgentUpdateSchedule,
    AlternatingPeriodicUpdateSchedule,
    ConstantUpdateSchedule,
    ContiguousPeriodicUpdateSchedule,
)

__all__ = [
    "DEFAULT_DATASET",
    "DEFAULT_LOCAL_MODEL",
    "PARAMETERS_SCHEMA_VERSION",
    "PROTOCOL_AGENT_NAMES",
    "PROVIDER_FACTS",
    "SHIPPED_DATASET_NAMES",
    "AgentUpdateSchedule",
    "AlternatingPeriodicUpdateSchedule",
    "BaseParameters",
    "CodeValidationParameters",
    "CommonProtocolParameters",
    "ConstantUpdateSchedule",
    "ContiguousPeriodicUpdateSchedule",
    "DebateProtocolParameters",
    "FieldInfo",
    "HyperParameters",
    "InteractionProtocolType",
    "MnipProtocolParameters",
    "NipProtocolParameters",
    "ProviderFacts",
    "PureTextAgentParameters",
    "PureTextEiParameters",
    "PureTextMaltParameters",
    "RlParameters",
    "TextRlParameters",
    "check_compatibility",
    "config_json_schema",
    "is_shipped_protocol",
    "protocol_agent_names",
]
