"""What the widgets share for display: HTML snippets and a plain-text repr for notebooks."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any

from nip.rollouts._transcript_html import chat_bubble

_ROLE_COLOURS = {"system": "#f1f3f4", "user": "#e8f0fe", "assistant": "#fef7e0"}


def escape(text: Any) -> str:
    """``text`` as HTML-safe text."""
    return html.escape(str(text))


def error_html(message: str) -> str:
    """A red line of text (empty input gives an empty string, which hides nothing)."""
    if not message:
        return ""
    return f"<span style='color:#c5221f;white-space:pre-wrap'>{escape(message)}</span>"


def note_html(text: str) -> str:
    """A grey, small line of text."""
    return f"<span style='color:#666;font-size:90%'>{escape(text)}</span>"


def messages_html(messages: Iterable[Mapping[str, Any]]) -> str:
    """Chat messages as boxes, in order: role (and sender name), then the content."""
    parts = []
    for message in messages:
        role = str(message.get("role", "?"))
        title = f"{role} · {message['name']}" if message.get("name") else role
        parts.append(
            chat_bubble(title, str(message.get("content", "")), _ROLE_COLOURS.get(role, "#fff"))
        )
    return "".join(parts) or "<i>no messages</i>"


def table_html(head: Iterable[str], rows: Iterable[Iterable[str]], style: str) -> str:
    """A table of HTML cells under the plain-text headings ``head``."""
    cell = "padding:2px 8px;text-align:left;white-space:nowrap"
    th = "".join(f"<th style='{cell}'>{escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td style='{cell}'>{v}</td>" for v in row) + "</tr>" for row in rows
    )
    return f"<table style='{style}'><tr>{th}</tr>{body}</table>"


def pre_html(text: str) -> str:
    """Preformatted text (selectable, for copying)."""
    return f"<pre style='white-space:pre-wrap;margin:0;line-height:1.4'>{escape(text)}</pre>"


class PlainTextRepr:
    """Mixin for widgets: ``text/plain`` is the widget's own ``repr`` in full (ipywidgets
    cuts it at 110 characters), next to the usual widget view."""

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = super()._repr_mimebundle_(**kwargs) or {}  # type: ignore[misc]
        bundle["text/plain"] = repr(self)
        return bundle
