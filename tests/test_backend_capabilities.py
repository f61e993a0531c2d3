"""What a backend can do beyond generating is said by a small Protocol it implements, and found
with ``capability(backend, Protocol)``, which also looks through the response cache."""

from __future__ import annotations

import pytest

from nip.backends import (
    AdapterHost,
    CachedBackend,
    DummyBackend,
    ReportsReadiness,
    ResponseCache,
    capability,
)
from nip.backends.local import LocalBackend
from nip.backends.self_hosted import SelfHostedBackend
from nip.parameters import PureTextAgentParameters


@pytest.fixture
def cache(tmp_path):
    store = ResponseCache(tmp_path / "responses.sqlite")
    yield store
    store.close()


@pytest.fixture
async def local():
    backend = LocalBackend()  # loads no model until the first request
    yield backend
    await backend.aclose()


@pytest.fixture
def self_hosted():
    return SelfHostedBackend.from_agent_params(PureTextAgentParameters(model_provider="SelfHosted"))


def test_the_embedded_backend_hosts_adapters_and_needs_no_waiting(local):
    assert capability(local, AdapterHost) is local
    assert capability(local, ReportsReadiness) is None


def test_the_self_hosted_backend_reports_readiness_and_hosts_no_adapters_here(self_hosted):
    assert capability(self_hosted, ReportsReadiness) is self_hosted
    assert capability(self_hosted, AdapterHost) is None


def test_the_dummy_backend_has_no_extra_capability():
    backend = DummyBackend()
    assert capability(backend, AdapterHost) is None
    assert capability(backend, ReportsReadiness) is None


def test_a_capability_is_found_through_the_response_cache(local, self_hosted, cache):
    assert capability(CachedBackend(local, cache, "local"), AdapterHost) is local
    assert capability(CachedBackend(self_hosted, cache, "sh"), ReportsReadiness) is self_hosted


def test_the_cache_offers_only_the_chat_interface_itself(local, cache):
    cached = CachedBackend(local, cache, "local")
    assert not isinstance(cached, AdapterHost)
    with pytest.raises(AttributeError):
        cached.register_adapter  # noqa: B018 - no forwarding of arbitrary attributes
