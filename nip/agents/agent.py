"""Text agents: transcript -> prompt -> :class:`~nip.backends.ChatBackend` -> parsed turn.

Retries a completion that cannot be used; which backend answers is configuration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from nip.agents.parsing import ParsedResponse, parse_response
from nip.agents.prompt_builder import build_chat_prompt
from nip.backends import (
    ChatBackend,
    ChatMessage,
    Completion,
    GenerationRequest,
    GenerationResult,
    TokenUsage,
)
from nip.errors import (
    ContentFilterError,
    GenerationError,
    InvalidResponseError,
    UnknownFinishReasonError,
)
from nip.parameters import PROVIDER_FACTS, HyperParameters, PureTextAgentParameters
from nip.prompts import PromptTemplateError, load_system_template
from nip.protocols import Decision, ProtocolHandler, build_protocol_handler
from nip.rollouts.records import AgentTurn, ChannelMessage, Transcript
from nip.settings import ExperimentSettings
from nip.utils.seeding import derive_seed


class AgentNotActiveInChannelError(InvalidResponseError):
    """A fine-tuning example would contain no message of the agent."""


class PureTextWholeAgent:
    """A text agent of a protocol, generating with a :class:`ChatBackend`.

    Args:
        protocol_handler: The protocol (built from ``hyper_params`` when omitted).
        backend: Where completions come from; needed only to generate.
    """

    def __init__(
        self,
        hyper_params: HyperParameters,
        settings: ExperimentSettings | None = None,
        agent_name: str = "verifier",
        protocol_handler: ProtocolHandler | None = None,
        *,
        backend: ChatBackend | None = None,
    ):
        self.hyper_params = hyper_params
        self.settings = settings or ExperimentSettings()
        self.agent_name = agent_name
        self.protocol_handler = protocol_handler or build_protocol_handler(hyper_params)
        self.agent_spec = self.protocol_handler.agent(agent_name)
        self.agent_params: PureTextAgentParameters = hyper_params.agents[agent_name]
        custom_path = self.agent_params.system_prompt_template_path
        self.system_prompt_template = (
            load_system_template(self.protocol_handler.name, agent_name, custom_path)
            if custom_path is not None
            else self.protocol_handler.system_prompt_template(agent_name)
        )
        # A verifier template must state a scale other than the default one.
        scale = self.protocol_handler.decision_scale.name
        if (
            self.agent_spec.is_verifier
            and scale != "accept_reject"
            and "verifier_decision_instructions" not in self.system_prompt_template.variables
        ):
            raise PromptTemplateError(
                f"{self.system_prompt_template.source}: the verifier decides on the "
                f"{scale!r} scale, so its template must contain $verifier_decision_instructions "
                "(which says how to write a decision on that scale)"
            )
        self.backend = backend
        self.base_model_name = self.agent_params.model_name
        #: The model generating now: the base model or the latest fine-tuned one.
        self.model_name = self.base_model_name

    @property
    def agent_id(self) -> int:
        """The agent's index in the protocol's agent order."""
        return self.protocol_handler.agent_names.index(self.agent_name)

    @property
    def is_verifier(self) -> bool:
        return self.agent_spec.is_verifier

    @property
    def is_prover(self) -> bool:
        return self.agent_spec.is_prover

    @property
    def max_message_rounds(self) -> int:
        return self.protocol_handler.num_rounds()

    @property
    def shared_model_group(self) -> str:
        """The group whose model this agent uses (its own name when not set)."""
        return self.agent_params.shared_model_group or self.agent_name

    @property
    def visible_message_channel_names(self) -> tuple[str, ...]:
        return self.protocol_handler.visible_channels(self.agent_name)

    @property
    def visible_message_channel_indices(self) -> tuple[int, ...]:
        names = self.protocol_handler.channel_names
        return tuple(names.index(c) for c in self.visible_message_channel_names)

    @property
    def visible_message_channel_mask(self) -> tuple[bool, ...]:
        visible = set(self.visible_message_channel_names)
        return tuple(c in visible for c in self.protocol_handler.channel_names)

    @property
    def num_visible_message_channels(self) -> int:
        return len(self.visible_message_channel_names)

    def system_prompt(self, transcript: Transcript) -> str:
        """The agent's system prompt for the dialogue's datapoint."""
        handler = self.protocol_handler
        stance = transcript.stances.get(self.agent_name)
        return self.system_prompt_template.render(
            question=transcript.datapoint.question,
            solution=transcript.datapoint.solution,
            max_questions=max(handler.max_verifier_questions - 1, 0),
            max_response_words=self.agent_params.max_response_words,
            agent_stance_string=Decision(1 if stance is None else stance).word,
            agent_name=self.agent_spec.human_name,
            verifier_decision_instructions=handler.decision_scale.instructions,
        )

    def build_chat_prompt(
        self,
        transcript: Transcript,
        round_id: int,
        *,
        include_supervisor: bool = True,
        ensure_last_message_is_assistant: bool = False,
        replace_last_message_with_true_label: bool = False,
    ) -> list[ChatMessage]:
        """The exact messages this agent is prompted with in ``round_id`` of ``transcript``.

        Args:
            include_supervisor: Add the supervisor message (``use_supervisor_message``).
            ensure_last_message_is_assistant: End at this agent's last message (fine-tuning);
                ``AgentNotActiveInChannelError`` if it has none before ``round_id``.
            replace_last_message_with_true_label: With the above, for the verifier: that
                message becomes the scale's strongest answer for the label.
        """
        params = self.agent_params
        # A fine-tuning line of a provider that keeps the supervisor messages the prompts had.
        keep = not include_supervisor and PROVIDER_FACTS[params.model_provider].keeps_supervisor
        messages = build_chat_prompt(
            self.protocol_handler,
            self.agent_name,
            transcript,
            round_id,
            system_prompt=self.system_prompt(transcript),
            use_supervisor_message=params.use_supervisor_message,
            include_supervisor=include_supervisor or keep,
            replay_supervisor=keep,
            supervisor_name=params.supervisor_name,
            max_response_words=params.max_response_words,
        )
        if not ensure_last_message_is_assistant:
            return messages
        while messages and messages[-1]["role"] != "assistant":
            messages.pop()
        if not messages:
            raise AgentNotActiveInChannelError(
                f"{self.agent_name} has no message before round {round_id}"
            )
        if replace_last_message_with_true_label and self.is_verifier:
            scale = self.protocol_handler.decision_scale
            label = scale.point_for(Decision(transcript.datapoint.y)).text
            messages[-1] = {"role": "assistant", "content": f"Decision: {label}"}
        return messages

    def make_request(
        self,
        transcript: Transcript,
        round_id: int,
        *,
        attempt: int = 0,
        n: int = 1,
        sample_index: int = 0,
    ) -> GenerationRequest:
        """The request for this agent's turn, seeded by dialogue, round, agent, attempt, sample."""
        params = self.agent_params
        handler = self.protocol_handler
        channels = handler.speakers(round_id, transcript.seed).get(self.agent_name, ())
        headers = "\n".join(self.agent_spec.response_channel_headers.get(c, "") for c in channels)
        return GenerationRequest(
            model=self.model_name,
            messages=tuple(self.build_chat_prompt(transcript, round_id)),
            max_tokens=params.effective_max_tokens_per_message,
            temperature=params.temperature,
            top_p=params.top_p,
            repetition_penalty=params.repetition_penalty,
            n=n,
            seed=derive_seed(
                self.hyper_params.seed,
                transcript.seed,
                round_id,
                self.agent_name,
                attempt,
                sample_index,
            ),
            metadata={
                "agent": self.agent_name,
                "round": round_id,
                "is_verifier": self.is_verifier,
                "can_decide": self.is_verifier and handler.can_decide(round_id, transcript.seed),
                "last_turn": handler.is_last_turn(self.agent_name, round_id),
                "channel_headers": headers if len(channels) > 1 else None,
                # The scale's answers, strongest accept first (the dummy backend picks one).
                "decision_texts": "\n".join(reversed(handler.decision_scale.texts))
                if self.is_verifier
                else None,
            },
        )

    def parse_completion(
        self, completion: Completion, transcript: Transcript, round_id: int
    ) -> ParsedResponse:
        """Check the finish reason and parse the text (raises ``InvalidResponseError`` & co.)."""
        if completion.finish_reason == "content_filter":
            raise ContentFilterError("the provider's content filter blocked the response")
        if completion.finish_reason not in ("stop", "length"):
            raise UnknownFinishReasonError(f"unexpected finish reason {completion.finish_reason!r}")
        handler = self.protocol_handler
        channels = handler.speakers(round_id, transcript.seed).get(self.agent_name, ())
        return parse_response(
            completion.text,
            spec=self.agent_spec,
            channels=channels,
            can_decide=self.is_verifier and handler.can_decide(round_id, transcript.seed),
            scale=handler.decision_scale,
        )

    def turn_from_text(
        self, text: str, transcript: Transcript, round_id: int, **turn_fields: Any
    ) -> tuple[AgentTurn, list[ChannelMessage]]:
        """Parse ``text`` as this agent's turn (used for overrides and cached samples)."""
        parsed = self.parse_completion(Completion(text, "stop"), transcript, round_id)
        return self._turn(parsed, text, round_id, **turn_fields)

    def _turn(
        self, parsed: ParsedResponse, text: str, round_id: int, **turn_fields: Any
    ) -> tuple[AgentTurn, list[ChannelMessage]]:
        turn = AgentTurn(
            round=round_id,
            agent=self.agent_name,
            raw_text=text,
            decision=parsed.decision,
            score=parsed.score,
            channels=tuple(parsed.channel_messages),
            **turn_fields,
        )
        messages = [
            ChannelMessage(round_id, channel, self.agent_name, content)
            for channel, content in parsed.channel_messages.items()
        ]
        return turn, messages

    async def generate_turn(
        self, transcript: Transcript, round_id: int, *, sample_index: int = 0
    ) -> tuple[AgentTurn, list[ChannelMessage]]:
        """Generate, parse and retry this agent's turn in ``round_id``.

        After ``num_invalid_generation_retries`` the turn is recorded invalid and the dialogue
        goes on; the backend's own errors propagate.
        """
        if self.backend is None:
            raise GenerationError(f"agent {self.agent_name!r} has no backend to generate with")
        retries = self.agent_params.num_invalid_generation_retries
        last_error: GenerationError | None = None
        results = []  # every attempt's tokens: rejected generations are billed too
        for attempt in range(retries + 1):
            request = self.make_request(
                transcript, round_id, attempt=attempt, sample_index=sample_index
            )
            result = await self.backend.generate(request)
            results.append(result)
            completion = result.completions[0]
            try:
                parsed = self.parse_completion(completion, transcript, round_id)
            except (InvalidResponseError, ContentFilterError, UnknownFinishReasonError) as error:
                last_error = error
                continue
            return self._turn(
                parsed,
                completion.text or "",
                round_id,
                retries=attempt,
                token_limit=completion.finish_reason == "length",
                error=str(last_error) if last_error else None,
                model=result.model or request.model,
                latency_s=result.latency_s,
                sample_index=sample_index,
                **attempts_usage(results),
            )
        invalid = AgentTurn(
            round=round_id,
            agent=self.agent_name,
            raw_text="",
            retries=retries,
            valid=False,
            error=f"{type(last_error).__name__}: {last_error}",
            model=result.model or self.model_name,
            sample_index=sample_index,
            **attempts_usage(results),
        )
        return invalid, []

    async def generate_samples(
        self, transcript: Transcript, round_id: int, n: int
    ) -> list[tuple[AgentTurn, list[ChannelMessage]]]:
        """``n`` independent turns for ``round_id`` in one request; unusable or missing
        samples are generated again one by one under fresh sample indices."""
        if self.backend is None:
            raise GenerationError(f"agent {self.agent_name!r} has no backend to generate with")
        request = self.make_request(transcript, round_id, n=n)
        result = await self.backend.generate(request)
        shares = split_usage(result.usage, n)
        samples: list[tuple[AgentTurn, list[ChannelMessage]]] = []
        for i in range(n):
            completion = result.completions[i] if i < len(result.completions) else None
            try:
                if completion is None:
                    raise InvalidResponseError("the backend returned fewer samples than asked")
                parsed = self.parse_completion(completion, transcript, round_id)
            except (InvalidResponseError, ContentFilterError, UnknownFinishReasonError):
                # Generated again alone; the tokens this sample's share cost stay on its turn.
                turn, messages = await self.generate_turn(transcript, round_id, sample_index=n + i)
                samples.append((with_usage_added(turn, shares[i], result.cached), messages))
                continue
            samples.append(
                self._turn(
                    parsed,
                    completion.text or "",
                    round_id,
                    token_limit=completion.finish_reason == "length",
                    model=result.model or request.model,
                    prompt_tokens=shares[i].prompt_tokens,
                    completion_tokens=shares[i].completion_tokens,
                    latency_s=result.latency_s,
                    cached=result.cached,
                    sample_index=i,
                )
            )
        return samples

    def build_fine_tune_dataset(
        self,
        transcripts: Iterable[Transcript],
        ensure_last_message_is_assistant: bool = True,
        replace_verifier_guess_with_true_label: bool = False,
    ) -> list[dict[str, list[ChatMessage]]]:
        """Supervised fine-tuning examples, one per transcript in which this agent spoke.

        Each is ``{"messages": [...]}`` (OpenAI fine-tuning / TRL conversational SFT), this
        agent's view without supervisor messages; see :meth:`build_chat_prompt` for the flags.
        """
        examples = []
        for transcript in transcripts:
            try:
                messages = self.fine_tune_messages(
                    transcript,
                    replace_verifier_guess_with_true_label,
                    ensure_last_message_is_assistant=ensure_last_message_is_assistant,
                )
            except AgentNotActiveInChannelError:
                continue
            examples.append({"messages": messages})
        return examples

    def fine_tune_messages(
        self,
        transcript: Transcript,
        replace_verifier_guess_with_true_label: bool = False,
        *,
        ensure_last_message_is_assistant: bool = True,
    ) -> list[ChatMessage]:
        """One SFT conversation: this agent's view of ``transcript`` (its own completions).

        Raises:
            AgentNotActiveInChannelError: The agent wrote nothing valid in this dialogue.
        """
        if not any(t.valid for t in transcript.turns_of(self.agent_name)):
            raise AgentNotActiveInChannelError(f"{self.agent_name} did not speak")
        return self.build_chat_prompt(
            transcript,
            transcript.num_rounds,
            include_supervisor=False,
            ensure_last_message_is_assistant=ensure_last_message_is_assistant,
            replace_last_message_with_true_label=replace_verifier_guess_with_true_label,
        )

    def __getstate__(self) -> dict[str, Any]:
        """Pickle and copy without the backend (which holds clients and keys)."""
        return {**self.__dict__, "backend": None}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(agent_name={self.agent_name!r}, "
            f"protocol={self.protocol_handler.name!r}, model={self.model_name!r}, "
            f"provider={self.agent_params.model_provider!r}, "
            f"backend={type(self.backend).__name__ if self.backend else None})"
        )


class OpenAiWholeAgent(PureTextWholeAgent):
    """The original's name for a text agent; ``model_provider`` chooses the backend."""


# What a turn's generations cost: every attempt's tokens, rejected ones included (all are
# billed); a turn is cached only when every attempt was.
def attempts_usage(results: Sequence[GenerationResult]) -> dict[str, Any]:
    """The :class:`AgentTurn` fields of a turn's attempts: all their tokens, and ``cached``
    when every one came from the cache."""
    return {
        "prompt_tokens": sum(r.usage.prompt_tokens for r in results),
        "completion_tokens": sum(r.usage.completion_tokens for r in results),
        "cached": bool(results) and all(r.cached for r in results),
    }


def split_usage(usage: TokenUsage, n: int) -> list[TokenUsage]:
    """One request's usage over its ``n`` samples: the prompt to the first (it was sent once),
    the completion tokens evenly, the remainder to the first ones; the shares add up to it."""
    per_sample, remainder = divmod(usage.completion_tokens, max(n, 1))
    return [
        TokenUsage(
            prompt_tokens=usage.prompt_tokens if i == 0 else 0,
            completion_tokens=per_sample + (1 if i < remainder else 0),
        )
        for i in range(n)
    ]


def with_usage_added(turn: AgentTurn, usage: TokenUsage, cached: bool) -> AgentTurn:
    """``turn`` also carrying ``usage`` (a sample generated again); cached only if both were."""
    return dataclasses.replace(
        turn,
        prompt_tokens=turn.prompt_tokens + usage.prompt_tokens,
        completion_tokens=turn.completion_tokens + usage.completion_tokens,
        cached=turn.cached and cached,
    )
