"""Text agents: prompts, generation with retries, parsing and fine-tuning examples."""

from nip.agents.agent import AgentNotActiveInChannelError, OpenAiWholeAgent, PureTextWholeAgent
from nip.agents.parsing import ParsedResponse, parse_response
from nip.agents.prompt_builder import build_chat_prompt

__all__ = [
    "AgentNotActiveInChannelError",
    "OpenAiWholeAgent",
    "ParsedResponse",
    "PureTextWholeAgent",
    "build_chat_prompt",
    "parse_response",
]
