"""Changing a configuration by dotted path: ``--set rl.num_iterations=4`` and its Python form.

::

    params.with_overrides({"agents.prover.model_name": "gpt-4o-2024-08-06", "seed": 3})
    parse_override("rl.num_iterations=4")          # ("rl.num_iterations", 4)

An override is applied to the configuration's dict and the whole dict is built again, so a
value is converted, bounded and validated exactly as if it had been written in the file, and an
error names its full address. Text from a command line is read with YAML's scalar rules
(``4`` is an int, ``true`` a bool, ``null`` None), except that a field holding text keeps the
text as given (``model_name=2024`` stays ``"2024"``).

Changing ``interaction_protocol`` also gives the new protocol its agents: an agent keeps the
parameters of the old agent of the same name, else of one in the same role (``prover0`` and
``prover`` are both provers), else the defaults.

A ``*`` in a path stands for every key at that place: ``agents.*.model_name=X`` sets the model
of every agent of the protocol, whatever their names (``prover0``, ``prover1``, ``verifier``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nip.errors import InvalidParameterError

if TYPE_CHECKING:
    from nip.parameters.hyper_parameters import HyperParameters

__all__ = ["apply_overrides", "changed_paths", "parse_override", "parse_value"]


def parse_value(text: str) -> Any:
    """A value from a command line, read with YAML's rules (``4``, ``0.5``, ``true``, ``null``,
    ``[1, 2]``); text YAML reads as something else (a date, say) stays text."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if value is None and text.strip() not in ("null", "~", "Null", "NULL"):
        return text  # "" or "  " stays text
    if not isinstance(value, str | int | float | bool | list | dict | type(None)):
        return text
    return value


def parse_override(text: str) -> tuple[str, Any]:
    """``"PATH=VALUE"`` as ``(path, value)``, the value read by :func:`parse_value`.

    Raises:
        InvalidParameterError: No ``=``, or an empty path.
    """
    path, sep, value = text.partition("=")
    path = path.strip()
    if not sep or not path:
        raise InvalidParameterError(
            "--set", text, "PATH=VALUE, e.g. rl.num_iterations=4 or agents.prover.model_name=X"
        )
    return path, parse_value(value)


def _role(agent: str) -> str:
    return re.sub(r"\d+$", "", agent)


def _agents_for(protocol: str, old_agents: Mapping[str, Any]) -> dict[str, Any] | None:
    """The new protocol's agents, each from the old agent of its name or role."""
    from nip.parameters.protocol import PROTOCOL_AGENT_NAMES

    names = PROTOCOL_AGENT_NAMES.get(protocol)
    if names is None:
        return None  # a protocol of one's own: its agents are whatever the user gives
    agents = {}
    for name in names:
        if name in old_agents:
            agents[name] = old_agents[name]
        else:
            same_role = [a for a in old_agents if _role(a) == _role(name)]
            agents[name] = old_agents[same_role[0]] if same_role else {}
    return agents


def _set(data: dict[str, Any], path: str, value: Any, current: Any) -> None:
    parts = path.split(".")
    node = data
    for part in parts[:-1]:
        node = node[part]
    if isinstance(value, int | float | bool) and isinstance(current, str):
        value = str(value).lower() if isinstance(value, bool) else str(value)
    node[parts[-1]] = value


def apply_overrides(
    params: HyperParameters, overrides: Mapping[str, Any], *, from_text: bool = False
) -> HyperParameters:
    """A new :class:`HyperParameters`: ``params`` with each dotted path set to its value.

    Args:
        params: The configuration (left unchanged).
        overrides: Values by dotted path (``"agents.verifier.temperature"``).
        from_text: The values are command-line text, to read with :func:`parse_value`.

    Raises:
        InvalidParameterError: A path names no parameter, or a value (or the combination)
            is not allowed; the error names the path.
    """
    data = params.to_dict()
    pending = dict(overrides)
    protocol = pending.pop("interaction_protocol", None)
    if protocol is not None:
        if from_text and isinstance(protocol, str):
            protocol = protocol.strip()
        data["interaction_protocol"] = protocol
        agents = _agents_for(str(protocol), data.get("agents") or {})
        if agents is not None:
            data["agents"] = agents
    for path, value in _expanded(pending, data).items():
        if from_text and isinstance(value, str):
            value = parse_value(value)
        try:
            current = params.get(path)
        except KeyError as error:
            if protocol is None or not path.startswith("agents."):
                raise InvalidParameterError(
                    path,
                    value,
                    "the dotted path of a parameter",
                    reason=str(error.args[0]).split(": ", 1)[-1],
                ) from None
            current = None  # an agent of the new protocol: checked when built
        try:
            _set(data, path, value, current)
        except (KeyError, TypeError):
            raise InvalidParameterError(
                path, value, "the dotted path of a parameter", reason="no such parameter"
            ) from None
    from nip.errors import UnknownKeyError

    try:
        return type(params).from_dict(data)
    except UnknownKeyError as error:
        raise InvalidParameterError(
            ", ".join(overrides), list(overrides.values()), "known parameters", reason=str(error)
        ) from None


def _expanded(overrides: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` with each ``*`` in a path replaced by every key found there in ``data``
    (``agents.*.model_name``: one path per agent); paths without ``*`` as given."""
    out: dict[str, Any] = {}
    for path, value in overrides.items():
        paths = [""]
        for part in path.split("."):
            if part != "*":
                paths = [f"{p}.{part}" if p else part for p in paths]
                continue
            expanded = []
            for prefix in paths:
                node: Any = data
                for key in prefix.split(".") if prefix else ():
                    node = node.get(key) if isinstance(node, Mapping) else None
                if not isinstance(node, Mapping) or not node:
                    raise InvalidParameterError(
                        path, value, "a path whose * stands for keys of a mapping (agents.*.X)"
                    )
                expanded += [f"{prefix}.{key}" if prefix else str(key) for key in node]
            paths = expanded
        out.update(dict.fromkeys(paths, value))
    return out


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if str(key).startswith("_"):
                continue
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def changed_paths(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, tuple]:
    """The dotted paths whose value differs between two ``to_dict()`` dicts, with
    ``(before, after)`` (a path missing on one side has None there)."""
    old, new = _flatten(before), _flatten(after)
    return {
        path: (old.get(path), new.get(path))
        for path in sorted(set(old) | set(new))
        if old.get(path) != new.get(path)
    }
