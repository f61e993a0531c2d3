"""The base of every parameters class: a strict pydantic v2 model, validated at construction
and on assignment, nested too (``hp.agents["verifier"].top_p = 3`` also checks ``hp``, through
a weak link to each holder), raising :class:`~nip.errors.InvalidParameterError` with the full
address; on an error nothing changes. Relations between fields: :meth:`BaseParameters.validate`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, Self, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    model_serializer,
    model_validator,
)

from nip.errors import ConfigFileError, InvalidParameterError, NipError, UnknownKeyError


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


_BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}


def _bounds(field: Any) -> dict[str, float]:
    """A pydantic field's numeric bounds, in the order ge, gt, le, lt."""
    found = {k: getattr(m, k) for m in field.metadata for k in _BOUNDS if hasattr(m, k)}
    return {k: found[k] for k in _BOUNDS if k in found}


def _describe(tp: Any) -> str:
    """A short human description of a type, used in error messages."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is type(None):
        return "None"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin in (dict, Mapping):
        return f"a mapping of {_describe(args[0])} to {_describe(args[1])}"
    if origin in (list, tuple):
        return f"a list of {_describe(args[0])}"
    if isinstance(tp, type) and issubclass(tp, BaseParameters):
        return f"{tp.__name__} (or a dict of its fields)"
    return getattr(tp, "__name__", str(tp))


def _nip_error(error: ValidationError, cls: type[BaseParameters] | None) -> Exception:
    """pydantic's first error as nip's (a check's own, at its address, or a field's)."""
    first = error.errors(include_url=False)[0]
    loc, value = first["loc"], first.get("input")
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, InvalidParameterError):
        return cause.with_prefix(".".join(map(str, loc)))
    if isinstance(cause, NipError):
        return cause
    field = cls.model_fields.get(str(loc[0])) if cls is not None and loc else None
    if field is None:  # the whole object: neither a dict of fields nor an instance
        return InvalidParameterError("", value, _describe(cls))
    address = str(loc[0]) + "".join(f"[{p}]" for p in loc[1:] if isinstance(p, int))
    if first["type"] == "missing":
        required = "it is required"
        return InvalidParameterError(address, None, _describe(field.annotation), reason=required)
    if first["type"] in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        allowed = " and ".join(f"{_BOUNDS[k]} {b}" for k, b in _bounds(field).items())
        return InvalidParameterError(address, value, f"a number {allowed}")
    return InvalidParameterError(address, value, _describe(field.annotation))


@contextmanager
def _errors_at(address: str) -> Iterator[None]:
    """Raise what pydantic or a check raises as nip's errors, placed under ``address``."""
    try:
        yield
    except ValidationError as error:
        raised = _nip_error(error, None)
        if isinstance(raised, InvalidParameterError):
            raised = raised.with_prefix(address)
        raise raised from None
    except InvalidParameterError as error:
        raise error.with_prefix(address) from None


#: A float in exponent form without a dot (``1e-4``): text to YAML 1.1, a float to YAML 1.2.
_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _yaml12(value: Any, field: Any) -> Any:
    """``value``, or the float it spells if it is ``1e-4``-like text for a float field."""
    floats = float in (field.annotation, *get_args(field.annotation))
    is_text = isinstance(value, str) and _EXPONENT_FLOAT.fullmatch(value.strip())
    return float(value) if floats and is_text else value


def _holds_parameters(annotation: Any) -> bool:
    """Whether a field of this type is a dict of parameter objects (held as a HeldDict)."""
    value = get_args(annotation)[1] if get_origin(annotation) is dict else None
    return isinstance(value, type) and issubclass(value, BaseParameters)


def _find_subclass(base: type[BaseParameters], name: str) -> type[BaseParameters] | None:
    if base.__name__ == name:
        return base
    found = (_find_subclass(sub, name) for sub in base.__subclasses__())
    return next((cls for cls in found if cls is not None), None)


class BaseParameters(BaseModel):
    """Base of all parameter classes: validation, serialisation and lookup."""

    model_config = ConfigDict(strict=True, extra="forbid", protected_namespaces=())

    #: Where this object sits: (a weak reference to its holder, its address there).
    _holder: Any = PrivateAttr(None)

    def __init__(self, **values: Any) -> None:
        with _errors_at(""):
            super().__init__(**values)

    # Nested objects are still validated as by pydantic's own __init__ (with the context).
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ validation
    @model_validator(mode="wrap")
    @classmethod
    def _from_input(cls, data: Any, handler: Any, info: ValidationInfo) -> Any:
        """Read a dict of fields: ``_`` keys are metadata, ``_type`` may name a subclass to
        build instead, an unknown key is an error (dropped with ``ignore_extra_keys``), and a
        float field reads ``1e-4`` (text to YAML 1.1) as a float."""
        target = cls
        if isinstance(data, Mapping):
            type_name = data.get("_type")
            if type_name is not None and type_name != cls.__name__:
                target = _find_subclass(cls, type_name)  # type: ignore[assignment]
                if target is None:
                    raise InvalidParameterError(
                        "_type", type_name, f"{cls.__name__} or one of its subclasses"
                    )
            data = {k: v for k, v in data.items() if not str(k).startswith("_")}
            extra = set(data) - set(target.model_fields)
            if extra and not (info.context or {}).get("ignore_extra_keys"):
                raise UnknownKeyError(target.__name__, extra, target.model_fields)
            fields = target.model_fields
            data = {k: _yaml12(v, fields[k]) for k, v in data.items() if k not in extra}
            if target is not cls:
                return target.model_validate(data, context=info.context)
        try:
            return handler(data)
        except ValidationError as error:
            raise _nip_error(error, cls) from None

    @model_validator(mode="after")
    def _checked(self) -> Self:
        self.validate()
        self._adopt_children()
        return self

    def validate(self) -> None:  # type: ignore[override]
        """Check relations between fields. Subclasses override; raise InvalidParameterError."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self).model_fields:
            self.update(**{name: value})
        else:
            super().__setattr__(name, value)

    def update(self, **changes: Any) -> None:
        """Assign several fields at once, validated together with every holder; on an error
        nothing changes.

        Raises:
            UnknownKeyError: A name matches no field.
            InvalidParameterError: A value, or the combination, is not allowed; the error
                names the full address (``agents.verifier.top_p``).
        """
        if unknown := set(changes) - set(type(self).model_fields):
            raise UnknownKeyError(type(self).__name__, unknown, type(self).model_fields)
        chain = self._holders()
        here = chain[-1][1] if chain else ""
        with _errors_at(here):
            checked = type(self).model_validate({**self._values(), **changes})
        before = dict(self.__dict__)
        self.__dict__.update(checked.__dict__)
        self._adopt_children()
        try:
            for holder, address in chain:  # the nearest first
                with _errors_at(here[: len(here) - len(address)].rstrip(".")):
                    holder.validate()
        except Exception:
            self.__dict__.update(before)
            self._adopt_children()
            raise

    # --------------------------------------------------------- nesting addresses
    def _values(self) -> dict[str, Any]:
        return {name: self.__dict__[name] for name in type(self).model_fields}

    def _adopt_children(self) -> None:
        """Tell each nested parameters object where it sits (dict fields as :class:`HeldDict`)."""
        for name, field in type(self).model_fields.items():
            value = self.__dict__[name]
            if isinstance(value, BaseParameters):
                value._holder = (weakref.ref(self), name)
            elif isinstance(value, dict) and _holds_parameters(field.annotation):
                if not (isinstance(value, HeldDict) and value._holder() is self):
                    value = self.__dict__[name] = HeldDict(value, self, name)
                for key, item in value.items():
                    item._holder = (weakref.ref(self), f"{name}.{key}")

    def _holders(self) -> list[tuple[BaseParameters, str]]:
        """The objects that still hold this one, the nearest first, with its address in each."""
        chain: list[tuple[BaseParameters, str]] = []
        node, address = self, ""
        while node._holder is not None:
            holder, step = node._holder[0](), node._holder[1]
            if holder is None or any(holder is h for h, _ in chain):
                break
            try:
                if holder.get(step) is not node:  # replaced since: the link is stale
                    break
            except KeyError:
                break
            address = f"{step}.{address}" if address else step
            chain.append((holder, address))
            node = holder
        return chain

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Self:
        copied = super().__deepcopy__(memo)
        copied._adopt_children()
        return copied

    def __getstate__(self) -> dict[str, Any]:
        # Links to holders are weak references: never pickled, remade by the holder.
        return {**super().__getstate__(), "__pydantic_private__": {"_holder": None}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._adopt_children()

    def __eq__(self, other: object) -> bool:
        same = type(self) is type(other)
        return same and self._values() == other._values()  # type: ignore[attr-defined]

    @classmethod
    def fields_info(cls) -> list[FieldInfo]:
        """Describe every field: name, type, default, description and bounds."""
        return [
            FieldInfo(
                name,
                field.annotation,
                field.get_default(call_default_factory=True),
                field.description or "",
                **_bounds(field),
            )
            for name, field in cls.model_fields.items()
        ]

    # --------------------------------------------------------------- serialisation
    @model_serializer(mode="wrap")
    def _tagged(self, handler: Any) -> dict[str, Any]:
        return {"_type": type(self).__name__, **handler(self)}

    def to_dict(self) -> dict[str, Any]:
        """Convert to a plain dict (JSON/YAML-safe), with ``_type`` naming each class."""
        return self.model_dump(serialize_as_any=True)

    @classmethod
    def from_dict(cls, params_dict: Mapping[str, Any], ignore_extra_keys: bool = False) -> Self:
        """Build from a dict such as :meth:`to_dict` makes (``_`` keys are metadata; ``_type``
        may name a subclass to build instead).

        Raises:
            UnknownKeyError: A key matches no field and ``ignore_extra_keys`` is False.
            InvalidParameterError: A value is not allowed.
        """
        if not isinstance(params_dict, Mapping):
            raise InvalidParameterError(cls.__name__, params_dict, "a mapping of field values")
        with _errors_at(""):
            return cls.model_validate(params_dict, context={"ignore_extra_keys": ignore_extra_keys})

    @classmethod
    def load_from_wandb_config(cls, wandb_config: Mapping[str, Any]) -> Self:
        """Build from a W&B run's config (``run.config["agents"]["verifier"]``), dropping keys
        nip has no field for (the original's tensor-agent fields, for instance)."""
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
        """Parse JSON text (``options`` go to :meth:`from_dict`); ConfigFileError if not JSON."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigFileError(f"not valid JSON: {error}") from None
        return cls.from_dict(data, ignore_extra_keys=ignore_extra_keys, **options)

    @classmethod
    def from_yaml(cls, text: str, ignore_extra_keys: bool = False, **options: Any) -> Self:
        """Parse YAML text (``options`` go to :meth:`from_dict`); ConfigFileError if not YAML."""
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
        """Read a file written by :meth:`save` (``options`` go to :meth:`from_dict`).

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
        """Get a value by dotted address (``"agents.verifier.temperature"``); KeyError if a
        part names no parameter."""
        current: Any = self
        walked: list[str] = []
        for part in address.split("."):
            if isinstance(current, BaseParameters):
                current = current._values()
            if not isinstance(current, Mapping):
                at = ".".join(walked)
                raise KeyError(f"{address!r}: {at!r} is a value, not a group of parameters")
            if part not in current:
                where = ".".join(walked) or "the top level"
                raise KeyError(f"{address!r}: no parameter {part!r} under {where}")
            current = current[part]
            walked.append(part)
        return current

    @classmethod
    def construct_test_params(cls) -> Self:
        """Build a small, offline set of parameters for tests."""
        return cls()

    # -------------------------------------------------------------------- display
    def widget(self, **options: Any) -> Any:
        """Removed: raises NipError pointing to ``nip.widgets.ParametersForm(params)``."""
        raise NipError(
            "params.widget() was removed: use `from nip.widgets import ParametersForm` and "
            "ParametersForm(params, **options) (the same form, with the same options)"
        )

    def _repr_html_(self) -> str:
        from nip.parameters._display import parameters_to_html

        return parameters_to_html(self)


class HeldDict(dict):
    """A dict field of parameter objects (``HyperParameters.agents``): a change to it is the
    holder's field assigned anew (validated; on an error nothing changes). Copies and pickles
    are plain dicts."""

    def __init__(self, items: Mapping[str, Any], holder: BaseParameters, name: str):
        super().__init__(items)
        self._holder, self._name = weakref.ref(holder), name

    def _change(self, method: str, *args: Any) -> Any:
        holder = self._holder()
        if holder is None or holder.__dict__.get(self._name) is not self:
            return getattr(dict, method)(self, *args)  # no longer held: an ordinary dict
        items = dict(self)
        result = getattr(dict, method)(items, *args)
        holder.update(**{self._name: items})
        dict.clear(self)
        dict.update(self, holder.__dict__[self._name])
        holder.__dict__[self._name] = self  # the same dict stays held
        holder._adopt_children()
        return result

    def __setitem__(self, key: str, value: Any) -> None:
        self._change("__setitem__", key, value)

    def __delitem__(self, key: str) -> None:
        self._change("__delitem__", key)

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._change("update", dict(*args, **kwargs))

    def __ior__(self, other: Any) -> Self:  # type: ignore[override]
        self.update(other)
        return self

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key: str, *default: Any) -> Any:
        return self._change("pop", key, *default)

    def popitem(self) -> tuple[str, Any]:
        return self._change("popitem")

    def clear(self) -> None:
        self._change("clear")

    def __reduce_ex__(self, protocol: Any) -> Any:
        return dict, (dict(self),)  # no link to the holder: it wraps the copy again

    def __copy__(self) -> dict[str, Any]:
        return dict(self)
