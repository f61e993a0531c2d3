"""The HTML table of a notebook ``_repr_html_``: a caption over one row per name and value."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any


def caption_table(caption: str, rows: Mapping[str, Any]) -> str:
    """A table captioned ``caption``, one row per key (its header cell) and value (escaped)."""
    body = "".join(
        f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
        f"<td style='text-align:left'>{html.escape(str(v))}</td></tr>"
        for k, v in rows.items()
    )
    return f"<table><caption>{html.escape(caption)}</caption>{body}</table>"


def fields_table(record: Any) -> str:
    """A dataclass as a notebook shows it: its fields' reprs, captioned with its class."""
    fields = {name: repr(getattr(record, name)) for name in record.__dataclass_fields__}
    return caption_table(type(record).__name__, fields)
