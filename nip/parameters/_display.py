"""HTML rendering of parameters objects for notebooks."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nip.parameters._base import BaseParameters


def _value_html(value: Any) -> str:
    from nip.parameters._base import BaseParameters

    if isinstance(value, BaseParameters):
        return parameters_to_html(value, open_=False)
    if isinstance(value, dict):
        rows = "".join(
            f"<tr><td style='text-align:left'><b>{html.escape(str(k))}</b></td>"
            f"<td style='text-align:left'>{_value_html(v)}</td></tr>"
            for k, v in value.items()
        )
        return f"<table>{rows}</table>" if rows else "<i>{}</i>"
    return f"<code>{html.escape(repr(value))}</code>"


def parameters_to_html(params: BaseParameters, open_: bool = True) -> str:
    """A collapsible table of fields; values that differ from the default are bold."""
    rows = []
    for info in params.fields_info():
        value = getattr(params, info.name)
        changed = value != info.default
        name = f"<b>{info.name}</b>" if changed else info.name
        rows.append(
            "<tr>"
            f"<td style='text-align:left;vertical-align:top'>{name}</td>"
            f"<td style='text-align:left'>{_value_html(value)}</td>"
            f"<td style='text-align:left;color:#666'>{html.escape(info.doc)}</td>"
            "</tr>"
        )
    attr = " open" if open_ else ""
    return (
        f"<details{attr}><summary><b>{type(params).__name__}</b></summary>"
        f"<table>{''.join(rows)}</table></details>"
    )
