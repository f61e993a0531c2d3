"""``HyperParameters``: the whole configuration of an experiment."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Literal

from nip.errors import IncompatibleParametersError, InvalidParameterError
from nip.parameters._base import BaseParameters, param
from nip.parameters.agents import PureTextAgentParameters
from nip.parameters.protocol import (
    CommonProtocolParameters,
    DebateProtocolParameters,
    MnipProtocolParameters,
    NipProtocolParameters,
)
from nip.parameters.scenario import CodeValidationParameters
from nip.parameters.trainers import (
    PureTextEiParameters,
    PureTextMaltParameters,
    RlParameters,
    TextRlParameters,
)

InteractionProtocolType = Literal["nip", "adp", "debate", "merlin_arthur", "mnip", "solo_verifier"]
TrainerType = Literal["pure_text_ei", "pure_text_malt"]

#: Version of the parameter schema. A saved run whose major version differs cannot be loaded;
#: a different minor version loads with a warning.
PARAMETERS_SCHEMA_VERSION = "1.0"

#: The dataset shipped with nip (mutated HumanEval solutions, labels checked by execution).
DEFAULT_DATASET = "humaneval_cv"


@dataclass
class HyperParameters(BaseParameters):
    """Everything that defines an experiment: protocol, agents, trainer, data and seed.

    Agents missing from ``agents`` get default parameters; an agent the protocol does not
    have is an error. Example::

        HyperParameters(
            interaction_protocol="debate",
            agents={"verifier": PureTextAgentParameters.local_default()},
        )
    """

    scenario: Literal["code_validation"] = param("code_validation", doc="The task.")
    trainer: TrainerType = param(
        "pure_text_ei", doc="Expert Iteration (pure_text_ei) or MALT (pure_text_malt)."
    )
    dataset: str = param(DEFAULT_DATASET, doc="A shipped dataset's name or a JSONL/parquet path.")
    interaction_protocol: InteractionProtocolType = param("nip", doc="The interaction protocol.")
    seed: int = param(6198, doc="Seed of every random choice in the run.")
    agents: dict[str, PureTextAgentParameters] = param(
        default_factory=dict, doc="Parameters of each agent, by agent name."
    )
    rl: RlParameters = param(default_factory=RlParameters, doc="Run length.")
    text_rl: TextRlParameters = param(
        default_factory=TextRlParameters, doc="Options shared by the text trainers."
    )
    pure_text_ei: PureTextEiParameters = param(
        default_factory=PureTextEiParameters, doc="Expert Iteration."
    )
    pure_text_malt: PureTextMaltParameters = param(
        default_factory=PureTextMaltParameters, doc="MALT."
    )
    protocol_common: CommonProtocolParameters = param(
        default_factory=CommonProtocolParameters, doc="Rewards and options of every protocol."
    )
    nip_protocol: NipProtocolParameters = param(
        default_factory=NipProtocolParameters, doc="The nip protocol."
    )
    debate_protocol: DebateProtocolParameters = param(
        default_factory=DebateProtocolParameters, doc="The debate protocol."
    )
    mnip_protocol: MnipProtocolParameters = param(
        default_factory=MnipProtocolParameters, doc="The mnip protocol."
    )
    code_validation: CodeValidationParameters = param(
        default_factory=CodeValidationParameters, doc="Which items of the dataset to use."
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        from nip.protocols import protocol_class

        for name in protocol_class(self.interaction_protocol).agent_names:
            if name not in self.agents:
                self.agents[name] = PureTextAgentParameters()

    def validate(self) -> None:
        from nip.protocols import protocol_class

        agent_names = protocol_class(self.interaction_protocol).agent_names
        for name in self.agents:
            if name not in agent_names:
                raise InvalidParameterError(
                    "agents",
                    name,
                    f"agents of {self.interaction_protocol!r}: {', '.join(agent_names)}",
                    reason=f"{self.interaction_protocol!r} has no agent {name!r}",
                )
        from nip.parameters.groups import check_group_agreement

        check_group_agreement(self)
        malt = self.pure_text_malt
        if (
            self.trainer == "pure_text_malt"
            and malt.num_initial_ei_iterations > self.rl.num_iterations
        ):
            raise InvalidParameterError(
                "pure_text_malt.num_initial_ei_iterations",
                malt.num_initial_ei_iterations,
                f"at most rl.num_iterations={self.rl.num_iterations}",
            )

    @property
    def agent_names(self) -> tuple[str, ...]:
        """The protocol's agents, in its order."""
        from nip.protocols import protocol_class

        return protocol_class(self.interaction_protocol).agent_names

    def to_dict(self) -> dict[str, Any]:
        """As :meth:`BaseParameters.to_dict`, stamped with the schema and package versions."""
        from nip import __version__

        return {
            "_schema_version": PARAMETERS_SCHEMA_VERSION,
            "_nip_version": __version__,
            **super().to_dict(),
        }

    @classmethod
    def construct_test_params(cls) -> HyperParameters:
        """Dummy-API agents and a tiny run: offline and fast."""
        from nip.protocols import protocol_class

        return cls(
            agents={
                name: PureTextAgentParameters.construct_test_params()
                for name in protocol_class("nip").agent_names
            },
            rl=RlParameters(num_iterations=2, rollouts_per_iteration=4),
        )


def check_compatibility(saved: dict[str, Any], current: str = PARAMETERS_SCHEMA_VERSION) -> None:
    """Check that parameters saved by ``to_dict`` can be read by this version of nip.

    Raises:
        IncompatibleParametersError: The schema's major version differs (or is missing).

    Warns:
        UserWarning: The minor version differs.
    """
    version = saved.get("_schema_version")
    if not isinstance(version, str) or "." not in version:
        raise IncompatibleParametersError(
            "the saved parameters have no schema version; they were not written by nip"
        )
    saved_major, saved_minor = version.split(".", 1)
    major, minor = current.split(".", 1)
    if saved_major != major:
        raise IncompatibleParametersError(
            f"saved parameters use schema {version}, this nip reads schema {current}"
        )
    if saved_minor != minor:
        warnings.warn(
            f"saved parameters use schema {version}, this nip uses {current}; "
            "fields added since then take their defaults",
            stacklevel=2,
        )
