"""A transcript as a chat: one column per channel, one row per round."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from nip.protocols import Decision

if TYPE_CHECKING:
    from nip.rollouts.records import AgentTurn, Transcript

_COLOURS = {"verifier": "#e8f0fe", "prover": "#fef7e0", "prover0": "#fce8e6", "prover1": "#e6f4ea"}


def chat_bubble(title: str, text: str, colour: str = "#f1f3f4", note: str = "") -> str:
    """A rounded box: a bold title, an optional grey note, then ``text`` with its line breaks.

    The line height is set because ipywidgets' ``HTML`` gives every line a control's 28 px."""
    note_html = f" <span style='color:#777'>{html.escape(note)}</span>" if note else ""
    return (
        f"<div style='background:{colour};border-radius:8px;padding:4px 8px;margin:2px 0;"
        "white-space:pre-wrap;text-align:left;font-family:inherit;line-height:1.45'>"
        f"<b>{html.escape(title)}</b>{note_html}<br>{html.escape(text)}</div>"
    )


def _bubble(sender: str, text: str, note: str = "") -> str:
    return chat_bubble(sender, text, _COLOURS.get(sender, "#f1f3f4"), note)


def turn_to_html(turn: AgentTurn) -> str:
    """One agent turn as a card: round, decision, text, and a grey line of model, tokens..."""
    notes = [f"round {turn.round}"]
    if Decision(turn.decision) is not Decision.NONE:
        notes.append(f"decides: {Decision(turn.decision).word}")
    if not turn.valid:
        notes.append("invalid" + (f": {turn.error}" if turn.error else ""))
    if turn.overridden:
        notes.append("written by hand")
    details = [
        turn.model or "",
        f"{turn.prompt_tokens} + {turn.completion_tokens} tokens",
        f"{turn.retries} retr{'ies' if turn.retries > 1 else 'y'}" if turn.retries else "",
        "stopped at the token limit" if turn.token_limit else "",
        "from the cache" if turn.cached else "",
        "to " + ", ".join(turn.channels) if turn.channels else "",
    ]
    detail_line = " · ".join(d for d in details if d)
    return (
        "<div style='max-width:48em'>"
        + _bubble(turn.agent, turn.raw_text, " · ".join(notes))
        + f"<div style='color:#777;font-size:85%;margin:0 8px'>{html.escape(detail_line)}</div>"
        "</div>"
    )


def transcript_to_html(transcript: Transcript) -> str:
    """Render ``transcript`` for a notebook: channels side by side, decision, label, rewards."""
    channels = list(dict.fromkeys(m.channel for m in transcript.messages)) or ["main"]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in channels)
    rows = []
    for r in range(transcript.num_rounds):
        cells = []
        for channel in channels:
            bubbles = "".join(
                _bubble(m.sender, m.content) for m in transcript.messages_in(r, channel)
            )
            cells.append(f"<td style='vertical-align:top'>{bubbles}</td>")
        for turn in transcript.turns:
            if turn.round == r and turn.decision is not Decision.NONE:
                cells = [
                    f"<td colspan='{len(channels)}'>"
                    + _bubble(turn.agent, turn.raw_text, f"decides: {Decision(turn.decision).word}")
                    + "</td>"
                ]
            elif turn.round == r and not turn.valid:
                cells.append(f"<td style='color:#b00'>{html.escape(turn.agent)}: invalid</td>")
        rows.append(f"<tr><td>{r}</td>{''.join(cells)}</tr>")
    label = "correct" if transcript.datapoint.y == 1 else "incorrect"
    verdict = Decision(transcript.decision).word
    outcome = "right" if transcript.correct else "wrong"
    rewards = ", ".join(f"{a}: {v:+g}" for a, v in transcript.episode_rewards.items())
    status = " (terminated: no decision)" if transcript.terminated else ""
    return (
        f"<div><b>{html.escape(transcript.protocol)}</b> &middot; datapoint "
        f"<code>{html.escape(transcript.datapoint.id)}</code> &middot; the solution is "
        f"<b>{label}</b> &middot; verifier: <b>{verdict}</b> ({outcome}){status} &middot; "
        f"rewards: {html.escape(rewards)}"
        f"<table style='width:100%;table-layout:fixed'><tr><th style='width:3em'>round</th>"
        f"{head}</tr>{''.join(rows)}</table></div>"
    )
