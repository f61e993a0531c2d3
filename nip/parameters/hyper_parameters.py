"""``HyperParameters``: the whole configuration of an experiment."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field, model_validator

from nip._version import __version__
from nip.errors import IncompatibleParametersError, InvalidParameterError
from nip.parameters._base import BaseParameters
from nip.parameters.agents import PureTextAgentParameters
from nip.parameters.protocol import (
    PROTOCOL_AGENT_NAMES,
    PROTOCOL_ONLY_SETTINGS,
    CommonProtocolParameters,
    DebateProtocolParameters,
    InteractionProtocolType,
    MnipProtocolParameters,
    NipProtocolParameters,
    is_shipped_protocol,
    protocol_agent_names,
)
from nip.parameters.providers import PROVIDER_FACTS, providers_where
from nip.parameters.scenario import (
    SHIPPED_DATASET_SPLITS,
    CodeValidationParameters,
    dataset_kind,
    refuse_inapplicable,
)
from nip.parameters.trainers import (
    PureTextEiParameters,
    PureTextMaltParameters,
    RlParameters,
    TextRlParameters,
)

TrainerType = Literal["pure_text_ei", "pure_text_malt"]

#: Version of the parameter schema. A saved run whose major version differs cannot be loaded;
#: a different minor version loads with a warning.
PARAMETERS_SCHEMA_VERSION = "1.1"

#: The dataset shipped with nip (mutated HumanEval solutions, labels checked by execution).
DEFAULT_DATASET = "humaneval_cv"

#: The names of the datasets shipped with nip (their files: ``nip.data.SHIPPED_DATASETS``).
SHIPPED_DATASET_NAMES = tuple(SHIPPED_DATASET_SPLITS)


class HyperParameters(BaseParameters):
    """Everything that defines an experiment: protocol, agents (missing ones get defaults),
    trainer, data and seed. Example::

        HyperParameters(
            interaction_protocol="debate",
            agents={"verifier": PureTextAgentParameters.local_default()},
        )
    """

    scenario: Literal["code_validation"] = Field("code_validation", description="The task.")
    trainer: TrainerType = Field(
        "pure_text_ei", description="Expert Iteration (pure_text_ei) or MALT (pure_text_malt)."
    )
    dataset: str = Field(
        DEFAULT_DATASET,
        description="A shipped dataset, a Hub id (lrhammond/buggy-apps), or a file or folder path.",
    )
    interaction_protocol: InteractionProtocolType | str = Field(
        "nip",
        description="The interaction protocol: a shipped one, or the name of one defined in your "
        "code (its class is passed at run time, its agents named in agents).",
    )
    seed: int = Field(6198, description="Seed of every random choice in the run.")
    agents: dict[str, PureTextAgentParameters] = Field(
        default_factory=dict, description="Parameters of each agent, by agent name."
    )
    rl: RlParameters = Field(default_factory=RlParameters, description="Run length.")
    text_rl: TextRlParameters = Field(
        default_factory=TextRlParameters, description="Options shared by the text trainers."
    )
    pure_text_ei: PureTextEiParameters = Field(
        default_factory=PureTextEiParameters, description="Expert Iteration."
    )
    pure_text_malt: PureTextMaltParameters = Field(
        default_factory=PureTextMaltParameters, description="MALT."
    )
    protocol_common: CommonProtocolParameters = Field(
        default_factory=CommonProtocolParameters,
        description="Rewards and options of every protocol.",
    )
    nip_protocol: NipProtocolParameters = Field(
        default_factory=NipProtocolParameters, description="The nip protocol."
    )
    debate_protocol: DebateProtocolParameters = Field(
        default_factory=DebateProtocolParameters, description="The debate protocol."
    )
    mnip_protocol: MnipProtocolParameters = Field(
        default_factory=MnipProtocolParameters, description="The mnip protocol."
    )
    code_validation: CodeValidationParameters = Field(
        default_factory=CodeValidationParameters, description="Which items of the dataset to use."
    )

    @model_validator(mode="before")
    @classmethod
    def _with_every_agent(cls, data: Any) -> Any:
        """A shipped protocol's agents missing from ``agents`` get default parameters."""
        protocol = data.get("interaction_protocol", "nip") if isinstance(data, dict) else None
        agents = data.get("agents") or {} if isinstance(data, dict) else None
        if not isinstance(agents, Mapping) or not is_shipped_protocol(str(protocol)):
            return data
        missing = [n for n in protocol_agent_names(str(protocol)) if n not in agents]
        return {**data, "agents": {**agents, **{n: PureTextAgentParameters() for n in missing}}}

    def validate(self) -> None:
        self._check_custom_protocol()
        agent_names = self.agent_names
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
        self._check_protocol_only_settings()
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
        self._check_fine_tunable()
        self._check_learning_rate()
        self._check_dataset()
        self._check_templates_exist()

    def _check_protocol_only_settings(self) -> None:
        """Refuse a :data:`PROTOCOL_ONLY_SETTINGS` value a shipped protocol would ignore."""
        name = self.interaction_protocol
        if not is_shipped_protocol(name):
            return  # a protocol of one's own: its handler class refuses it when built
        for field, inert, _, applies, why in PROTOCOL_ONLY_SETTINGS:
            if getattr(self.protocol_common, field) == inert and name not in applies:
                raise InvalidParameterError(
                    f"protocol_common.{field}",
                    inert,
                    f"{not inert} for interaction_protocol={name!r} "
                    f"(it applies to {', '.join(sorted(applies))})",
                    reason=f"{why.format(name=name)}, so the setting would do nothing",
                )

    def _check_fine_tunable(self) -> None:
        """Reject trainable agents of providers that cannot fine-tune (before paid sampling)."""
        if self.rl.num_iterations <= 1:
            return  # the last iteration submits no job
        can = ", ".join(n for n, p in PROVIDER_FACTS.items() if p.can_fine_tune)
        for name, agent in self.agents.items():
            if not PROVIDER_FACTS[agent.model_provider].can_fine_tune:
                if agent.freeze_agent or agent.use_dummy_api:
                    continue  # nothing to train, or the dummy fine-tuning backend stands in
                provider = agent.model_provider
                raise InvalidParameterError(
                    f"agents.{name}.freeze_agent",
                    False,
                    f"True for an {provider} agent when rl.num_iterations > 1",
                    reason=(
                        f"{provider} cannot fine-tune models; set freeze_agent=True for "
                        f"agent {name!r}, or use a provider that can ({can})"
                    ),
                )

    def _check_learning_rate(self) -> None:
        """Refuse ``rl.lr`` changed where no trainable agent's provider is sent a learning
        rate (``providers_where("rl.lr")``)."""
        default = type(self.rl)().lr
        if self.rl.lr == default:
            return
        trainable = {n: a for n, a in self.agents.items() if not a.freeze_agent}
        if any(PROVIDER_FACTS[a.model_provider].applies("rl.lr") for a in trainable.values()):
            return
        who = ", ".join(f"{n} ({a.model_provider})" for n, a in trainable.items()) or "none"
        raise InvalidParameterError(
            "rl.lr",
            self.rl.lr,
            f"{default!r} unless a trainable agent's provider is one of "
            f"{', '.join(providers_where('rl.lr'))}",
            reason=f"it does nothing in this run: no trainable agent (trainable: {who}) is on "
            "a provider that is sent a learning rate (OpenAI agents: set "
            "openai_learning_rate_multiplier)",
        )

    def _check_templates_exist(self) -> None:
        for name, agent in self.agents.items():
            path = agent.system_prompt_template_path
            if path is not None and not Path(path).is_file():
                raise InvalidParameterError(
                    f"agents.{name}.system_prompt_template_path",
                    path,
                    "None (the built-in template) or the path of a template file",
                    reason="no such file",
                )

    def _check_dataset(self) -> None:
        """The dataset exists (or is a Hub id) and every changed option applies to it."""
        kind = dataset_kind(self.dataset)
        options = self.code_validation
        family = {"shipped": "flat", "hub": "apps"}.get(kind)
        if family is not None:
            refuse_inapplicable(options, family, self.dataset, prefix="code_validation.")
        if options.dataset_revision is not None and kind != "hub":
            raise InvalidParameterError(
                "code_validation.dataset_revision",
                options.dataset_revision,
                "None for a dataset that is not on the Hugging Face Hub",
                reason=f"{self.dataset!r} is not a Hub dataset, so it has no revision",
            )
        split = self.text_rl.test_dataset_split
        if kind == "shipped" and split not in SHIPPED_DATASET_SPLITS[self.dataset]:
            raise InvalidParameterError(
                "text_rl.test_dataset_split",
                split,
                ", ".join(map(repr, SHIPPED_DATASET_SPLITS[self.dataset])),
                reason=f"{self.dataset!r} has no {split!r} split",
            )

    def _check_custom_protocol(self) -> None:
        """A protocol defined in user code is known here by its name and its agents only."""
        name = self.interaction_protocol
        if is_shipped_protocol(name):
            return
        if not name.isidentifier():
            raise InvalidParameterError(
                "interaction_protocol", name, "a shipped protocol, or a Python identifier"
            )
        if not self.agents:
            raise InvalidParameterError(
                "interaction_protocol",
                name,
                "one of " + ", ".join(map(repr, PROTOCOL_AGENT_NAMES)),
                reason=f"no shipped protocol is called {name!r}; for a protocol of your own, "
                "name its agents in `agents` and pass its class at run time "
                "(Session(..., protocol=...))",
            )

    @property
    def agent_names(self) -> tuple[str, ...]:
        """The protocol's agents, in its order (for a protocol of one's own: ``agents``)."""
        if is_shipped_protocol(self.interaction_protocol):
            return protocol_agent_names(self.interaction_protocol)
        return tuple(self.agents)

    def to_dict(self) -> dict[str, Any]:
        """As :meth:`BaseParameters.to_dict`, stamped with the schema and package versions."""
        return {
            "_schema_version": PARAMETERS_SCHEMA_VERSION,
            "_nip_version": __version__,
            **super().to_dict(),
        }

    @classmethod
    def from_dict(
        cls, params_dict: Mapping[str, Any], ignore_extra_keys: bool = False, *, force: bool = False
    ) -> Self:
        """As :meth:`BaseParameters.from_dict`, checking the ``_schema_version`` stamp (a dict
        without one is not) and dropping the original's ``is_random: false`` agent keys.

        Raises:
            IncompatibleParametersError: The stamp's major version differs (unless ``force``).
            UnknownKeyError: A key matches no field and ``ignore_extra_keys`` is False.
            InvalidParameterError: A value is not allowed.

        Warns:
            UserWarning: The stamp's minor version differs.
        """
        if isinstance(params_dict, Mapping) and "_schema_version" in params_dict:
            try:
                check_compatibility(dict(params_dict))
            except IncompatibleParametersError:
                if not force:
                    raise
            params_dict = _upgrade_from_1_0(params_dict)
        return super().from_dict(_drop_is_random(params_dict), ignore_extra_keys)

    def with_overrides(self, overrides: Mapping[str, Any], *, from_text: bool = False) -> Self:
        """A copy with each dotted path set to its value, validated like a file.

        ``params.with_overrides({"agents.prover.model_name": "gpt-4o-2024-08-06",
        "rl.num_iterations": 4})``; ``from_text=True`` reads string values with YAML's
        scalar rules, as ``nip run --set PATH=VALUE`` does (:mod:`nip.parameters.overrides`).

        Raises:
            InvalidParameterError: A path names no parameter, or a value is not allowed.
        """
        from nip.parameters.overrides import apply_overrides

        return apply_overrides(self, overrides, from_text=from_text)

    @classmethod
    def construct_test_params(cls) -> HyperParameters:
        """Dummy-API agents and a tiny run: offline and fast."""
        return cls(
            agents={
                name: PureTextAgentParameters.construct_test_params()
                for name in protocol_agent_names("nip")
            },
            rl=RlParameters(num_iterations=2, rollouts_per_iteration=4),
        )


def _upgrade_from_1_0(params_dict: Mapping[str, Any]) -> Mapping[str, Any]:
    """A schema-1.0 dict as 1.1 reads it with the same behaviour (MALT keeps ``leaf_mean``)."""
    if params_dict.get("_schema_version") != "1.0":
        return params_dict
    malt = params_dict.get("pure_text_malt")
    malt = dict(malt) if isinstance(malt, Mapping) else {}
    malt.setdefault("expected_reward_estimator", "leaf_mean")
    return {**params_dict, "pure_text_malt": malt}


def _drop_is_random(params_dict: Any) -> Any:
    """``params_dict`` without the original's ``agents.<name>.is_random: false`` keys."""
    if not isinstance(params_dict, Mapping) or not isinstance(params_dict.get("agents"), Mapping):
        return params_dict
    agents = dict(params_dict["agents"])
    for name, agent in agents.items():
        if isinstance(agent, Mapping) and agent.get("is_random", True) is False:
            agents[name] = {k: v for k, v in agent.items() if k != "is_random"}
    return {**params_dict, "agents": agents}


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


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema of a configuration file (:class:`HyperParameters` as YAML or JSON), for
    an editor to check as it is typed; relations between fields are checked at load time."""
    from nip.parameters._base import BaseParameters, _find_subclass

    schema = HyperParameters.model_json_schema()
    definitions = schema.get("$defs", {})
    for name, definition in list(definitions.items()):
        cls = _find_subclass(BaseParameters, name)
        kinds = [*cls.__subclasses__()] if cls is not None else []
        if kinds:  # a field of a class with kinds to choose from (update_schedule) holds any
            description = definition.get("description", "")
            definitions[name] = {"anyOf": [k.model_json_schema() for k in kinds]}
            definitions[name]["description"] = description
    objects = [schema, *definitions.values()]
    objects += [kind for d in definitions.values() for kind in d.get("anyOf", [])]
    for part in (p for p in objects if p.get("type") == "object"):
        part["properties"]["_type"] = {"const": part["title"]}  # the class; other _ keys free
        part["patternProperties"] = {"^_": {}}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
