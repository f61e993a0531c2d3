"""One control per parameter field, chosen from the field's type hint and bounds.

=====================================  =============================================
field                                  control
=====================================  =============================================
``Literal[...]``                       Dropdown of the allowed values
``Literal[...] | str``                 Dropdown of the Literal's values and the current one
``bool``                               Checkbox
``float`` bounded on both sides        FloatSlider
``int`` bounded on both sides          BoundedIntText
other ``int`` / ``float``              IntText / FloatText (bounds checked on assignment)
``str``                                Text
``X | None`` (X one of the above)      :class:`OptionalControl`: a "set" checkbox and X's control
anything else                          a read-only Text showing the value (edit it in code)
=====================================  =============================================

Every control has a ``value`` trait holding the field's value (None for an unset optional).
A form's controls share their layout and style widgets (a :class:`Look`), which makes a form
of a hundred fields three times quicker to build.
"""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

import ipywidgets
import traitlets

from nip.parameters import FieldInfo
from nip.widgets._html import LABEL_WIDTH, note_html

_NONE = type(None)


class Look:
    """Layouts and styles shared by the widgets of one form (widgets may share them)."""

    def __init__(self) -> None:
        self._layouts: dict[str, ipywidgets.Layout] = {}
        self._styles: dict[type, ipywidgets.Widget] = {}

    def layout(self, width: str = "") -> ipywidgets.Layout:
        """The shared layout of this ``width`` ("" for the default)."""
        if width not in self._layouts:
            self._layouts[width] = ipywidgets.Layout(width=width or None)
        return self._layouts[width]

    def make(self, widget_class: type, width: str = "", **kwargs: Any) -> Any:
        """``widget_class(**kwargs)`` with the shared layout of ``width`` and shared style."""
        style_trait = widget_class.class_traits().get("style")
        if style_trait is not None:
            if widget_class not in self._styles:
                self._styles[widget_class] = style_trait.klass()
            kwargs["style"] = self._styles[widget_class]
        return widget_class(layout=self.layout(width), **kwargs)


class OptionalControl(ipywidgets.HBox):
    """A control for an optional field: a "set" checkbox, then the value's control (``value``:
    None while unticked)."""

    value = traitlets.Any(None, allow_none=True)

    def __init__(self, inner: ipywidgets.ValueWidget, value: Any, look: Look | None = None):
        look = look or Look()
        self.inner = inner
        self.is_set = look.make(
            ipywidgets.Checkbox, "4.5em", value=value is not None, description="set", indent=False
        )
        super().__init__([self.is_set, inner], layout=look.layout())
        self._syncing = False
        self._to_parts({"new": value})
        self.value = value
        self.is_set.observe(self._from_parts, "value")
        inner.observe(self._from_parts, "value")
        self.observe(self._to_parts, "value")

    def _from_parts(self, _change: Any) -> None:
        if self._syncing:
            return
        self.inner.disabled = not self.is_set.value
        self.value = self.inner.value if self.is_set.value else None

    def _to_parts(self, change: Any) -> None:
        value = change["new"]
        self._syncing = True
        try:
            if value is not None:
                self.inner.value = value
            self.is_set.value = value is not None
            self.inner.disabled = value is None
        finally:
            self._syncing = False

    def __repr__(self) -> str:
        return f"OptionalControl(value={self.value!r})"


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _without_none(tp: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, ``(tp, False)`` otherwise."""
    if _is_union(tp):
        args = [a for a in get_args(tp) if a is not _NONE]
        if len(args) == 1 and len(get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _bounds(info: FieldInfo, integer: bool) -> tuple[float | None, float | None]:
    """Inclusive (low, high) for a control; exclusive float bounds stay at the bound, and
    validation rejects the bound itself."""
    step = 1 if integer else 0
    low = info.ge if info.ge is not None else (info.gt + step if info.gt is not None else None)
    high = info.le if info.le is not None else (info.lt - step if info.lt is not None else None)
    return low, high


def _placeholder(tp: Any, info: FieldInfo) -> Any:
    """A value to show in an optional field's control while it is unset."""
    if get_origin(tp) is Literal:
        return get_args(tp)[0]
    if tp is str:
        return ""
    low, high = _bounds(info, integer=tp is int)
    if tp is int:
        return int(low) if low is not None else 0
    value = 1.0 if low is None else max(1.0, low)
    return value if high is None else min(value, high)


def _plain_control(tp: Any, info: FieldInfo, value: Any, look: Look) -> Any:
    literal = tp
    if _is_union(tp) and str in get_args(tp) and len(get_args(tp)) == 2:  # a Literal's names
        literal = next(a for a in get_args(tp) if a is not str)  # or another, e.g. the protocol's
    if get_origin(literal) is Literal:
        names = list(get_args(literal))
        options = [(str(a), a) for a in names + ([] if value in names else [value])]
        return look.make(ipywidgets.Dropdown, "16em", options=options, value=value)
    if tp is bool:
        return look.make(ipywidgets.Checkbox, "2em", value=value, indent=False)
    if tp is str:
        return look.make(ipywidgets.Text, "24em", value=value)
    if tp in (int, float):
        low, high = _bounds(info, integer=tp is int)
        if low is not None and high is not None:
            if tp is int:
                return look.make(ipywidgets.BoundedIntText, "16em", value=value, min=low, max=high)
            return look.make(
                ipywidgets.FloatSlider,
                "16em",
                value=value,
                min=low,
                max=high,
                step=(high - low) / 100,
                readout_format=".3g",
                continuous_update=False,
            )
        widget_class = ipywidgets.IntText if tp is int else ipywidgets.FloatText
        return look.make(widget_class, "16em", value=value)
    return None


def control_for(info: FieldInfo, value: Any, look: Look | None = None) -> ipywidgets.DOMWidget:
    """The control that edits ``info``'s field, showing ``value``."""
    look = look or Look()
    inner_tp, optional = _without_none(info.type)
    if optional:
        inner = _plain_control(inner_tp, info, _placeholder(inner_tp, info), look)
        if inner is not None:
            return OptionalControl(inner, value, look)
    else:
        control = _plain_control(info.type, info, value, look)
        if control is not None:
            return control
    return look.make(
        ipywidgets.Text,
        "24em",
        value=repr(value),
        disabled=True,
        tooltip="not editable in the form; set it in code",
    )


def field_row(
    name: str, doc: str, control: ipywidgets.DOMWidget, look: Look | None = None
) -> tuple[ipywidgets.HBox, ipywidgets.HTML]:
    """Lay out ``control`` in a row: its name, the control, a note. Returns the row and
    the note (which shows the doc, or an error)."""
    look = look or Look()
    note = look.make(ipywidgets.HTML, value=note_html(doc))
    label = look.make(ipywidgets.Label, LABEL_WIDTH, value=name, tooltip=doc)
    return look.make(ipywidgets.HBox, children=[label, control, note]), note
