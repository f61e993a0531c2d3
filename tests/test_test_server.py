"""The local OpenAI-compatible test server: its HTTP API, fault injection and lifecycle."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import httpx
import pytest

from nip.backends import Completion, GenerationRequest, GenerationResult, TokenUsage
from nip.testing.faults import FaultPlan
from nip.testing.server import RunningServer, create_app, serve

CHAT = {
    "model": "gpt-test",
    "messages": [
        {"role": "system", "content": "You are the verifier. End with Decision: accept."},
        {"role": "user", "content": "Here is the code."},
    ],
}


@pytest.fixture
def start_server():
    """Start test servers on free loopback ports; every one is stopped afterwards."""
    servers: list[RunningServer] = []

    def start(**options) -> RunningServer:
        servers.append(serve(create_app(**options)))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def post_chat(server: RunningServer, body: dict | None = None, **options) -> httpx.Response:
    return httpx.post(f"{server.base_url}/chat/completions", json=body or CHAT, **options)


# ------------------------------------------------------------------------ lifecycle
@pytest.mark.timeout(10)
def test_serve_picks_a_free_port_and_stopping_joins_the_thread():
    with serve(create_app()) as server:
        assert server.port > 0
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}

    assert not server.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/health", timeout=1)


@pytest.mark.timeout(20)
def test_the_command_line_serves_until_it_is_terminated():
    command = [sys.executable, "-m", "nip.testing.server", "--port", "0", "--model", "m1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        base_url = line.split()[-1]
        models = httpx.get(f"{base_url}/models").json()
    finally:
        process.terminate()
        process.wait(timeout=10)

    assert line.startswith("nip test server listening on http://127.0.0.1:")
    assert [m["id"] for m in models["data"]] == ["m1"]


# ------------------------------------------------------------------------- the API
@pytest.mark.timeout(10)
def test_a_chat_completion_has_the_openai_shape(start_server):
    server = start_server()

    body = post_chat(server, {**CHAT, "n": 2}).json()

    assert body["object"] == "chat.completion"
    assert body["model"] == "gpt-test"
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert all(c["finish_reason"] == "stop" for c in body["choices"])
    assert all(c["message"]["role"] == "assistant" for c in body["choices"])
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


@pytest.mark.timeout(10)
def test_the_model_list_and_unknown_models(start_server):
    any_model = start_server()
    strict = start_server(model_names=["served-a", "served-b"])

    listed = httpx.get(f"{strict.base_url}/models").json()
    refused = post_chat(strict)

    assert [m["id"] for m in listed["data"]] == ["served-a", "served-b"]
    assert [m["id"] for m in httpx.get(f"{any_model.base_url}/models").json()["data"]] == ["dummy"]
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "model_not_found"


@pytest.mark.timeout(10)
def test_an_api_key_is_required_only_when_configured(start_server):
    server = start_server(api_key="k-123")

    assert post_chat(server).status_code == 401
    assert post_chat(server, headers={"Authorization": "Bearer k-123"}).status_code == 200


@pytest.mark.timeout(10)
def test_completions_come_from_whatever_chat_backend_it_is_given(start_server):
    class ShoutingBackend:
        name = "shouting"

        async def generate(self, request: GenerationRequest) -> GenerationResult:
            text = request.messages[-1]["content"].upper()
            return GenerationResult((Completion(text, "stop"),) * request.n, TokenUsage(3, 4))

        async def aclose(self) -> None:
            return None

    server = start_server(backend=ShoutingBackend())

    body = post_chat(server).json()

    assert body["choices"][0]["message"]["content"] == "HERE IS THE CODE."
    assert body["usage"]["completion_tokens"] == 4


@pytest.mark.timeout(10)
async def test_latency_is_added_per_request_and_requests_overlap(start_server):
    server = start_server(latency_s=0.2)

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        replies = await asyncio.gather(
            *(client.post("/chat/completions", json=CHAT) for _ in range(20))
        )
    elapsed = time.perf_counter() - started

    assert all(r.status_code == 200 for r in replies)
    assert 0.2 <= elapsed < 2.0  # one after another would take 20 x 0.2 = 4 s
    assert server.stats().max_in_flight == 20


@pytest.mark.timeout(120)
async def test_a_thousand_concurrent_requests_are_all_answered(start_server):
    # The latency is long next to the time a 2-core machine takes to send 1,000 requests
    # (about 0.4 s when quiet; with 2.5 s, a whole suite's load once let only 749 overlap), so
    # nearly all of them are held open at once. Waiting costs no CPU.
    server = start_server(latency_s=15)
    # Ten clients of 100 connections: one httpx pool of 1,000 costs O(n^2) client CPU.
    clients = [httpx.AsyncClient(base_url=server.base_url, timeout=90) for _ in range(10)]

    replies = await asyncio.gather(
        *(clients[i % 10].post("/chat/completions", json=CHAT) for i in range(1000))
    )
    for client in clients:
        await client.aclose()

    assert [r.status_code for r in replies] == [200] * 1000
    assert server.stats().max_in_flight >= 900


# ---------------------------------------------------------------------------- stats
@pytest.mark.timeout(10)
def test_stats_count_requests_and_faults_and_reset_to_zero(start_server):
    server = start_server(faults=FaultPlan(schedule={2: "server_error", 3: "rate_limit"}))
    for _ in range(4):
        post_chat(server)

    stats = httpx.get(f"{server.url}/stats").json()
    reset = httpx.post(f"{server.url}/stats/reset").json()

    assert stats == {
        "requests": 4,
        "completed": 2,
        "in_flight": 0,
        "max_in_flight": 1,
        "faults": {"server_error": 1, "rate_limit": 1},
        "fine_tuning_jobs": 0,
    }
    assert reset == {
        "requests": 0,
        "completed": 0,
        "in_flight": 0,
        "max_in_flight": 0,
        "faults": {},
        "fine_tuning_jobs": 0,
    }
    assert post_chat(server).status_code == 200  # the schedule counts from the reset
    assert post_chat(server).status_code == 500


# --------------------------------------------------------------------------- faults
@pytest.mark.timeout(10)
def test_the_kth_request_gets_the_scheduled_fault(start_server):
    server = start_server(faults=FaultPlan(schedule={2: "server_error"}))

    statuses = [post_chat(server).status_code for _ in range(3)]

    assert statuses == [200, 500, 200]


@pytest.mark.timeout(5)
def test_seeded_fault_probabilities_are_reproducible():
    plan = FaultPlan(probabilities={"server_error": 0.2, "drop": 0.1}, seed=5)

    draws = [plan.fault_for(k) for k in range(1, 1001)]

    assert draws == [
        FaultPlan(plan.schedule, plan.probabilities, seed=5).fault_for(k) for k in range(1, 1001)
    ]
    assert draws != [
        FaultPlan(probabilities=plan.probabilities, seed=6).fault_for(k) for k in range(1, 1001)
    ]
    assert 150 < draws.count("server_error") < 250
    assert 60 < draws.count("drop") < 140


@pytest.mark.timeout(10)
def test_error_faults_have_their_status_and_a_429_says_when_to_retry(start_server):
    plan = FaultPlan(
        schedule={1: "rate_limit", 2: "server_error", 3: "insufficient_credits"},
        retry_after_s=2,
    )
    server = start_server(faults=plan)

    limited, failed, broke = (post_chat(server) for _ in range(3))

    assert (limited.status_code, limited.headers["retry-after"]) == (429, "2")
    assert (failed.status_code, broke.status_code) == (500, 402)
    assert broke.json()["error"]["code"] == 402


@pytest.mark.timeout(10)
def test_in_body_errors_come_with_status_200_as_openrouter_sends_them(start_server):
    server = start_server(faults=FaultPlan.always("timeout", in_body_errors=True))

    reply = post_chat(server)

    assert reply.status_code == 200
    assert reply.json()["error"]["code"] == 408


@pytest.mark.timeout(10)
def test_a_malformed_body_is_not_json(start_server):
    server = start_server(faults=FaultPlan.first("malformed"))

    reply = post_chat(server)

    assert reply.status_code == 200
    with pytest.raises(ValueError):
        reply.json()


@pytest.mark.timeout(10)
def test_a_dropped_connection_ends_without_a_body(start_server):
    server = start_server(faults=FaultPlan.first("drop"))

    with pytest.raises(httpx.RemoteProtocolError):
        post_chat(server)
    assert post_chat(server).status_code == 200  # the server itself carries on


@pytest.mark.timeout(10)
def test_a_timeout_fault_holds_the_request_until_the_client_gives_up(start_server):
    server = start_server(faults=FaultPlan.first("timeout", timeout_hold_s=30))

    with pytest.raises(httpx.ReadTimeout):
        post_chat(server, timeout=0.3)
    deadline = time.monotonic() + 2
    while server.stats().in_flight and time.monotonic() < deadline:
        time.sleep(0.02)

    assert server.stats().in_flight == 0  # released when the client left, not after 30 s


@pytest.mark.timeout(10)
def test_content_filter_and_length_faults_change_only_the_completions(start_server):
    server = start_server(faults=FaultPlan(schedule={1: "content_filter", 2: "length"}))

    filtered, cut, whole = (post_chat(server).json()["choices"][0] for _ in range(3))

    assert (filtered["finish_reason"], filtered["message"]["content"]) == ("content_filter", None)
    assert cut["finish_reason"] == "length"
    assert whole["message"]["content"].startswith(cut["message"]["content"])
    assert len(cut["message"]["content"]) < len(whole["message"]["content"])
