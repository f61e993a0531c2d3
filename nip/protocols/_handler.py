"""The protocol handler: who speaks when, who sees what, when the verifier decides, rewards.

Every answer depends only on the parameters, the round and the dialogue's ``seed``. An episode
ends, terminated, after the verifier's last round without a decision, so :meth:`num_rounds`
may be one less than ``max_message_rounds``. A protocol of one's own is a subclass passed at
run time (``Session(params, protocol=MyProtocol)``); the configuration records only its name.
"""

from __future__ import annotations

import html
import random
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from nip.errors import InvalidParameterError, ProtocolDefinitionError, ProtocolUsageError
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.parameters.protocol import (
    PROTOCOL_AGENT_NAMES,
    PROTOCOL_ONLY_SETTINGS,
    CommonProtocolParameters,
    is_shipped_protocol,
)
from nip.prompts import PromptTemplate, load_system_template
from nip.protocols._spec import AgentSpec, ChannelSpec, Decision, StepOutcome
from nip.protocols.decision_scales import DecisionScale, decision_scale

#: An agent's turn: the channels it writes to in a round.
Speakers = Mapping[str, tuple[str, ...]]

VERIFIER = "verifier"
#: The channel of a protocol with one channel that every agent reads.
MAIN = "main"

#: The score of a decision given without one (and of a decision ``force_guess`` replaced).
_DEFAULT_SCORES = {Decision.REJECT: -1.0, Decision.ACCEPT: 1.0, Decision.NEITHER: 0.0}


class ProtocolHandler(ABC):
    """Base class of the interaction protocols.

    Subclasses set ``name`` and ``agent_names``, build their agents (:meth:`_build_agents`),
    optionally channels (:meth:`_build_channels`), and say who speaks each round
    (:meth:`speakers`); notebooks/02_protocols_tour.ipynb defines one (``TwoQuestions``).
    """

    #: The protocol's name in configuration (``interaction_protocol``).
    name: ClassVar[str]
    #: The agents' names, known without building the handler (used to validate configs; a
    #: shipped protocol's come from ``PROTOCOL_AGENT_NAMES``).
    agent_names: ClassVar[tuple[str, ...]]
    #: Whether ``randomize_prover_stance`` applies (False for debate's fixed sides); refused
    #: otherwise. A shipped protocol's comes from ``PROTOCOL_ONLY_SETTINGS``, as does:
    stance_can_be_randomized: ClassVar[bool] = False
    #: Whether ``protocol_common.verifier_first`` sets who opens; refused otherwise.
    verifier_first_applies: ClassVar[bool] = False
    #: The ``HyperParameters`` field of this protocol's own parameters, if any.
    params_field: ClassVar[str | None] = None
    #: The most rounds an episode may last, for a protocol whose constructor does not pass it.
    max_message_rounds: int
    #: System prompt templates by agent: text, or the ``Path`` of a template file. An agent
    #: not listed uses ``nip/prompts/templates/system/<name>/<agent>.txt``.
    system_prompts: ClassVar[Mapping[str, str | Path]] = MappingProxyType({})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if is_shipped_protocol(cls.__dict__.get("name", "")):
            cls.agent_names = PROTOCOL_AGENT_NAMES[cls.name]
            for setting in PROTOCOL_ONLY_SETTINGS:
                setattr(cls, setting.declared_by, cls.name in setting.acts_in)

    def __init__(
        self,
        common: CommonProtocolParameters | None = None,
        *,
        max_message_rounds: int | None = None,
        min_message_rounds: int = 0,
    ):
        name = type(self).__name__
        if max_message_rounds is None:
            max_message_rounds = getattr(type(self), "max_message_rounds", None)
        if not isinstance(max_message_rounds, int) or max_message_rounds < 1:
            raise ProtocolDefinitionError(
                f"{name}: max_message_rounds must be a whole number of at least 1 (a class "
                f"attribute, or passed by the constructor), got {max_message_rounds!r}"
            )
        self.common = common or CommonProtocolParameters()
        self.check_protocol_only_settings(self.common)
        self.max_message_rounds = max_message_rounds
        self.min_message_rounds = min_message_rounds
        self.agents: tuple[AgentSpec, ...] = self._build_agents()
        self.channels: tuple[ChannelSpec, ...] = self._build_channels()
        built = tuple(a.name for a in self.agents)
        if built != self.agent_names:
            raise ProtocolDefinitionError(
                f"{name}.agent_names is {self.agent_names}, but it builds the agents {built}"
            )
        unknown = set(self.system_prompts) - set(built)
        if unknown:
            raise ProtocolDefinitionError(
                f"{name}.system_prompts names no agent of the protocol: {sorted(unknown)}"
            )

    @abstractmethod
    def _build_agents(self) -> tuple[AgentSpec, ...]: ...

    def _build_channels(self) -> tuple[ChannelSpec, ...]:
        """One channel, ``main``, that every agent reads (override for more)."""
        return (ChannelSpec(MAIN, frozenset(self.agent_names)),)

    @abstractmethod
    def speakers(self, round_id: int, seed: int = 0) -> Speakers:
        """The agents that speak in ``round_id`` and the channels each writes to."""

    @property
    def prover_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.agents if a.is_prover)

    @property
    def channel_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.channels)

    def agent(self, name: str) -> AgentSpec:
        """The spec of the agent called ``name``."""
        spec = next((spec for spec in self.agents if spec.name == name), None)
        if spec is not None:
            return spec
        raise ProtocolUsageError(
            f"{self.name} has no agent {name!r}; its agents are {self.agent_names}"
        )

    def active_agents(self, round_id: int, seed: int = 0) -> tuple[str, ...]:
        """The agents that speak in ``round_id``, in the protocol's agent order."""
        speaking = self.speakers(round_id, seed)
        return tuple(name for name in self.agent_names if name in speaking)

    def visible_channels(self, agent_name: str) -> tuple[str, ...]:
        """The channels ``agent_name`` can read, in the protocol's channel order."""
        self.agent(agent_name)
        return tuple(c.name for c in self.channels if agent_name in c.visible_to)

    def channel_order(self, agent_name: str, round_id: int, seed: int = 0) -> tuple[str, ...]:
        """The order in which ``agent_name`` reads its visible channels in ``round_id``."""
        return self.visible_channels(agent_name)

    def system_prompt_template(self, agent_name: str) -> PromptTemplate:
        """``agent_name``'s system prompt template (raises ``PromptTemplateError``)."""
        self.agent(agent_name)
        source = self.system_prompts.get(agent_name)
        if source is None or isinstance(source, Path):
            return load_system_template(self.name, agent_name, source)
        return PromptTemplate(source, f"{type(self).__name__}.system_prompts[{agent_name!r}]")

    @classmethod
    def check_protocol_only_settings(cls, common: CommonProtocolParameters) -> None:
        """Refuse a :data:`PROTOCOL_ONLY_SETTINGS` value that would do nothing here."""
        for field, inert, declared_by, _, why in PROTOCOL_ONLY_SETTINGS:
            if getattr(common, field) == inert and not getattr(cls, declared_by):
                raise InvalidParameterError(
                    f"protocol_common.{field}",
                    inert,
                    f"{not inert} for interaction_protocol={cls.name!r}",
                    reason=f"{cls.__name__}.{declared_by} is False: "
                    f"{why.format(name=cls.name)}, so the setting would do nothing",
                )

    @classmethod
    def hyper_parameters(cls, **fields: Any) -> HyperParameters:
        """``HyperParameters(**fields)`` for this protocol, with defaults for missing agents."""
        given = dict(fields.pop("agents", {}))
        agents = {
            name: given.pop(name, None) or PureTextAgentParameters() for name in cls.agent_names
        }
        agents |= given  # an agent the protocol does not have: refused by the configuration
        params = HyperParameters(interaction_protocol=cls.name, agents=agents, **fields)
        cls.check_protocol_only_settings(params.protocol_common)
        return params

    @cached_property
    def _verifier_rounds(self) -> tuple[int, ...]:
        return tuple(
            r for r in range(self.max_message_rounds) if VERIFIER in self.speakers(r, seed=0)
        )

    @cached_property
    def last_decision_round(self) -> int:
        """The verifier's last chance to decide; the episode is terminated after it."""
        if not self._verifier_rounds:
            raise ProtocolDefinitionError(f"{self.name}: the verifier never speaks")
        return self._verifier_rounds[-1]

    def num_rounds(self) -> int:
        """The most rounds an episode can last."""
        return self.last_decision_round + 1

    def can_decide(self, round_id: int, seed: int = 0) -> bool:
        """Whether the verifier may decide: it speaks, in its last or a round >= min_rounds - 1."""
        if VERIFIER not in self.speakers(round_id, seed):
            return False
        if round_id == self.last_decision_round:
            return True
        return round_id >= self.min_message_rounds - 1

    def is_last_turn(self, agent_name: str, round_id: int) -> bool:
        """Whether ``round_id`` is ``agent_name``'s last turn (used for last-turn prompts)."""
        turns = [r for r in range(self.num_rounds()) if agent_name in self.speakers(r, seed=0)]
        return bool(turns) and round_id == turns[-1]

    @property
    def max_verifier_questions(self) -> int:
        """The verifier's turns in a full episode; prompts offer one fewer questions."""
        return len(self._verifier_rounds)

    def prover_stance(self, agent_name: str, datapoint_stance: int | None = None) -> int:
        """The decision prover ``agent_name`` argues for (0 reject, 1 accept) on a datapoint:
        ``datapoint_stance`` where stances are randomised, else its default."""
        spec = self.agent(agent_name)
        if spec.is_verifier or spec.default_stance is None:
            raise ProtocolUsageError(f"{agent_name!r} is not a prover of {self.name}")
        if (
            self.common.randomize_prover_stance
            and self.stance_can_be_randomized
            and datapoint_stance is not None
        ):
            return int(datapoint_stance)
        return spec.default_stance

    @cached_property
    def decision_scale(self) -> DecisionScale:
        """What the verifier writes after ``Decision:`` (``verifier_decision_scale``)."""
        return decision_scale(self.common.verifier_decision_scale)

    def prover_decision_reward(self, stance: int, score: float) -> float:
        """A prover's reward, in [0, prover_reward], for a decision ``score`` in [-1, 1].

        ``(±score / 2 + 0.5) * prover_reward``, + for a prover arguing accept (see docs/design.md).
        """
        signed = score if stance == 1 else -score
        return (signed / 2 + 0.5) * self.common.prover_reward

    def step(
        self,
        round_id: int,
        decision: int | Decision,
        y: int,
        *,
        seed: int = 0,
        datapoint_stance: int | None = None,
        score: float | None = None,
        invalid_provers: Collection[str] = (),
    ) -> StepOutcome:
        """Score one round.

        Args:
            round_id: The round just played.
            decision: The verifier's decision this round (``Decision.NONE`` if it did not
                decide or did not speak).
            y: The true label (1 the solution is correct, 0 it is not).
            score: The verifier's score in [-1, 1]; by default ±1 or 0 for neither.
            invalid_provers: Provers still invalid after every retry; with
                ``prover_invalid_response_penalty`` set, they get it and the episode ends.

        Raises:
            ValueError: A decision was given in a round where the verifier may not decide.
        """
        decision = Decision(decision)
        common = self.common
        penalty = common.prover_invalid_response_penalty
        rewards = dict.fromkeys(self.agent_names, 0.0)
        if penalty is not None and invalid_provers:
            rewards |= dict.fromkeys(invalid_provers, penalty)
            return StepOutcome(True, True, Decision.NONE, rewards)
        done = terminated = False
        if decision is not Decision.NONE:
            if not self.can_decide(round_id, seed):
                raise ProtocolUsageError(
                    f"{self.name}: the verifier may not decide in round {round_id}"
                )
            forced = self._forced(decision, y)
            if forced is not decision or score is None:
                score = _DEFAULT_SCORES[forced]
            decision = forced
            done = True
            rewards[VERIFIER] = (
                common.verifier_reward if decision == y else common.verifier_incorrect_penalty
            )
            for prover in self.prover_names:
                stance = self.prover_stance(prover, datapoint_stance)
                rewards[prover] = self.prover_decision_reward(stance, score)
        elif round_id >= self.last_decision_round:
            done = terminated = True
            rewards[VERIFIER] = common.verifier_terminated_penalty
        elif VERIFIER in self.speakers(round_id, seed):
            rewards[VERIFIER] = common.verifier_no_guess_reward
        if common.shared_reward:
            rewards |= dict.fromkeys(self.prover_names, rewards[VERIFIER])
        return StepOutcome(
            done=done,
            terminated=terminated,
            decision=decision,
            rewards=rewards,
            score=score if done and not terminated else None,
        )

    def _forced(self, decision: Decision, y: int) -> Decision:
        forced = {"zero": Decision.REJECT, "one": Decision.ACCEPT, "y": Decision(int(y))}
        return forced.get(self.common.force_guess, decision)

    def possible_episode_rewards(self, agent_name: str) -> tuple[float, ...]:
        """Every episode reward ``agent_name`` can end with (sorted, distinct)."""
        common = self.common
        self.agent(agent_name)
        turns = self._verifier_rounds
        decision_turns = [i for i, r in enumerate(turns) if self.can_decide(r)]
        verifier_returns = [
            i * common.verifier_no_guess_reward + outcome
            for i in decision_turns
            for outcome in (common.verifier_reward, common.verifier_incorrect_penalty)
        ]
        verifier_returns.append(
            (len(turns) - 1) * common.verifier_no_guess_reward + common.verifier_terminated_penalty
        )
        if agent_name == VERIFIER or common.shared_reward:
            returns = set(verifier_returns)
            if self.prover_names and common.prover_invalid_response_penalty is not None:
                # Cut short by a prover after any number of verifier turns without a decision.
                returns |= {i * common.verifier_no_guess_reward for i in range(len(turns))}
        else:
            points = self.decision_scale.points
            returns = {0.0} | {
                self.prover_decision_reward(stance, p.score) for p in points for stance in (0, 1)
            }
        if agent_name != VERIFIER and common.prover_invalid_response_penalty is not None:
            returns.add(common.prover_invalid_response_penalty)
        return tuple(sorted(returns))

    def min_reward(self, agent_name: str) -> float:
        """The lowest episode reward ``agent_name`` can get (MALT's interval method)."""
        return self.possible_episode_rewards(agent_name)[0]

    def max_reward(self, agent_name: str) -> float:
        """The highest episode reward ``agent_name`` can get."""
        return self.possible_episode_rewards(agent_name)[-1]

    def reward_mid_point(self, agent_name: str) -> float:
        """Half-way between the lowest and highest episode reward (MALT's threshold)."""
        return (self.min_reward(agent_name) + self.max_reward(agent_name)) / 2

    def schedule(self, seed: int = 0) -> list[dict[str, str]]:
        """One row per round: what each agent does (channels written, or 'decide')."""
        rows = []
        for r in range(self.num_rounds()):
            speaking = self.speakers(r, seed)
            row = {"round": str(r)}
            for name in self.agent_names:
                row[name] = ", ".join(speaking.get(name, ()))
                if name == VERIFIER and name in speaking and self.can_decide(r, seed):
                    row[name] += " (may decide)"
            rows.append(row)
        return rows

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, agents={list(self.agent_names)}, "
            f"channels={list(self.channel_names)}, max_message_rounds={self.max_message_rounds})"
        )

    def _repr_html_(self) -> str:
        names = self.agent_names
        head = "".join(f"<th>{html.escape(self.agent(n).human_name)} ({n})</th>" for n in names)
        body = "".join(
            f"<tr><td>{row['round']}</td>"
            + "".join(f"<td>{html.escape(row[n])}</td>" for n in names)
            + "</tr>"
            for row in self.schedule()
        )
        visibility = "; ".join(
            f"<code>{c.name}</code> seen by {', '.join(sorted(c.visible_to))}"
            for c in self.channels
        )
        return (
            f"<b>Protocol <code>{self.name}</code></b> &middot; {visibility}"
            f"<table><tr><th>round</th>{head}</tr>{body}</table>"
        )


def shuffled(items: tuple[str, ...], *, seed: int, round_id: int, salt: str) -> tuple[str, ...]:
    """A permutation of ``items`` fixed by (seed, round, salt), the same in every process."""
    order = list(items)
    random.Random(f"{salt}:{seed}:{round_id}").shuffle(order)
    return tuple(order)
