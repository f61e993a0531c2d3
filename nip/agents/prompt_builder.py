"""Building the exact chat prompt an agent sees at a round of a dialogue.

The system prompt; round by round the agent's own completion as ``assistant`` and others'
messages as ``user``, named also in the text (many open-model chat templates drop ``name``);
the verifier's "decide now" notice; optionally a supervisor message.
"""

from __future__ import annotations

from collections.abc import Callable

from nip.backends import ChatMessage
from nip.prompts import supervisor_message
from nip.protocols import VERIFIER, ProtocolHandler
from nip.rollouts.records import ChannelMessage, Transcript


def _user_message(handler: ProtocolHandler, message: ChannelMessage) -> ChatMessage:
    sender = handler.agent(message.sender)
    if sender.anonymous:
        return {"role": "user", "content": message.content}
    return {
        "role": "user",
        "name": sender.human_name,
        "content": f"{sender.human_name}: {message.content}",
    }


def _decide_now(handler: ProtocolHandler) -> ChatMessage:
    """The verifier's "decide now" system message, stating its decision scale."""
    return {"role": "system", "content": handler.decision_scale.decide_now_message}


def supervisor_enabled(mode: str, turn_index: int) -> bool:
    """Whether ``use_supervisor_message=mode`` adds a message on the agent's n-th turn."""
    return (
        mode == "all"
        or (mode == "first" and turn_index == 0)
        or (mode == "all_but_first" and turn_index > 0)
    )


def shows_decide_notice(
    handler: ProtocolHandler, agent_name: str, round_id: int, turn_index: int, mode: str
) -> bool:
    """Whether the verifier's prompt ends with "decide now": its last turn, after questions,
    with no supervisor message instead."""
    return (
        agent_name == VERIFIER
        and handler.max_verifier_questions > 1
        and handler.is_last_turn(agent_name, round_id)
        and not supervisor_enabled(mode, turn_index)
    )


def history_messages(
    handler: ProtocolHandler,
    agent_name: str,
    transcript: Transcript,
    round_id: int,
    *,
    use_supervisor_message: str = "none",
    supervisor: Callable[[int, int], ChatMessage] | None = None,
) -> list[ChatMessage]:
    """The conversation before ``round_id`` from ``agent_name``'s point of view.

    The verifier's "decide now" notice is replayed (so fine-tuning examples match its
    prompt); supervisor messages are only where ``supervisor`` (round, turn index) makes them.
    """
    messages: list[ChatMessage] = []
    turn_index = 0
    for r in range(min(round_id, transcript.num_rounds)):
        own = transcript.turn(agent_name, r)
        if own is not None:
            notice = shows_decide_notice(handler, agent_name, r, turn_index, use_supervisor_message)
            if own.valid:
                if notice:
                    messages.append(_decide_now(handler))
                if supervisor and supervisor_enabled(use_supervisor_message, turn_index):
                    messages.append(supervisor(r, turn_index))
                messages.append({"role": "assistant", "content": own.raw_text})
            turn_index += 1
        for channel in handler.channel_order(agent_name, r, transcript.seed):
            for message in transcript.messages_in(r, channel):
                if message.sender != agent_name:
                    messages.append(_user_message(handler, message))
    return messages


def build_chat_prompt(
    handler: ProtocolHandler,
    agent_name: str,
    transcript: Transcript,
    round_id: int,
    *,
    system_prompt: str,
    use_supervisor_message: str = "none",
    include_supervisor: bool = True,
    replay_supervisor: bool = False,
    supervisor_name: str = "Supervisor",
    max_response_words: int = 150,
) -> list[ChatMessage]:
    """The exact messages ``agent_name`` is prompted with in ``round_id``.

    Args:
        use_supervisor_message: The agent's setting (none, all, first, all_but_first).
        include_supervisor: Append this turn's supervisor message (False for fine-tuning).
        replay_supervisor: Keep the earlier turns' supervisor messages too (fine-tuning lines
            of a provider that wants a user turn before each assistant turn: Together AI).
    """

    def supervisor(r: int, turn_index: int) -> ChatMessage:
        text = supervisor_message(
            is_verifier=agent_name == VERIFIER,
            turn_index=turn_index,
            questions_left=handler.max_verifier_questions - 1 - turn_index,
            can_decide=handler.can_decide(r, transcript.seed),
            verifier_name=handler.agent(VERIFIER).human_name,
            max_response_words=max_response_words,
            decide_form=handler.decision_scale.short_form,
        )
        return {"role": "user", "name": supervisor_name, "content": text}

    messages: list[ChatMessage] = [{"role": "system", "content": system_prompt}]
    messages += history_messages(
        handler,
        agent_name,
        transcript,
        round_id,
        use_supervisor_message=use_supervisor_message,
        supervisor=supervisor if replay_supervisor else None,
    )
    turn_index = sum(1 for t in transcript.turns if t.agent == agent_name and t.round < round_id)
    if shows_decide_notice(handler, agent_name, round_id, turn_index, use_supervisor_message):
        messages.append(_decide_now(handler))
    if include_supervisor and supervisor_enabled(use_supervisor_message, turn_index):
        messages.append(supervisor(round_id, turn_index))
    return messages
