"""Dialogues against a test server that fails 10 % of requests: nothing is lost, every retry
is counted, and the transcripts are exactly the fault-free ones.

The full 1,000-dialogue run, with its wall time against a fault-free run, is
``bench/faults_http.py`` (figures in docs/reliability.md); these tests use fewer dialogues.
"""

from __future__ import annotations

import pytest

from nip.backends import DummyBackend, DummyPolicy
from nip.backends.openai_compatible import OpenAIBackend, OpenAIBackendConfig
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.providers.pool import BackendPool
from nip.rollouts import Datapoint
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.testing.faults import FaultPlan
from nip.testing.server import RunningServer, create_app, serve

#: 10 % of requests fail, 2 % each: 429 + Retry-After, 500, held past the client's time-out,
#: connection dropped after the headers, truncated JSON.
#: The client's time-out (CLIENT_TIMEOUT_S) is far above what any answer takes on a loaded
#: machine: at 1.5 s, a CI machine under load once timed out 163 answers that no fault had
#: held, and the count of retries no longer matched the faults injected.
CLIENT_TIMEOUT_S = 5.0
TEN_PERCENT = FaultPlan(
    probabilities={
        "rate_limit": 0.02,
        "server_error": 0.02,
        "timeout": 0.02,
        "drop": 0.02,
        "malformed": 0.02,
    },
    seed=3,
    retry_after_s=0.1,
    timeout_hold_s=15,  # past the client's time-out
)
#: The retry cause the client counts for each injected fault.
CAUSE_OF = {
    "rate_limit": "rate_limit",
    "server_error": "server_error",
    "timeout": "timeout",
    "drop": "connection",
    "malformed": "malformed",
}


@pytest.fixture
def start_server():
    """Start test servers whose dummy verifier decides on its third turn (5 calls per nip
    dialogue); every one is stopped afterwards."""
    servers: list[RunningServer] = []

    def start(faults: FaultPlan | None = None) -> RunningServer:
        backend = DummyBackend(DummyPolicy(decide_on_turn=3))
        servers.append(serve(create_app(backend, latency_s=0.05, faults=faults)))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def play(server: RunningServer, dialogues: int):
    """Play ``dialogues`` nip dialogues against ``server``; the batch and the backend."""
    config = OpenAIBackendConfig(
        base_url=server.base_url,
        max_concurrency=10_000,
        request_timeout_s=CLIENT_TIMEOUT_S,
        initial_backoff_s=0.02,
        max_backoff_s=0.2,
    )
    backend = OpenAIBackend(config)
    settings = ExperimentSettings(show_progress=False, cache="off")
    hp = HyperParameters(
        interaction_protocol="nip",
        agents={n: PureTextAgentParameters(model_name="m") for n in ("prover", "verifier")},
    )
    session = Session(hp, settings, backends=BackendPool(settings, {"openai": backend}))
    items = [
        Datapoint(id=f"d{i}", question="Add one.", solution=f"def f(a): return a + {i % 3}", y=1)
        for i in range(dialogues)
    ]
    return session.rollouts(items), backend


def messages(batch) -> list[list[tuple[str, str]]]:
    return [[(turn.agent, turn.raw_text) for turn in t.turns] for t in batch]


@pytest.mark.timeout(180)
def test_with_ten_percent_of_requests_failing_every_dialogue_completes_unchanged(start_server):
    clean_server, faulty_server = start_server(), start_server(TEN_PERCENT)
    dialogues = 100

    clean, _ = play(clean_server, dialogues)
    faulty, _ = play(faulty_server, dialogues)

    assert len(faulty) == dialogues
    assert all(t.done and t.turns[-1].raw_text.startswith("Decision:") for t in faulty)
    assert messages(faulty) == messages(clean)
    assert [t.id for t in faulty] == [t.id for t in clean]


@pytest.mark.timeout(180)
def test_every_injected_fault_is_one_counted_retry_and_each_call_is_answered_once(start_server):
    server = start_server(TEN_PERCENT)

    batch, backend = play(server, 100)

    injected, stats = server.stats(), backend.stats()
    assert sum(injected.faults.values()) > 30  # about 10 % of 500 calls
    assert set(injected.faults) == set(CAUSE_OF)
    assert stats.retries_by_cause == {CAUSE_OF[k]: n for k, n in injected.faults.items()}
    assert stats.requests_sent == injected.requests == 500 + stats.retries
    assert injected.completed == stats.responses_ok == sum(len(t.turns) for t in batch) == 500
    assert stats.failures == 0
    assert sum(t.summary()["retries"] for t in batch) == 0  # transport retries are not
    # parsing retries: the transcripts record only the latter
