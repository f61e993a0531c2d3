"""The base class every parameters dataclass derives from.

A parameters class is a plain ``@dataclass`` whose fields are declared with :func:`param`
(a default, a one-line doc and optional bounds). The base class gives it

* validation at construction *and* on assignment, from the type hints and bounds, with
  :class:`~nip.errors.InvalidParameterError` naming the field, the value and what is allowed;
* ``to_dict`` / ``from_dict`` (never mutating its input), ``get("a.b.c")``;
* YAML and JSON load/save;
* a ``_repr_html_`` table for notebooks.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import operator
import types
import typing
import weakref
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Literal, Self, Union, get_args, get_origin

from nip.errors import ConfigFileError, InvalidParameterError, NipError, UnknownKeyError

_MISSING = dataclasses.MISSING


def param(
    default: Any = _MISSING,
    *,
    doc: str,
    default_factory: Any = _MISSING,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Any:
    """Declare a parameter field with its documentation and optional numeric bounds.

    Args:
        default: The default value.
        doc: One line saying what the field controls (shown in widgets and HTML reprs).
        default_factory: Used instead of ``default`` for mutable defaults.
        ge, gt, le, lt: Inclusive/exclusive numeric bounds, checked when the value is not None.
    """
    metadata = {"doc": doc, "ge": ge, "gt": gt, "le": le, "lt": lt}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    """What a form or a document needs to know about one parameter field."""

    name: str
    type: Any
    default: Any
    doc: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None


@cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _describe(tp: Any) -> str:
    """A short human description of a type, used in error messages."""
    if tp is type(None):
        return "None"
    if get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if _is_union(tp):
        return " or ".join(_describe(a) for a in get_args(tp))
    origin = get_origin(tp)
    if origin in (dict, Mapping):
        key, value = get_args(tp)
        return f"a mapping of {_describe(key)} to {_describe(value)}"
    if origin in (list, tuple):
        return f"a list of {_describe(get_args(tp)[0])}"
    if isinstance(tp, type) and issubclass(tp, BaseParameters):
        return f"{tp.__name__} (or a dict of its fields)"
    return getattr(tp, "__name__", str(tp))


class _Mismatch(NipError):
    """Internal: a value does not match a type."""


def _find_subclass(base: type[BaseParameters], name: str) -> type[BaseParameters] | None:
    if base.__name__ == name:
        return base
    for sub in base.__subclasses__():
        found = _find_subclass(sub, name)
        if found is not None:
            return found
    return None


def _convert(tp: Any, value: Any, address: str, ignore_extra_keys: bool) -> Any:
    """Check ``value`` against ``tp`` and return it, converting dicts to parameter objects.

    Raises:
        InvalidParameterError: If the value does not match.
    """
    if tp is Any:
        return value
    if tp is type(None):
        if value is None:
            return None
        raise _Mismatch
    origin = get_origin(tp)
    if origin is Literal:
        # Match type too, so True never passes for Literal[1] nor 1 for Literal[True].
        if any(value == a and type(value) is type(a) for a in get_args(tp)):
            return value
        raise _Mismatch
    if _is_union(tp):
        # Try None first so Optional[X] with None never hits X's conversion.
        options = sorted(get_args(tp), key=lambda a: a is not type(None))
        for option in options:
            try:
                return _convert(option, value, address, ignore_extra_keys)
            except _Mismatch:
                continue
            except InvalidParameterError:
                if len(options) == 2 and type(None) in options:
                    raise
                continue
        raise _Mismatch
    if origin in (dict, Mapping):
        key_tp, value_tp = get_args(tp)
        if not isinstance(value, Mapping):
            raise _Mismatch
        return {
            _convert(key_tp, k, address, ignore_extra_keys): _convert_field(
                value_tp, v, f"{address}.{k}", ignore_extra_keys
            )
            for k, v in value.items()
        }
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise _Mismatch
        (item_tp, *_) = get_args(tp)
        items = [
            _convert_field(item_tp, v, f"{address}[{i}]", ignore_extra_keys)
            for i, v in enumerate(value)
        ]
        return tuple(items) if origin is tuple else items
    if isinstance(tp, type) and issubclass(tp, BaseParameters):
        if isinstance(value, tp):
            return value
        if isinstance(value, Mapping):
            try:
                return tp.from_dict(value, ignore_extra_keys=ignore_extra_keys)
            except InvalidParameterError as error:
                raise error.with_prefix(address) from None
        raise _Mismatch
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch
    if tp is int:
        if isinstance(value, bool):
            raise _Mismatch
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise _Mismatch
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Mismatch
        return float(value)
    if tp is str:
        if isinstance(value, str):
            return value
        raise _Mismatch
    if isinstance(tp, type):
        if isinstance(value, tp):
            return value
        raise _Mismatch
    return value


def _convert_field(tp: Any, value: Any, address: str, ignore_extra_keys: bool) -> Any:
    try:
        return _convert(tp, value, address, ignore_extra_keys)
    except _Mismatch:
        raise InvalidParameterError(address, value, _describe(tp)) from None


def _check_bounds(info: FieldInfo, value: Any, address: str) -> None:
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return
    bounds = (
        (info.ge, operator.ge, ">="),
        (info.gt, operator.gt, ">"),
        (info.le, operator.le, "<="),
        (info.lt, operator.lt, "<"),
    )
    if any(bound is not None and not ok(value, bound) for bound, ok, _ in bounds):
        allowed = " and ".join(f"{s} {b}" for b, _, s in bounds if b is not None)
        raise InvalidParameterError(address, value, f"a number {allowed}")


@dataclasses.dataclass
class BaseParameters:
    """Base of all parameter dataclasses: validation, serialisation and lookup."""

    #: Keys starting with an underscore in a dict are metadata (``_type``, versions).
    _METADATA_PREFIX: ClassVar[str] = "_"

    # ------------------------------------------------------------------ validation
    def __post_init__(self) -> None:
        for info in self.fields_info():
            value = _convert_field(info.type, getattr(self, info.name), info.name, False)
            _check_bounds(info, value, info.name)
            object.__setattr__(self, info.name, value)
        self.validate()
        self._link_children()
        object.__setattr__(self, "_initialised", True)

    def validate(self) -> None:
        """Check relations between fields. Subclasses override; raise InvalidParameterError."""

    def __setattr__(self, name: str, value: Any) -> None:
        if not self.__dict__.get("_initialised") or name not in self._field_names():
            object.__setattr__(self, name, value)
            return
        self._assign({name: value})

    def update(self, **changes: Any) -> None:
        """Assign several fields at once, validated together; on an error nothing changes.

        For fields that constrain each other (``lora_alpha`` and ``lora_alpha_scale``, a
        protocol and its agents), where assigning them one at a time would pass through a
        state that ``validate`` rejects.

        Raises:
            UnknownKeyError: A name matches no field.
            InvalidParameterError: A value, or the combination, is not allowed.
        """
        unknown = set(changes) - self._field_names()
        if unknown:
            raise UnknownKeyError(type(self).__name__, unknown, self._field_names())
        self._assign(changes)

    def _assign(self, changes: Mapping[str, Any]) -> None:
        """Convert, bound-check and set ``changes``, then validate this object and every
        object that holds it (a nested agent's change must keep its shared model group in
        agreement); on an error nothing changes and the error names the full address."""
        chain = self._owner_chain()
        here = _address(chain)
        prefix = f"{here}." if here else ""
        infos = {i.name: i for i in self.fields_info() if i.name in changes}
        converted = {}
        for name, value in changes.items():
            converted[name] = _convert_field(infos[name].type, value, prefix + name, False)
            _check_bounds(infos[name], converted[name], prefix + name)
        old = {name: getattr(self, name) for name in converted}
        for name, value in converted.items():
            object.__setattr__(self, name, value)
        try:
            self._validate_with_holders(chain, here)
        except Exception:
            for name, value in old.items():
                object.__setattr__(self, name, value)
            raise
        self._link_children()

    def _validate_with_holders(self, chain: list[tuple[BaseParameters, str]], here: str) -> None:
        """Validate this object, then its holders; errors carry addresses from the outermost."""
        try:
            self.validate()
        except InvalidParameterError as error:
            raise (error.with_prefix(here) if here else error) from None
        for holder, address in chain:  # the nearest first
            holder_address = here[: len(here) - len(address)].rstrip(".")
            try:
                holder.validate()
            except InvalidParameterError as error:
                raise (error.with_prefix(holder_address) if holder_address else error) from None

    # --------------------------------------------------------- nesting addresses
    def _link_children(self) -> None:
        """Tell each nested parameters object (a field, or a value of a dict field) where it
        sits, so that assigning to it validates this object too and errors name the full
        address (``agents.verifier.temperature``). A dict field of parameter objects is held
        as a :class:`HeldDict`, so that setting one of its items is checked as well."""
        held_types = _held_dict_types(type(self))
        for f in dataclasses.fields(self):
            value = self.__dict__.get(f.name)
            if isinstance(value, BaseParameters):
                object.__setattr__(value, "_owner", (weakref.ref(self), f.name, None))
            elif isinstance(value, dict):
                if f.name in held_types and not (
                    isinstance(value, HeldDict) and value._holder() is self
                ):
                    value = HeldDict(value, self, f.name, held_types[f.name])
                    object.__setattr__(self, f.name, value)
                for key, item in value.items():
                    if isinstance(item, BaseParameters):
                        object.__setattr__(item, "_owner", (weakref.ref(self), f.name, key))

    def _owner_chain(self) -> list[tuple[BaseParameters, str]]:
        """The objects that hold this one, the nearest first, each with this object's address
        in it. A link is followed only while the holder still holds this very object."""
        chain: list[tuple[BaseParameters, str]] = []
        node, address = self, ""
        while (link := node.__dict__.get("_owner")) is not None:
            holder_ref, field_name, key = link
            holder = holder_ref()
            if holder is None or any(holder is h for h, _ in chain):
                break
            held = holder.__dict__.get(field_name)
            if key is not None:
                held = held.get(key) if isinstance(held, dict) else None
            if held is not node:  # replaced since: the link is stale
                break
            step = field_name if key is None else f"{field_name}.{key}"
            address = f"{step}.{address}" if address else step
            chain.append((holder, address))
            node = holder
        return chain

    def __getstate__(self) -> dict[str, Any]:
        # Links to holders are weak references: never pickled, remade by the holder.
        return {k: v for k, v in self.__dict__.items() if k != "_owner"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._link_children()

    @classmethod
    def _field_names(cls) -> frozenset[str]:
        return frozenset(f.name for f in dataclasses.fields(cls))

    @classmethod
    def fields_info(cls) -> list[FieldInfo]:
        """Describe every field: name, resolved type, default, doc and bounds."""
        hints = _type_hints(cls)
        infos = []
        for f in dataclasses.fields(cls):
            if f.default is not _MISSING:
                default = f.default
            elif f.default_factory is not _MISSING:
                default = f.default_factory()
            else:
                default = _MISSING
            meta = f.metadata
            infos.append(
                FieldInfo(
                    name=f.name,
                    type=hints[f.name],
                    default=default,
                    doc=meta.get("doc", ""),
                    ge=meta.get("ge"),
                    gt=meta.get("gt"),
                    le=meta.get("le"),
                    lt=meta.get("lt"),
                )
            )
        return infos

    # --------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        """Convert to a plain dict (JSON/YAML-safe), with ``_type`` naming the class."""
        out: dict[str, Any] = {"_type": type(self).__name__}
        for f in dataclasses.fields(self):
            out[f.name] = _to_plain(getattr(self, f.name))
        return out

    @classmethod
    def from_dict(cls, params_dict: Mapping[str, Any], ignore_extra_keys: bool = False) -> Self:
        """Build a parameters object from a dict such as one made by :meth:`to_dict`.

        The input is never modified. Keys starting with ``_`` are metadata and skipped,
        except ``_type``, which may name a subclass of ``cls`` to build instead.

        Args:
            params_dict: The field values; nested parameters may be dicts.
            ignore_extra_keys: Drop keys that match no field instead of raising.

        Raises:
            UnknownKeyError: A key matches no field and ``ignore_extra_keys`` is False.
            InvalidParameterError: A value is not allowed.
        """
        if not isinstance(params_dict, Mapping):
            raise InvalidParameterError(cls.__name__, params_dict, "a mapping of field values")
        data = copy.deepcopy(dict(params_dict))
        target: type[BaseParameters] = cls
        type_name = data.get("_type")
        if type_name is not None and type_name != cls.__name__:
            found = _find_subclass(cls, type_name)
            if found is None:
                raise InvalidParameterError(
                    "_type", type_name, f"{cls.__name__} or one of its subclasses"
                )
            target = found
        data = {k: v for k, v in data.items() if not k.startswith(cls._METADATA_PREFIX)}
        hints = _type_hints(target)
        known = target._field_names()
        extra = set(data) - known
        if extra and not ignore_extra_keys:
            raise UnknownKeyError(target.__name__, extra, known)
        kwargs = {
            k: _convert_field(hints[k], v, k, ignore_extra_keys)
            for k, v in data.items()
            if k in known
        }
        return target(**kwargs)  # type: ignore[return-value]

    @classmethod
    def load_from_wandb_config(cls, wandb_config: Mapping[str, Any]) -> Self:
        """Build from a W&B run's config (e.g. ``run.config["agents"]["verifier"]``).

        As :meth:`from_dict` with ``ignore_extra_keys=True``: a logged config may hold keys
        this version has no field for (the original's tensor-agent fields, for instance).
        """
        return cls.from_dict(wandb_config, ignore_extra_keys=True)

    def to_json(self, indent: int | None = 2) -> str:
        """Serialise to JSON."""
        return json.dumps(self.to_dict(), indent=indent)

    def to_yaml(self) -> str:
        """Serialise to YAML (keys in field order)."""
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_json(cls, text: str, ignore_extra_keys: bool = False, **options: Any) -> Self:
        """Parse JSON text made by :meth:`to_json` (``options`` go to :meth:`from_dict`).

        Raises:
            ConfigFileError: The text is not JSON.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigFileError(f"not valid JSON: {error}") from None
        return cls.from_dict(data, ignore_extra_keys=ignore_extra_keys, **options)

    @classmethod
    def from_yaml(cls, text: str, ignore_extra_keys: bool = False, **options: Any) -> Self:
        """Parse YAML text made by :meth:`to_yaml` or by hand (``options`` go to
        :meth:`from_dict`).

        Raises:
            ConfigFileError: The text is not YAML.
        """
        import yaml

        try:
            loaded = yaml.safe_load(text) or {}
        except yaml.YAMLError as error:  # its message spans lines: one line here
            raise ConfigFileError(f"not valid YAML: {' '.join(str(error).split())}") from None
        return cls.from_dict(loaded, ignore_extra_keys=ignore_extra_keys, **options)

    def save(self, path: str | Path) -> Path:
        """Write to ``path`` as YAML (``.yaml``/``.yml``) or JSON (anything else)."""
        path = Path(path)
        text = self.to_yaml() if path.suffix in {".yaml", ".yml"} else self.to_json()
        path.write_text(text, encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path, ignore_extra_keys: bool = False, **options: Any) -> Self:
        """Read a file written by :meth:`save` (YAML or JSON, chosen by suffix).

        ``options`` go to :meth:`from_dict` (``force=True`` for ``HyperParameters``).

        Raises:
            ConfigFileError: The file is missing, unreadable, or not valid YAML or JSON.
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise ConfigFileError(f"{path}: not a text file ({error.reason})", path=path) from None
        except OSError as error:  # missing, a folder, unreadable
            raise ConfigFileError(f"{path}: {error.strerror}", path=path) from None
        parse = cls.from_yaml if path.suffix in {".yaml", ".yml"} else cls.from_json
        try:
            return parse(text, ignore_extra_keys=ignore_extra_keys, **options)
        except ConfigFileError as error:
            raise ConfigFileError(f"{path}: {error}", path=path) from None

    # --------------------------------------------------------------------- lookup
    def get(self, address: str) -> Any:
        """Get a value by dot-separated address, e.g. ``"agents.verifier.temperature"``.

        Raises:
            KeyError: If any part of the address does not name a parameter, including an
                address that continues past a plain value.
        """
        current: Any = self
        walked: list[str] = []
        for part in address.split("."):
            if isinstance(current, BaseParameters):
                if part not in current._field_names():
                    raise KeyError(_bad_address(address, walked, part))
                current = getattr(current, part)
            elif isinstance(current, Mapping):
                if part not in current:
                    raise KeyError(_bad_address(address, walked, part))
                current = current[part]
            else:
                raise KeyError(
                    f"{address!r}: {'.'.join(walked)!r} is a value, not a group of parameters"
                )
            walked.append(part)
        return current

    @classmethod
    def construct_test_params(cls) -> Self:
        """Build a small, offline set of parameters for tests."""
        return cls()

    # -------------------------------------------------------------------- display
    def widget(self, **options: Any) -> Any:
        """Removed: the form is ``nip.widgets.ParametersForm(params)``.

        Configuration sits beneath the widgets that edit it, so it does not build them.

        Raises:
            NipError: Always, saying what to call instead.
        """
        raise NipError(
            "params.widget() was removed: use `from nip.widgets import ParametersForm` and "
            "ParametersForm(params, **options) (the same form, with the same options)"
        )

    def _repr_html_(self) -> str:
        from nip.parameters._display import parameters_to_html

        return parameters_to_html(self)


def _bad_address(address: str, walked: list[str], part: str) -> str:
    where = ".".join(walked) or "the top level"
    return f"{address!r}: no parameter {part!r} under {where}"


def _address(chain: list[tuple[BaseParameters, str]]) -> str:
    """An object's address from the outermost holder (``agents.verifier``), given its owner
    chain (see :meth:`BaseParameters._owner_chain`); empty for an object nobody holds."""
    return chain[-1][1] if chain else ""


@cache
def _held_dict_types(cls: type[BaseParameters]) -> dict[str, Any]:
    """The dict fields of ``cls`` whose values are parameter objects, with that value type."""
    types_by_field = {}
    for info in cls.fields_info():
        if get_origin(info.type) is dict:
            value_type = get_args(info.type)[1]
            if isinstance(value_type, type) and issubclass(value_type, BaseParameters):
                types_by_field[info.name] = value_type
    return types_by_field


class HeldDict(dict):
    """A dict field of parameter objects (``HyperParameters.agents``) as its holder keeps it.

    Setting, replacing or removing an item is checked as assigning the whole field would be:
    a plain dict is converted to the parameters class, the holder (and its own holders) are
    validated, and on an error nothing changes. ``hp.agents["verifier"] = {...}`` is
    therefore as safe as ``hp.agents["verifier"].temperature = 0.2``. Copies and pickles are
    plain dicts; the holder wraps them again.
    """

    def __init__(self, items: Mapping[str, Any], holder: BaseParameters, name: str, tp: Any):
        super().__init__(items)
        self._holder = weakref.ref(holder)
        self._name = name
        self._type = tp

    def _change(self, apply: Any) -> Any:
        """Run ``apply`` (which mutates this dict), then validate the holders; undo on error."""
        holder = self._holder()
        if holder is None or holder.__dict__.get(self._name) is not self:
            return apply()  # no longer held: an ordinary dict
        before = dict(self)
        chain = holder._owner_chain()
        here = _address(chain)
        try:
            result = apply()
            holder._validate_with_holders(chain, here)
        except Exception:
            dict.clear(self)
            dict.update(self, before)
            raise
        holder._link_children()
        return result

    def _converted(self, key: str, value: Any) -> Any:
        holder = self._holder()
        here = _address(holder._owner_chain()) if holder is not None else ""
        address = f"{here}.{self._name}.{key}" if here else f"{self._name}.{key}"
        return _convert_field(self._type, value, address, False)

    def __setitem__(self, key: str, value: Any) -> None:
        value = self._converted(key, value)
        self._change(lambda: dict.__setitem__(self, key, value))

    def __delitem__(self, key: str) -> None:
        self._change(lambda: dict.__delitem__(self, key))

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        items = {k: self._converted(k, v) for k, v in dict(*args, **kwargs).items()}
        self._change(lambda: dict.update(self, items))

    def __ior__(self, other: Any) -> Self:  # type: ignore[override]
        self.update(other)
        return self

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key in self:
            return self[key]
        self[key] = default
        return self[key]

    def pop(self, key: str, *default: Any) -> Any:
        if key not in self and default:
            return default[0]
        return self._change(lambda: dict.pop(self, key))

    def popitem(self) -> tuple[str, Any]:
        return self._change(lambda: dict.popitem(self))

    def clear(self) -> None:
        self._change(lambda: dict.clear(self))

    def __reduce_ex__(self, protocol: Any) -> Any:
        return dict, (dict(self),)  # no link to the holder: it wraps the copy again

    def __copy__(self) -> dict[str, Any]:
        return dict(self)


def _to_plain(value: Any) -> Any:
    if isinstance(value, BaseParameters):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: _to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_plain(v) for v in value]
    return value
