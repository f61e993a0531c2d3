"""The tables that tie a configuration name to the code serving it, and the layers of nip.

Each name a configuration may hold (a protocol, a shipped dataset) is listed once in the
configuration layer and served by exactly one class or file above it; these tests keep the two
in step, so that adding one without the other fails here and not in a run.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

from nip.data import SHIPPED_DATASETS
from nip.parameters import (
    PROTOCOL_AGENT_NAMES,
    SHIPPED_DATASET_NAMES,
    HyperParameters,
    InteractionProtocolType,
)
from nip.protocols import PROTOCOLS, build_protocol_handler


# ------------------------------------------------------------------------- protocols
def test_every_protocol_name_a_configuration_accepts_has_a_handler_and_no_other():
    assert set(typing.get_args(InteractionProtocolType)) == set(PROTOCOLS)


def test_the_configuration_layer_knows_each_protocols_agents_as_its_handler_does():
    assert {name: cls.agent_names for name, cls in PROTOCOLS.items()} == dict(PROTOCOL_AGENT_NAMES)


WITH_OWN_PARAMETERS = sorted(n for n, cls in PROTOCOLS.items() if cls.params_field is not None)


def test_the_protocols_with_parameters_of_their_own_name_their_hyper_parameters_field():
    fields = {f.name for f in dataclasses.fields(HyperParameters)}
    assert {PROTOCOLS[name].params_field for name in WITH_OWN_PARAMETERS} <= fields
    assert WITH_OWN_PARAMETERS == ["debate", "mnip", "nip"]


@pytest.mark.parametrize("name", WITH_OWN_PARAMETERS)
def test_the_handler_is_built_from_the_field_its_class_names(name):
    params = HyperParameters(interaction_protocol=name)
    params.get(PROTOCOLS[name].params_field).max_message_rounds = 5
    handler = build_protocol_handler(params)
    assert type(handler) is PROTOCOLS[name]
    assert handler.max_message_rounds == 5


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_every_handler_is_built_with_the_common_protocol_parameters(name):
    params = HyperParameters(interaction_protocol=name)
    handler = build_protocol_handler(params)
    assert type(handler) is PROTOCOLS[name]
    assert handler.common is params.protocol_common


# -------------------------------------------------------------------------- datasets
def test_every_shipped_dataset_name_the_configuration_accepts_has_a_file():
    assert set(SHIPPED_DATASETS) == set(SHIPPED_DATASET_NAMES)
    assert all(path.is_file() for path in SHIPPED_DATASETS.values())


# ---------------------------------------------------------------------------- layers
def _package(module: str) -> str:
    """``nip.backends.pool`` -> ``nip.backends``; ``nip`` itself stays ``nip``."""
    return ".".join(module.split(".")[:2])


def test_no_package_of_nip_is_in_an_import_cycle_with_another():
    """Function-level imports count: grimp reads every import statement, wherever it is.

    The layers contract (``lint-imports``) already forbids upward imports between the layers;
    this also covers what it leaves out, the ``nip`` package itself and ``nip.testing``.
    """
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("nip", cache_dir=None)
    imports: dict[str, set[str]] = {}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if _package(module) != _package(imported):
                imports.setdefault(_package(module), set()).add(_package(imported))

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in imports.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    in_cycles = sorted(package for package in imports if package in reaches(package))
    assert in_cycles == []
