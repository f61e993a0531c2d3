"""Verifier decision scales: what the verifier may write after ``Decision:`` and what it means.

``protocol_common.verifier_decision_scale`` picks one row of :data:`DECISION_SCALES`: points
from the strongest reject to the strongest accept, each with its text, a decision and a score
in [-1, 1]. The same object words the prompts and parses the verifier's answer.

==========================  =====================================================  =========
scale                       the verifier writes                                    neither
==========================  =====================================================  =========
``accept_reject``           accept / reject                                        no
``likert_4``                strongly disagree, disagree, agree, strongly agree     no
``likert_5``                ... with "neither agree nor disagree" in the middle    yes
``likert_6``                strongly disagree, disagree, somewhat disagree, ...    no
``likert_7``                ... with "neither agree nor disagree" in the middle    yes
``likert_int_scale_11``     a whole number 0-10 (0 strongly disagree, 10 strongly  5
                            agree)
``out_of_10``               a whole number 0-10                                    5
``out_of_100``              a whole number 0-100                                   50
==========================  =====================================================  =========

The proposition is "the solution is correct". Word scales match the longest point text the
answer starts with; numeric scales read the whole leading number (``100`` on ``out_of_10`` is
out of range, not ``10``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType

from nip.errors import InvalidDecisionError
from nip.protocols._spec import Decision

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@dataclass(frozen=True)
class ScalePoint:
    """One answer the verifier can give: its text (lower case), decision and score in [-1, 1]."""

    text: str
    decision: Decision
    score: float


@dataclass(frozen=True)
class DecisionScale:
    """A verifier decision scale: its points, how prompts state it, and its parser.

    Attributes:
        answer_form: Completes the system prompt's "write a line of the form ...".
        short_form: The same, shorter, for the "decide now" message ("write ...").
        numeric: Point ``i`` is the whole number ``i``, read as a number, not by prefix.
    """

    name: str
    points: tuple[ScalePoint, ...]
    answer_form: str
    short_form: str
    numeric: bool = False

    @property
    def texts(self) -> tuple[str, ...]:
        """Every answer text, from the strongest reject to the strongest accept."""
        return tuple(p.text for p in self.points)

    @property
    def strongest_reject(self) -> ScalePoint:
        return self.points[0]

    @property
    def strongest_accept(self) -> ScalePoint:
        return self.points[-1]

    def point_for(self, decision: Decision) -> ScalePoint:
        """The strongest point meaning ``decision`` (used to write a label as an answer)."""
        if decision is Decision.ACCEPT:
            return self.strongest_accept
        if decision is Decision.REJECT:
            return self.strongest_reject
        raise ValueError(f"no single answer stands for {decision!r}")

    @property
    def instructions(self) -> str:
        """The paragraph of the verifier's system prompt that states the scale."""
        return (
            f"To give your decision, write a line of the form {self.answer_form}. "
            'Do not write "Decision:" until you have decided.'
        )

    @property
    def decide_now_message(self) -> str:
        """The system message of the verifier's last turn (when it could ask before)."""
        return f"You cannot ask any more questions. You must now decide: write {self.short_form}."

    def parse(self, answer: str) -> ScalePoint:
        """The point chosen by the text after ``Decision:`` (else ``InvalidDecisionError``)."""
        text = answer.strip().lower()
        if self.numeric:
            return self._parse_number(answer, text)
        matches = [p for p in self.points if text.startswith(p.text)]
        if not matches:
            strongest_first = self.texts[::-1]
            choices = f"{', '.join(strongest_first[:-1])} or {strongest_first[-1]}"
            raise InvalidDecisionError(
                f"'Decision:' must be followed by {choices}, not {_shown(answer)}"
            )
        return max(matches, key=lambda p: len(p.text))

    def _parse_number(self, answer: str, text: str) -> ScalePoint:
        match = _NUMBER.match(text)
        value = float(match.group(0)) if match else -1.0
        if not value.is_integer() or not 0 <= value <= len(self.points) - 1:
            raise InvalidDecisionError(
                f"'Decision:' must be followed by a whole number from 0 to "
                f"{self.points[-1].text}, not {match.group(0) if match else _shown(answer)}"
            )
        return self.points[int(value)]

    def __repr__(self) -> str:
        return f"DecisionScale({self.name!r}, points={len(self.points)})"


def _shown(answer: str) -> str:
    words = answer.strip().split()
    return repr(" ".join(words[:4])) if words else "nothing"


def _spread(labels: tuple[str, ...]) -> tuple[ScalePoint, ...]:
    """Points evenly spaced over [-1, 1]; the middle one (odd count) means neither."""
    last = len(labels) - 1
    return tuple(
        ScalePoint(label, Decision.NEITHER, 0.0)
        if 2 * i == last
        else ScalePoint(
            label, Decision.ACCEPT if 2 * i > last else Decision.REJECT, 2 * i / last - 1
        )
        for i, label in enumerate(labels)
    )


def _likert(name: str, labels: tuple[str, ...], *, neither: bool) -> DecisionScale:
    points = _spread(labels)
    if not neither:
        points = tuple(p for p in points if p.decision is not Decision.NEITHER)
    options = ", ".join(f'"{p.text}"' for p in points)
    form = (
        '"Decision: <answer>", where <answer> says how much you agree that the solution is '
        f"correct and is one of {options}"
    )
    return DecisionScale(name, points, form, form)


def _numeric(name: str, top: int, meaning: str) -> DecisionScale:
    points = _spread(tuple(str(i) for i in range(top + 1)))
    number = f"a whole number from 0 to {top}"
    form = f'"Decision: <number>", where <number> is {number} saying {meaning}'
    return DecisionScale(name, points, form, form, numeric=True)


_LIKERT_7 = (
    "strongly disagree", "disagree", "somewhat disagree", "neither agree nor disagree",
    "somewhat agree", "agree", "strongly agree",
)  # fmt: skip
_LIKERT_5 = tuple(label for label in _LIKERT_7 if not label.startswith("somewhat"))


def _how_sure(top: int) -> str:
    return (
        "how sure you are that the solution is correct: 0 means certainly incorrect, "
        f"{top // 2} that you cannot tell, and {top} certainly correct"
    )


#: Every decision scale by name (the allowed values of ``verifier_decision_scale``).
DECISION_SCALES: MappingProxyType[str, DecisionScale] = MappingProxyType(
    {
        scale.name: scale
        for scale in (
            DecisionScale(
                "accept_reject",
                (
                    ScalePoint("reject", Decision.REJECT, -1.0),
                    ScalePoint("accept", Decision.ACCEPT, 1.0),
                ),
                answer_form='"Decision: accept" if the solution is correct, or '
                '"Decision: reject" if it is incorrect',
                short_form='"Decision: accept" or "Decision: reject"',
            ),
            _likert("likert_4", _LIKERT_5, neither=False),
            _likert("likert_5", _LIKERT_5, neither=True),
            _likert("likert_6", _LIKERT_7, neither=False),
            _likert("likert_7", _LIKERT_7, neither=True),
            _numeric(
                "likert_int_scale_11",
                10,
                "how much you agree that the solution is correct: 0 means strongly "
                "disagree, 5 neither agree nor disagree, and 10 strongly agree",
            ),
            _numeric("out_of_10", 10, _how_sure(10)),
            _numeric("out_of_100", 100, _how_sure(100)),
        )
    }
)


def decision_scale(name: str) -> DecisionScale:
    """The scale called ``name`` (``KeyError`` naming the choices if none)."""
    try:
        return DECISION_SCALES[name]
    except KeyError:
        raise KeyError(
            f"unknown verifier decision scale {name!r}; choose one of {', '.join(DECISION_SCALES)}"
        ) from None
