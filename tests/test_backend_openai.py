"""OpenAIBackend against the local test server over real HTTP: retries, limits, secrets."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import email.utils
import pickle
import random
import time
import traceback

import httpx
import pytest

from nip.backends import DummyBackend, GenerationRequest
from nip.backends._retry import RetryableError, RetryPolicy, parse_retry_after
from nip.backends.openai_compatible import (
    MissingAPIKeyError,
    OpenAIBackend,
    OpenAIBackendConfig,
    top_up_seed,
)
from nip.errors import (
    AuthenticationError,
    BackendUnavailableError,
    GenerationError,
    InsufficientCreditsError,
    ModelNotFoundError,
)
from nip.parameters import PureTextAgentParameters
from nip.testing.faults import FaultPlan
from nip.testing.server import RunningServer, create_app, serve

REQUEST = GenerationRequest(
    model="gpt-test",
    messages=(
        {"role": "system", "content": "You are the prover. Convince the verifier."},
        {"role": "user", "content": "Question: does the function handle empty lists?"},
    ),
    max_tokens=50,
)
SECRET = "sk-test-do-not-leak-0123456789abcdef"


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


@pytest.fixture
async def make_backend():
    """Make backends with quick back-offs for a server; every one is closed afterwards."""
    backends: list[OpenAIBackend] = []

    def make(server: RunningServer, **options) -> OpenAIBackend:
        settings = {"initial_backoff_s": 0.01, "max_backoff_s": 0.05, "request_timeout_s": 5.0}
        config = OpenAIBackendConfig(base_url=server.base_url, **{**settings, **options})
        backends.append(OpenAIBackend(config))
        return backends[-1]

    yield make
    for backend in backends:
        await backend.aclose()


# ----------------------------------------------------------------------- round trips
@pytest.mark.timeout(10)
async def test_a_completion_round_trips_with_its_usage(start_server, make_backend):
    server = start_server()
    expected = await DummyBackend().generate(REQUEST)

    result = await make_backend(server).generate(REQUEST)

    assert result.completions == expected.completions
    assert result.completions[0].finish_reason == "stop"
    assert result.usage == expected.usage
    assert result.usage.completion_tokens > 0
    assert (result.attempts, result.model) == (1, "gpt-test")
    assert result.latency_s > 0


@pytest.mark.timeout(10)
async def test_n_3_returns_three_distinct_completions_from_one_request(start_server, make_backend):
    server = start_server()
    request = GenerationRequest(model="gpt-test", messages=REQUEST.messages, n=3)

    result = await make_backend(server).generate(request)

    assert len({c.text for c in result.completions}) == 3
    assert server.stats().requests == 1


@pytest.mark.timeout(10)
async def test_seed_and_sampling_settings_reach_the_server(start_server, make_backend):
    # The dummy behind the server answers as a function of every sampling setting, so equal
    # answers mean the settings arrived unchanged (repetition_penalty via extra_body).
    server = start_server()
    backend = make_backend(server)
    settings = {"seed": 7, "temperature": 0.3, "repetition_penalty": 1.2}
    request = GenerationRequest(model="gpt-test", messages=REQUEST.messages, **settings)
    other_seed = GenerationRequest(
        model="gpt-test", messages=REQUEST.messages, **{**settings, "seed": 8}
    )

    served = await backend.generate(request)

    assert served.completions == (await DummyBackend().generate(request)).completions
    assert served.completions != (await backend.generate(other_seed)).completions


# --------------------------------------------------------------------------- faults
@pytest.mark.timeout(10)
async def test_a_429_is_retried_after_at_least_its_retry_after(start_server, make_backend):
    server = start_server(faults=FaultPlan.first("rate_limit", retry_after_s=1))
    backend = make_backend(server)

    started = time.perf_counter()
    result = await backend.generate(REQUEST)

    assert time.perf_counter() - started >= 1.0
    assert result.attempts == 2
    assert backend.stats().retries_by_cause == {"rate_limit": 1}
    assert backend.stats().requests_sent == 2


@pytest.mark.timeout(15)
@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        ("server_error", "server_error"),
        ("timeout", "timeout"),
        ("drop", "connection"),
        ("malformed", "malformed"),
    ],
)
async def test_a_transient_fault_is_retried_and_then_succeeds(
    start_server, make_backend, fault, cause
):
    server = start_server(faults=FaultPlan.first(fault, timeout_hold_s=10))
    backend = make_backend(server, request_timeout_s=0.5)

    result = await backend.generate(REQUEST)

    assert result.attempts == 2
    assert result.completions[0].text
    assert backend.stats().retries_by_cause == {cause: 1}
    assert server.stats().faults == {fault: 1}


@pytest.mark.timeout(10)
async def test_402_raises_insufficient_credits_without_retrying(start_server, make_backend):
    server = start_server(faults=FaultPlan.first("insufficient_credits"))
    backend = make_backend(server)

    with pytest.raises(InsufficientCreditsError, match="402"):
        await backend.generate(REQUEST)

    assert server.stats().requests == 1
    assert (backend.stats().retries, backend.stats().failures) == (0, 1)


@pytest.mark.timeout(10)
async def test_openrouter_in_body_errors_are_mapped_like_http_statuses(start_server, make_backend):
    limited = start_server(
        faults=FaultPlan.first("rate_limit", in_body_errors=True, retry_after_s=0.1)
    )
    broke = start_server(faults=FaultPlan.first("insufficient_credits", in_body_errors=True))

    result = await make_backend(limited).generate(REQUEST)
    with pytest.raises(InsufficientCreditsError):
        await make_backend(broke).generate(REQUEST)

    assert result.attempts == 2
    assert broke.stats().requests == 1


@pytest.mark.timeout(10)
@pytest.mark.parametrize("fault", ["content_filter", "length"])
async def test_filtered_and_truncated_completions_are_returned_with_their_finish_reason(
    start_server, make_backend, fault
):
    # Whether such a completion is usable is the agent layer's decision, not the backend's.
    server = start_server(faults=FaultPlan.first(fault))
    backend = make_backend(server)

    cut = await backend.generate(REQUEST)
    whole = await backend.generate(REQUEST)

    assert cut.completions[0].finish_reason == fault
    assert cut.attempts == 1
    if fault == "content_filter":
        assert cut.completions[0].text is None
    else:
        assert 0 < len(cut.completions[0].text) < len(whole.completions[0].text)


@pytest.mark.timeout(10)
async def test_when_every_retry_fails_backend_unavailable_says_how_many_attempts(
    start_server, make_backend
):
    server = start_server(faults=FaultPlan.always("server_error"))
    backend = make_backend(server, max_retries=2)

    with pytest.raises(BackendUnavailableError, match="3 attempts") as info:
        await backend.generate(REQUEST)

    assert info.value.attempts == 3
    assert server.stats().requests == 3


@pytest.mark.timeout(10)
async def test_a_server_that_is_not_there_is_a_counted_connection_retry_then_unavailable(
    unused_tcp_port,
):
    config = OpenAIBackendConfig(
        base_url=f"http://127.0.0.1:{unused_tcp_port}/v1", max_retries=1, initial_backoff_s=0.01
    )
    backend = OpenAIBackend(config)

    with pytest.raises(BackendUnavailableError, match=r"2 attempts.*[Cc]onnect"):
        await backend.generate(REQUEST)

    assert backend.stats().retries_by_cause == {"connection": 1}
    await backend.aclose()


@pytest.mark.timeout(10)
async def test_a_retry_after_beyond_the_limit_fails_at_once_instead_of_sleeping(
    start_server, make_backend
):
    server = start_server(faults=FaultPlan.first("rate_limit", retry_after_s=3600))
    backend = make_backend(server, max_retry_after_s=5)

    with pytest.raises(BackendUnavailableError, match="3600"):
        await backend.generate(REQUEST)

    # Failed on the first answer: no second request (and no sleep: the test's 10 s time-out
    # would end a wait of an hour), whatever the machine's speed.
    assert server.stats().requests == 1


@pytest.mark.timeout(10)
async def test_final_http_errors_map_to_typed_errors_without_retries(start_server, make_backend):
    locked = start_server(api_key="the-right-key")
    strict = start_server(model_names=["served-model"])

    with pytest.raises(AuthenticationError, match="401"):
        await make_backend(locked, api_key="a-wrong-key").generate(REQUEST)
    with pytest.raises(ModelNotFoundError, match="gpt-test"):
        await make_backend(strict).generate(REQUEST)
    with pytest.raises(GenerationError, match="400"):
        too_many = GenerationRequest(model="served-model", messages=REQUEST.messages, n=500)
        await make_backend(strict).generate(too_many)

    assert (locked.stats().requests, strict.stats().requests) == (1, 2)


# --------------------------------------------------------------- concurrency and loops
@pytest.mark.timeout(10)
async def test_the_concurrency_limit_caps_requests_in_flight(start_server, make_backend):
    server = start_server(latency_s=0.1)  # long enough for four to overlap on a busy machine
    backend = make_backend(server, max_concurrency=4)

    await asyncio.gather(*(backend.generate(REQUEST) for _ in range(24)))

    assert server.stats().max_in_flight == 4
    assert backend.stats().max_in_flight == 4


@pytest.mark.timeout(60)
async def test_a_request_backing_off_does_not_block_the_event_loop(start_server, make_backend):
    # A 3 s back-off: one that blocked the loop would stall everything for 3 s, far more than
    # any load on the machine makes 50 local requests or a 10 ms sleep take.
    server = start_server(latency_s=0.01, faults=FaultPlan.first("rate_limit", retry_after_s=3))
    backend = make_backend(server)
    loop = asyncio.get_running_loop()
    gaps: list[float] = []

    async def heartbeat() -> None:
        while True:
            before = loop.time()
            await asyncio.sleep(0.01)
            gaps.append(loop.time() - before)

    backing_off = asyncio.create_task(backend.generate(REQUEST))
    while backend.stats().retries == 0:  # wait until it is in its 3 s back-off
        await asyncio.sleep(0.005)
    # Beating from here: the first attempt imported the OpenAI SDK (a second, not a back-off).
    beating = asyncio.create_task(heartbeat())
    others = [GenerationRequest(model=f"m{i}", messages=REQUEST.messages) for i in range(50)]
    done = await asyncio.gather(*(backend.generate(r) for r in others))
    still_backing_off = not backing_off.done()
    slow = await backing_off
    beating.cancel()

    assert len(done) == 50
    assert still_backing_off  # the others were answered during the back-off
    assert slow.attempts == 2
    assert max(gaps) < 1.5  # the loop kept beating through it


@pytest.mark.timeout(10)
def test_one_backend_works_across_event_loops(start_server):
    # A notebook's sync wrapper runs each call on a fresh loop; connections and the
    # semaphore belong to one loop, so each loop gets its own.
    server = start_server()
    backend = OpenAIBackend(OpenAIBackendConfig(base_url=server.base_url))

    first = asyncio.run(backend.generate(REQUEST))
    second = asyncio.run(backend.generate(REQUEST))
    asyncio.run(backend.aclose())

    assert first.completions == second.completions
    assert backend.stats().requests_sent == 2


# --------------------------------------------------------------------------- secrets
@pytest.mark.timeout(10)
async def test_the_api_key_never_appears_in_repr_pickle_or_errors(start_server, make_backend):
    server = start_server(api_key="the-right-key")
    echoed = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": "m", "messages": []},
        headers={"Authorization": f"Bearer {SECRET}"},
    )
    assert SECRET in echoed.text  # the server quotes the key it got, as OpenAI does
    backend = make_backend(server, api_key=SECRET)

    with pytest.raises(AuthenticationError) as info:
        await backend.generate(REQUEST)

    error = info.value
    shown = [repr(backend), str(backend), backend._repr_html_(), repr(backend.config)]
    shown += [str(backend.config), str(backend.config.to_dict()), str(error), repr(error)]
    shown.append("".join(traceback.format_exception(error)))
    assert not [text for text in shown if SECRET in text]
    for thing in (backend, backend.config, error):
        assert SECRET.encode() not in pickle.dumps(thing)
    assert copy.copy(backend).config.api_key is None
    assert copy.deepcopy(backend.config).api_key is None
    assert backend.config.api_key == SECRET  # the live object is untouched


@pytest.mark.timeout(10)
async def test_a_pickled_backend_rereads_its_key_from_the_environment(start_server, monkeypatch):
    server = start_server(api_key=SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    backend = chat_backend(PureTextAgentParameters(model_provider="OpenAI"))
    await backend.generate(REQUEST)

    blob = pickle.dumps(backend)
    restored = pickle.loads(blob)
    result = await restored.generate(REQUEST)

    assert SECRET.encode() not in blob
    assert result.completions
    assert restored.stats().requests_sent == 1  # a copy starts its own counters
    await backend.aclose()
    await restored.aclose()


# ------------------------------------------------------------------------ providers
def chat_backend(params: PureTextAgentParameters, **settings) -> OpenAIBackend:
    """The backend the provider table builds for an agent (what a session's pool holds)."""
    from nip.providers import provider_for
    from nip.settings import ExperimentSettings

    return provider_for(params).chat(params, ExperimentSettings(**settings))


@pytest.mark.parametrize(
    ("provider", "env_var", "base_url", "name"),
    [
        ("OpenAI", "OPENAI_API_KEY", "https://api.openai.com/v1", "openai"),
        ("OpenRouter", "OPENROUTER_API_KEY", "https://openrouter.ai/api/v1", "openrouter"),
        ("TogetherAI", "TOGETHER_API_KEY", "https://api.together.ai/v1", "together"),
    ],
)
@pytest.mark.timeout(5)
def test_hosted_providers_get_their_base_url_and_key_variable(
    monkeypatch, provider, env_var, base_url, name
):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("TOGETHER_BASE_URL", raising=False)
    monkeypatch.setenv(env_var, SECRET)

    backend = chat_backend(PureTextAgentParameters(model_provider=provider), max_concurrency=3)

    assert backend.config.base_url == base_url
    assert backend.config.api_key_env == env_var
    assert backend.config.resolve_api_key() == SECRET
    assert (backend.name, backend.config.max_concurrency) == (name, 3)


@pytest.mark.timeout(5)
def test_self_hosted_goes_through_nip_serve_not_straight_to_vllm(monkeypatch):
    from nip.backends.self_hosted import SelfHostedBackend

    monkeypatch.delenv("NIP_SERVER_API_KEY", raising=False)
    params = PureTextAgentParameters(
        model_provider="SelfHosted",
        language_model_server_scheme_host="http://gpu-box",
        language_model_server_port=5001,
    )

    backend = chat_backend(params)

    assert isinstance(backend, SelfHostedBackend)
    assert backend.config.base_url == "http://gpu-box:5001/v1"
    assert backend.config.resolve_api_key() == "EMPTY"


@pytest.mark.timeout(5)
def test_a_missing_key_fails_at_construction_naming_the_variable(monkeypatch):
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)

    with pytest.raises(MissingAPIKeyError, match="OPENROUTER_API_KEY"):
        chat_backend(PureTextAgentParameters(model_provider="OpenRouter"))


# --------------------------------------------------------------------- retry policy
@pytest.mark.timeout(5)
def test_retry_after_is_read_as_seconds_milliseconds_or_an_http_date():
    now = time.time()
    in_30_s = email.utils.formatdate(now + 30, usegmt=True)

    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": in_30_s}, now=now) == pytest.approx(30, abs=1)
    assert parse_retry_after({"retry-after": "Mon, 01 Jan 2001 00:00:00 GMT"}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


@pytest.mark.timeout(5)
def test_back_off_is_fully_jittered_below_a_doubling_cap():
    policy = RetryPolicy(initial_backoff_s=0.5, max_backoff_s=4.0)
    rng = random.Random(0)

    for retry, cap in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0)]:
        delays = [policy.backoff_s(retry, rng) for _ in range(500)]
        assert 0 <= min(delays) < 0.1 * cap
        assert 0.9 * cap < max(delays) <= cap
    asked = RetryableError("429", cause="rate_limit", retry_after_s=7.0)
    assert policy.delay_s(1, asked, rng) >= 7.0


@pytest.mark.timeout(10)
async def test_top_ups_for_a_provider_that_ignores_n_each_send_their_own_seed(
    start_server, make_backend
):
    # A provider that ignores n (OpenRouter) answers one choice per request; resending the same
    # seed would make a seed-honouring provider repeat itself, leaving MALT no pairs.
    server = start_server(ignore_n=True)
    request = GenerationRequest(model="gpt-test", messages=REQUEST.messages, n=3, seed=7)

    result = await make_backend(server).generate(request)

    seeds = [top_up_seed(7, top_up) for top_up in range(3)]
    expected = [
        (await DummyBackend().generate(dataclasses.replace(request, n=1, seed=seed)))
        .completions[0]
        .text
        for seed in seeds
    ]
    assert seeds[0] == 7 and len(set(seeds)) == 3
    assert [c.text for c in result.completions] == expected
    assert len(set(expected)) == 3
    assert server.stats().requests == 3
