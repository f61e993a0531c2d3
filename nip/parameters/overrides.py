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

``all_agents.FIELD`` sets a field of every agent the configuration has (after a protocol
change, the new protocol's): ``all_agents.use_dummy_api: true`` runs a whole grid of protocols
on the dummy backend, where ``agents.prover.use_dummy_api`` would miss debate's ``prover0`` and
``prover1``. A path naming one agent (``agents.verifier.model_name``) wins over it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nip.errors import InvalidParameterError

if TYPE_CHECKING:
    from nip.parameters.hyper_parameters import HyperParameters

__all__ = ["ALL_AGENTS", "apply_overrides", "changed_paths", "parse_override", "parse_value"]

#: The path prefix of a setting for every agent (``all_agents.use_dummy_api``).
ALL_AGENTS = "all_agents"


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


def _every_agent(pending: dict[str, Any], agents: Mapping[str, Any]) -> dict[str, Any]:
    """``pending`` with each ``all_agents.FIELD`` replaced by ``agents.NAME.FIELD`` for every
    agent (those first, so that a path naming one agent wins).

    Raises:
        InvalidParameterError: ``FIELD`` is no agent setting, or there are no agents.
    """
    from dataclasses import fields

    from nip.parameters.agents import PureTextAgentParameters

    known = {f.name for f in fields(PureTextAgentParameters)}
    expanded: dict[str, Any] = {}
    for path, value in pending.items():
        if path.split(".", 1)[0] != ALL_AGENTS:
            continue
        field_name = path.partition(".")[2]
        if field_name not in known or not agents:
            from difflib import get_close_matches

            close = get_close_matches(field_name, known, n=1)
            raise InvalidParameterError(
                path,
                value,
                f"{ALL_AGENTS}.FIELD, FIELD a field of PureTextAgentParameters",
                reason=(
                    "the configuration has no agents"
                    if field_name in known
                    else f"agents have no setting {field_name!r}"
                    + (f" (did you mean {ALL_AGENTS}.{close[0]}?)" if close else "")
                ),
            )
        expanded |= {f"agents.{name}.{field_name}": value for name in agents}
    rest = {p: v for p, v in pending.items() if p.split(".", 1)[0] != ALL_AGENTS}
    return {**expanded, **rest}


def _missing_agent(path: str, data: Mapping[str, Any]) -> str | None:
    """Why ``agents.NAME.FIELD`` names no parameter when the protocol has no agent NAME."""
    parts = path.split(".")
    agents = data.get("agents") or {}
    if len(parts) < 3 or parts[0] != "agents" or parts[1] in agents:
        return None
    return (
        f"{data.get('interaction_protocol')} has no agent {parts[1]!r} (its agents: "
        f"{', '.join(agents)}); {ALL_AGENTS}.{'.'.join(parts[2:])} sets every agent's"
    )


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
    every_agent = {p: v for p, v in pending.items() if p.split(".", 1)[0] == ALL_AGENTS}
    pending = _every_agent(pending, data.get("agents") or {})
    for path, value in pending.items():
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
                    reason=_missing_agent(path, data) or str(error.args[0]).split(": ", 1)[-1],
                ) from None
            current = None  # an agent of the new protocol: checked when built
        try:
            _set(data, path, value, current)
        except (KeyError, TypeError):
            raise InvalidParameterError(
                path,
                value,
                "the dotted path of a parameter",
                reason=_missing_agent(path, data) or "no such parameter",
            ) from None
    from nip.errors import UnknownKeyError

    try:
        return type(params).from_dict(data)
    except UnknownKeyError as error:
        raise InvalidParameterError(
            ", ".join(overrides), list(overrides.values()), "known parameters", reason=str(error)
        ) from None
    except InvalidParameterError as error:
        # A value all_agents gave is refused under its own name, not one agent's.
        field_name = error.field.split(".")[-1] if error.field.startswith("agents.") else ""
        path = f"{ALL_AGENTS}.{field_name}"
        if path not in every_agent:
            raise
        refused = InvalidParameterError(path, every_agent[path], error.allowed)
        why = str(error).partition(" is not allowed: ")[2] or error.reason
        refused.args = (f"{path}={every_agent[path]!r} is not allowed ({error.field}): {why}",)
        raise refused from None


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
