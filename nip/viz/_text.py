"""Text shown on figures: speaker labels, wrapped and truncated messages, hover text."""

from __future__ import annotations

import html
import textwrap

from nip.protocols import Decision
from nip.training.algorithms.malt_tree import ResponseTree, TreeNode

ROOT_LABEL = "start"


def speaker_label(node: TreeNode) -> str:
    """Who spoke in the node's round ("prover0+prover1" when several did; "start" at a root)."""
    if node.parent_id is None:
        return ROOT_LABEL
    return "+".join(dict.fromkeys(t.agent for t in node.turns)) or "nobody"


def shorten(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters, with an ellipsis when cut."""
    return text if len(text) <= max_chars else text[: max_chars - 1].rstrip() + "…"


def wrap_html(text: str, width: int = 70) -> str:
    """``text`` HTML-escaped and wrapped at ``width`` characters with ``<br>`` (newlines kept)."""
    lines = [
        wrapped
        for paragraph in text.splitlines() or [""]
        for wrapped in (textwrap.wrap(paragraph, width, replace_whitespace=False) or [""])
    ]
    return "<br>".join(html.escape(line) for line in lines)


def label_name(y: int) -> str:
    return "correct" if y == 1 else "incorrect"


def format_rewards(rewards: dict[str, float], first: str | None = None) -> str:
    """``"verifier +0.33, prover +0.5"``, with ``first`` leading and in bold."""
    names = sorted(rewards, key=lambda a: (a != first, a))
    parts = [f"{a} {rewards[a]:+.3g}" for a in names]
    if first in rewards:
        parts[0] = f"<b>{parts[0]}</b>"
    return ", ".join(parts)


def node_hover(tree: ResponseTree, node: TreeNode, agent: str, max_chars: int) -> str:
    """Hover text of one node: speaker, round, message, decision, rewards and pair roles."""
    if node.parent_id is None:
        head = (
            f"<b>{ROOT_LABEL}</b> · datapoint {html.escape(tree.datapoint.id)} "
            f"({label_name(tree.datapoint.y)} solution)"
        )
        lines = [head]
    else:
        lines = [f"<b>{html.escape(speaker_label(node))}</b> · round {node.round}"]
        for turn in node.turns:
            text = shorten(turn.raw_text, max_chars) if turn.valid else "(invalid turn)"
            lines.append(wrap_html(f"[{turn.agent}] {text}"))
        if node.decision is not Decision.NONE:
            lines.append(f"decision: {Decision(node.decision).word}")
    lines.append(f"expected reward: {format_rewards(node.expected_reward, agent)}")
    if node.rewards:
        lines.append(f"reward this round: {format_rewards(node.rewards)}")
    lines.append(f"leaves below: {node.num_leaves}")
    for name, role in sorted(node.pair_role.items()):
        lines.append(f"{'preferred' if role == 'positive' else 'non-preferred'} for {name}")
    lines.append(f"<i>{html.escape(node.id)}</i>")
    return "<br>".join(lines)
