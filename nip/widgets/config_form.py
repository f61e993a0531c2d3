"""A form generated from a parameters dataclass, editing the live object.

::

    params = HyperParameters.construct_test_params()
    form = ParametersForm(params)                # edits params in place
    form.controls["rl.num_iterations"].value = 5 # what a user's edit does
    params.rl.num_iterations                     # 5
    form.save("debate.yaml")                     # HyperParameters.load(...) == params

One control per field, chosen from the field's type hint and bounds:

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

import copy
import types
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import ipywidgets
import traitlets

from nip.errors import NipError
from nip.parameters import BaseParameters, FieldInfo, HyperParameters, PureTextAgentParameters
from nip.protocols import VERIFIER, protocol_class
from nip.utils import counted
from nip.widgets._html import PlainTextRepr, error_html, note_html, pre_html
from nip.widgets._tasks import button

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


def control_for(info: FieldInfo, value: Any, look: Look) -> ipywidgets.DOMWidget:
    """The control that edits ``info``'s field, showing ``value``."""
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
    name: str, doc: str, control: ipywidgets.DOMWidget, look: Look
) -> tuple[ipywidgets.HBox, ipywidgets.HTML]:
    """Lay out ``control`` in a row: its name, the control, a note. Returns the row and
    the note (which shows the doc, or an error)."""
    note = look.make(ipywidgets.HTML, value=note_html(doc))
    label = look.make(ipywidgets.Label, "16em", value=name, tooltip=doc)  # controls line up
    return look.make(ipywidgets.HBox, children=[label, control, note]), note


# ------------------------------------------------------------------- the form
def agents_for_protocol(
    params: HyperParameters, protocol: str
) -> dict[str, PureTextAgentParameters]:
    """The agents ``params`` would have under ``protocol``: shared ones kept, a new one a copy
    of an agent of the same role (verifier or prover), or from defaults."""
    agents = {}
    for name in protocol_class(protocol).agent_names:
        if name in params.agents:
            agents[name] = params.agents[name]
            continue
        same_role = [a for n, a in params.agents.items() if (n == VERIFIER) == (name == VERIFIER)]
        agents[name] = copy.deepcopy(same_role[0]) if same_role else PureTextAgentParameters()
    return agents


def _is_params_class(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseParameters)


def _descendants(cls: type) -> list[type]:
    return [d for sub in cls.__subclasses__() for d in (sub, *_descendants(sub))]


class ParametersForm(PlainTextRepr, ipywidgets.VBox):
    """Edit a parameters object in place: a control per field, nested groups in an
    accordion, the agents in tabs, a YAML preview and a save button.

    A change assigns the field at once, validated by the class and every enclosing object. A
    rejected value stays in its control with the reason in red, the object keeping its old
    value, until a later change makes the two valid together. Changing ``interaction_protocol``
    gives the new protocol's agents (:func:`agents_for_protocol`). Edits made in code show
    after :meth:`refresh`.

    Args:
        save_path: Where :meth:`save` writes (YAML for ``.yaml``/``.yml``, else JSON).

    Attributes:
        controls: Each field's control by dotted address (``"agents.verifier.top_p"``);
            setting its ``value`` is what a user's edit does.
        notes: The HTML beside each control: the field's doc, or the error in red.
    """

    def __init__(self, params: BaseParameters, *, save_path: str | Path = "params.yaml"):
        super().__init__()
        self.params = params
        self.controls: dict[str, ipywidgets.DOMWidget] = {}
        self.notes: dict[str, ipywidgets.HTML] = {}
        self._docs: dict[str, str] = {}
        self._errors: dict[str, str] = {}
        self._pending: dict[str, dict[str, Any]] = {}  # object address -> rejected values
        # mapping address -> (its signature now, rebuild its tabs, the signature it was built at)
        self._mappings: dict[str, tuple[Callable[[], tuple], Callable[[], None], tuple]] = {}
        self._look = Look()
        self._body = ipywidgets.VBox()
        self.yaml_preview = ipywidgets.HTML()
        self.save_path = ipywidgets.Text(value=str(save_path), description="save to")
        self.save_button = button("Save", "save", self.save)
        self.save_status = ipywidgets.HTML()
        preview = ipywidgets.Accordion([self.yaml_preview], titles=("YAML",))
        self.children = [
            self._body,
            preview,
            ipywidgets.HBox([self.save_path, self.save_button, self.save_status]),
        ]
        self.refresh()

    # ----------------------------------------------------------------- public
    def refresh(self) -> None:
        """Rebuild every control from the object's current values (forgets rejected ones)."""
        self._forget("")
        self._body.children = [self._object_form(self.params, "")]
        self._update_preview()

    def error(self, address: str) -> str:
        """The error shown beside the field at ``address`` ("" when its value was accepted)."""
        return self._errors.get(address, "")

    @property
    def rejected(self) -> dict[str, Any]:
        """Values shown in the form that the object did not accept, by dotted address."""
        return {p + n: v for p, values in self._pending.items() for n, v in values.items()}

    def save(self, path: str | Path | None = None) -> Path | None:
        """Write the object to ``path`` (default: the "save to" box); None if it failed."""
        target = Path(path if path is not None else self.save_path.value).expanduser()
        try:
            written = self.params.save(target)
        except OSError as error:
            self.save_status.value = error_html(f"not saved: {error}")
            return None
        message = f"saved to {written}"
        if self.rejected:
            message += f" (without the {counted(len(self.rejected), 'rejected value')} in red)"
        self.save_status.value = note_html(message)
        return written

    # ------------------------------------------------------------- building
    def _forget(self, prefix: str) -> None:
        tables = (self.controls, self.notes, self._docs, self._errors, self._mappings)
        for table in (*tables, self._pending):
            for key in [k for k in table if k.startswith(prefix)]:
                del table[key]

    def _object_form(self, obj: BaseParameters, prefix: str) -> ipywidgets.VBox:
        rows: list[ipywidgets.Widget] = []
        groups: list[tuple[str, ipywidgets.Widget]] = []
        for info in obj.fields_info():
            if _is_params_class(info.type):
                groups.append((info.name, self._nested_form(obj, prefix, info)))
            elif get_origin(info.type) in (dict, Mapping) and _is_params_class(
                get_args(info.type)[1]
            ):
                groups.append((info.name, self._mapping_form(obj, prefix + info.name)))
            else:
                control = control_for(info, getattr(obj, info.name), self._look)
                assign = partial(self._assign, obj, prefix, info.name)
                control.observe(lambda change, assign=assign: assign(change["new"]), "value")
                rows.append(self._register(prefix + info.name, info.doc, control))
        if groups:
            titles = tuple(title for title, _ in groups)
            rows.append(ipywidgets.Accordion([w for _, w in groups], titles=titles))
        return self._look.make(ipywidgets.VBox, children=rows)

    def _register(self, address: str, doc: str, control: ipywidgets.DOMWidget) -> ipywidgets.HBox:
        row, note = field_row(address.rsplit(".", 1)[-1], doc, control, self._look)
        self.controls[address], self.notes[address], self._docs[address] = control, note, doc
        return row

    def _nested_form(self, parent: BaseParameters, prefix: str, info: FieldInfo) -> ipywidgets.VBox:
        address = prefix + info.name
        box = ipywidgets.VBox()
        # The declared class's descendants (itself when it has none), and the current class.
        choices = _descendants(info.type) or [info.type]
        if (current := type(getattr(parent, info.name))) not in choices:
            choices.insert(0, current)

        def build() -> None:
            child = getattr(parent, info.name)
            self._forget(address + ".")
            form = self._object_form(child, address + ".")
            if len(choices) == 1:
                box.children = [form]
                return
            picker = ipywidgets.Dropdown(
                options=[(c.__name__, c) for c in choices], value=type(child)
            )
            picker.observe(pick, "value")
            box.children = [self._register(address, "Which kind.", picker), form]

        def pick(change: Any) -> None:
            if self._assign(parent, prefix, info.name, change["new"]()):
                build()

        build()
        return box

    def _mapping_form(self, parent: BaseParameters, address: str) -> ipywidgets.Tab:
        tab = ipywidgets.Tab()
        name = address.rsplit(".", 1)[-1]

        def signature() -> tuple:
            mapping = getattr(parent, name)
            return tuple(mapping), tuple(id(v) for v in mapping.values())

        def build() -> None:
            mapping = getattr(parent, name)
            self._forget(address + ".")
            tab.children = [
                self._object_form(value, f"{address}.{key}.") for key, value in mapping.items()
            ]
            tab.titles = tuple(str(key) for key in mapping)
            self._mappings[address] = (signature, build, signature())

        build()
        return tab

    # -------------------------------------------------------------- changes
    def _assign(self, obj: BaseParameters, prefix: str, name: str, value: Any) -> bool:
        """Assign ``obj.name = value`` (with the object's rejected values if together they
        are valid); show the error if it is rejected. Returns whether it was accepted."""
        pending = self._pending.setdefault(prefix, {})
        pending.pop(name, None)
        attempts = [{**pending, name: value}, {name: value}] if pending else [{name: value}]
        error: Exception | None = None
        for changes in attempts:
            if isinstance(obj, HyperParameters) and "interaction_protocol" in changes:
                protocol = changes["interaction_protocol"]
                changes.setdefault("agents", agents_for_protocol(obj, protocol))
            try:  # validated with every object that holds obj; nothing changes if rejected
                obj.update(**changes)
            except NipError as rejected:
                error = rejected
                continue
            for field in changes:
                pending.pop(field, None)
                self._show_error(prefix + field, "")
            self._sync_mappings()
            self._update_preview()
            return True
        pending[name] = value
        self._show_error(prefix + name, str(error))
        return False

    def _show_error(self, address: str, message: str) -> None:
        if message:
            self._errors[address] = message
        else:
            self._errors.pop(address, None)
        note = self.notes.get(address)
        if note is not None:
            doc = note_html(self._docs.get(address, ""))
            note.value = f"{error_html(message)}<br>{doc}" if message else doc

    def _sync_mappings(self) -> None:
        for address, (signature, build, seen) in list(self._mappings.items()):
            if address in self._mappings and signature() != seen:
                build()

    def _update_preview(self) -> None:
        self.yaml_preview.value = pre_html(self.params.to_yaml())

    def __repr__(self) -> str:
        return (
            f"ParametersForm({type(self.params).__name__}, fields={len(self.controls)}, "
            f"rejected={len(self.rejected)})"
        )
