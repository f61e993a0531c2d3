"""Changing a configuration by dotted path: ``--set rl.num_iterations=4`` and its Python form
``params.with_overrides({"agents.prover.model_name": "gpt-4o-2024-08-06", "seed": 3})``.

The dict is rebuilt with each override, so a value is validated as if written in the file.
Command-line text is read with YAML's scalar rules, except that a text field keeps the text
(``model_name=2024`` stays ``"2024"``) and a float field reads ``1e-4`` as a float. A mapping
sets several fields of a group; ``agents.*`` stands for every agent (a path naming one agent
wins over it). A new ``interaction_protocol`` gives each new agent the old one of its name,
else of its role, else the defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nip.errors import InvalidParameterError

if TYPE_CHECKING:
    from nip.parameters.hyper_parameters import HyperParameters

__all__ = ["EVERY_AGENT", "apply_overrides", "changed_paths", "parse_override", "parse_value"]

#: The path of every agent of a configuration (``agents.*.use_dummy_api``).
EVERY_AGENT = "agents.*"


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
    """``"PATH=VALUE"`` as ``(path, value)``, the value read by :func:`parse_value`
    (InvalidParameterError for no ``=`` or an empty path)."""
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


def _for_every_agent(path: str) -> bool:
    return path == EVERY_AGENT or path.startswith(EVERY_AGENT + ".")


def _every_agent(pending: dict[str, Any], agents: Mapping[str, Any]) -> dict[str, Any]:
    """``pending`` with each ``agents.*...`` replaced by one path per agent (first: a path
    naming one agent wins).

    Raises:
        InvalidParameterError: ``agents.*.FIELD`` names no agent setting, or there are no agents.
    """
    from nip.parameters.agents import PureTextAgentParameters

    known = set(PureTextAgentParameters.model_fields)
    expanded: dict[str, Any] = {}
    for path, value in pending.items():
        if not _for_every_agent(path):
            continue
        field_name = path[len(EVERY_AGENT) + 1 :].split(".")[0]
        if not field_name and not isinstance(value, Mapping | str):
            raise InvalidParameterError(
                path, value, f"a mapping of agent settings ({EVERY_AGENT}={{model_name: X}})"
            )
        named = [field_name] if field_name else list(value) if isinstance(value, Mapping) else []
        field_name = next((f for f in named if f not in known), field_name)
        if (field_name and field_name not in known) or not agents:
            from difflib import get_close_matches

            close = get_close_matches(field_name, known, n=1)
            raise InvalidParameterError(
                path,
                value,
                f"{EVERY_AGENT}.FIELD, FIELD a field of PureTextAgentParameters",
                reason=(
                    f"agents have no setting {field_name!r}"
                    + (f" (did you mean {EVERY_AGENT}.{close[0]}?)" if close else "")
                    if agents
                    else "the configuration has no agents"
                ),
            )
        expanded |= {path.replace(EVERY_AGENT, f"agents.{name}", 1): value for name in agents}
    return {**expanded, **{p: v for p, v in pending.items() if not _for_every_agent(p)}}


def _missing_agent(path: str, data: Mapping[str, Any]) -> str | None:
    """Why ``agents.NAME.FIELD`` names no parameter when the protocol has no agent NAME."""
    parts = path.split(".")
    agents = data.get("agents") or {}
    if len(parts) < 3 or parts[0] != "agents" or parts[1] in agents:
        return None
    return (
        f"{data.get('interaction_protocol')} has no agent {parts[1]!r} (its agents: "
        f"{', '.join(agents)}); {EVERY_AGENT}.{'.'.join(parts[2:])} sets every agent's"
    )


def _set(data: dict[str, Any], path: str, value: Any, current: Any) -> None:
    parts = path.split(".")
    node = data
    for part in parts[:-1]:
        node = node[part]
    if isinstance(value, int | float | bool) and isinstance(current, str):
        value = str(value).lower() if isinstance(value, bool) else str(value)
    if isinstance(value, Mapping) and isinstance(node.get(parts[-1]), Mapping):
        value = {**node[parts[-1]], **value}  # a mapping sets several fields of a group
    node[parts[-1]] = value


def _apply(
    params: HyperParameters, data: dict[str, Any], path: str, value: Any, protocol: Any
) -> None:
    def no_parameter(why: str) -> InvalidParameterError:
        reason = _missing_agent(path, data) or why
        return InvalidParameterError(path, value, "the dotted path of a parameter", reason=reason)

    try:
        current = params.get(path)
    except KeyError as error:
        if protocol is None or not path.startswith("agents."):
            raise no_parameter(str(error.args[0]).split(": ", 1)[-1]) from None
        current = None  # an agent of the new protocol: checked when built
    try:
        _set(data, path, value, current)
    except (KeyError, TypeError):
        raise no_parameter("no such parameter") from None


def apply_overrides(
    params: HyperParameters, overrides: Mapping[str, Any], *, from_text: bool = False
) -> HyperParameters:
    """A new :class:`HyperParameters`: ``params`` with each dotted path set to its value (read
    with :func:`parse_value` when ``from_text``).

    Raises:
        InvalidParameterError: A path names no parameter, or a value is not allowed.
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
    every_agent = {p: v for p, v in pending.items() if _for_every_agent(p)}
    for path, value in _every_agent(pending, data.get("agents") or {}).items():
        if from_text and isinstance(value, str):
            value = parse_value(value)
        _apply(params, data, path, value, protocol)
    from nip.errors import UnknownKeyError

    try:
        return type(params).from_dict(data)
    except UnknownKeyError as error:
        raise InvalidParameterError(
            ", ".join(overrides), list(overrides.values()), "known parameters", reason=str(error)
        ) from None
    except InvalidParameterError as error:
        # A value agents.* gave is refused under its own name, not one agent's.
        field_name = error.field.split(".")[-1] if error.field.startswith("agents.") else ""
        path = f"{EVERY_AGENT}.{field_name}"
        if path not in every_agent:
            raise
        refused = InvalidParameterError(path, every_agent[path], error.allowed)
        why = str(error).partition(" is not allowed: ")[2] or error.reason
        refused.args = (f"{path}={every_agent[path]!r} is not allowed ({error.field}): {why}",)
        raise refused from None


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(value, Mapping):
        return {prefix.rstrip("."): value}
    items = (_flatten(v, f"{prefix}{k}.") for k, v in value.items() if not str(k).startswith("_"))
    return {path: leaf for flat in items for path, leaf in flat.items()}


def changed_paths(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, tuple]:
    """The dotted paths whose value differs between two ``to_dict()`` dicts, with
    ``(before, after)`` (a path missing on one side has None there)."""
    old, new = _flatten(before), _flatten(after)
    return {
        path: (old.get(path), new.get(path))
        for path in sorted(set(old) | set(new))
        if old.get(path) != new.get(path)
    }
