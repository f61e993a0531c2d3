"""Prompt templates: per-protocol, per-agent system prompts and turn instructions.

Templates are plain text with ``$variable`` placeholders (:class:`string.Template`): nothing is
escaped, so code reaches the model exactly as written; an unknown variable is refused on load.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from nip.errors import NipError

#: The variables a system prompt template may use.
SYSTEM_PROMPT_VARIABLES = frozenset({
    "question", "solution",
    "max_questions",  # questions the verifier may ask (its last turn is for deciding)
    "max_response_words",
    "agent_stance_string",  # "accept" or "reject": what a prover argues for
    "agent_name",  # the agent's human name, e.g. "Expert_1"
    "verifier_decision_instructions",  # how to write a decision on the verifier's scale
})  # fmt: skip

#: How the "decide now" messages say to decide on the default (accept/reject) scale; other
#: scales pass their own (``DecisionScale.short_form``).
ACCEPT_REJECT_FORM = '"Decision: accept" or "Decision: reject"'

#: Appended as a system message on the verifier's last turn when it could ask questions (on
#: the default scale; ``DecisionScale.decide_now_message`` in general).
LAST_TURN_SYSTEM_MESSAGE = (
    f"You cannot ask any more questions. You must now decide: write {ACCEPT_REJECT_FORM}."
)


class PromptTemplateError(NipError):
    """A prompt template is missing, unreadable, or uses an unknown variable."""


@dataclass(frozen=True)
class PromptTemplate:
    """A validated ``$variable`` template and where it came from."""

    text: str
    source: str

    def __post_init__(self) -> None:
        template = string.Template(self.text)
        if not template.is_valid():
            raise PromptTemplateError(
                f"{self.source}: invalid placeholder syntax (write $$ for a literal $)"
            )
        unknown = set(template.get_identifiers()) - SYSTEM_PROMPT_VARIABLES
        if unknown:
            raise PromptTemplateError(
                f"{self.source}: unknown template variable(s) {', '.join(sorted(unknown))}; "
                f"available: {', '.join(sorted(SYSTEM_PROMPT_VARIABLES))}"
            )

    @property
    def variables(self) -> frozenset[str]:
        """The variables the template uses."""
        return frozenset(string.Template(self.text).get_identifiers())

    def render(self, **variables: object) -> str:
        """Fill in the placeholders (every variable the template uses must be given)."""
        try:
            return string.Template(self.text).substitute(variables)
        except KeyError as error:
            raise PromptTemplateError(f"{self.source}: no value for {error.args[0]!r}") from None


def load_system_template(
    protocol: str, agent: str, path: str | Path | None = None
) -> PromptTemplate:
    """The built-in system prompt template of ``agent`` in ``protocol``, or the file at ``path``
    (``PromptTemplateError`` when missing or using unknown variables)."""
    if path is not None:
        try:
            return PromptTemplate(Path(path).read_text(encoding="utf-8"), str(path))
        except OSError as error:
            raise PromptTemplateError(f"cannot read prompt template {path}: {error}") from None
    resource = resources.files("nip.prompts") / "templates" / "system" / protocol / f"{agent}.txt"
    try:
        text = resource.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PromptTemplateError(
            f"no built-in system prompt for {agent!r} in {protocol!r}"
        ) from None
    return PromptTemplate(text, f"built-in {protocol}/{agent}.txt")


def supervisor_message(
    *,
    is_verifier: bool,
    turn_index: int,
    questions_left: int,
    can_decide: bool,
    verifier_name: str = "Verifier",
    max_response_words: int = 150,
    decide_form: str = ACCEPT_REJECT_FORM,
) -> str:
    """The supervisor's instructions for one turn (``use_supervisor_message``).

    Args:
        turn_index: 0 for the agent's first turn, 1 for its second, ...
        questions_left: Questions the verifier may still ask before it must decide.
        decide_form: What to write to decide, on the verifier's decision scale.
    """
    if not is_verifier:
        if turn_index == 0:
            return (
                f"Send your message to {verifier_name}, in at most {max_response_words} words. "
                'Begin it with "Answer: ".'
            )
        return (
            f"Answer {verifier_name}'s latest question, in at most {max_response_words} words. "
            'Begin your response with "Answer: ".'
        )
    if questions_left <= 0:
        return f"You have no questions left. Decide now: write {decide_form}."
    plural = "question" if questions_left == 1 else "questions"
    decide = f" Or, if you are sure, decide: write {decide_form}." if can_decide else ""
    return f"You have {questions_left} {plural} left. Ask your next question.{decide}"
