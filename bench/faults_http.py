"""Rollouts against a test server failing 10 % of requests, against a fault-free run.

1,000 nip dialogues (5 dependent calls of 200 ms each) against two test servers in their own
processes: one fault-free, one where 10 % of requests fail, spread evenly over 429 with
``Retry-After``, 500, time-outs (the server holds the request past the client's time-out),
dropped connections and truncated JSON. Checks that every dialogue completes with exactly the
fault-free run's messages, that the client's retries by cause equal the server's injected
faults, and reports the wall time of both runs (target: faulty within 2 x fault-free).

    .venv/bin/python bench/faults_http.py [--dialogues 1000] [--rate 0.1] [--retry-after 0.5] \
        [--request-timeout 2.0] [--kinds rate_limit,server_error,timeout,drop,malformed] \
        [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.request

from _server import test_server
from rollouts_http import LATENCY_S, items

from nip.backends.openai_compatible import OpenAIBackend, OpenAIBackendConfig
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.providers.pool import BackendPool
from nip.session import Session
from nip.settings import ExperimentSettings

KINDS = "rate_limit,server_error,timeout,drop,malformed"
#: How the client's retry causes name the server's fault kinds.
CAUSE_OF = {
    "rate_limit": "rate_limit",
    "server_error": "server_error",
    "timeout": "timeout",
    "drop": "connection",
    "malformed": "malformed",
}


def run(base_url: str, dialogues: int, request_timeout_s: float) -> tuple[float, list, dict]:
    """Wall time, messages of every dialogue, and the backend's counters of one batch."""
    hp = HyperParameters(
        interaction_protocol="nip",
        agents={n: PureTextAgentParameters(model_name="dummy") for n in ("prover", "verifier")},
    )
    config = OpenAIBackendConfig(
        base_url=base_url,
        max_concurrency=100_000,
        request_timeout_s=request_timeout_s,
        initial_backoff_s=0.1,
        max_backoff_s=2.0,
    )
    backend = OpenAIBackend(config)
    settings = ExperimentSettings(show_progress=False, cache="off")
    session = Session(hp, settings, backends=BackendPool(settings, {"openai": backend}))
    started = time.perf_counter()
    batch = session.rollouts(items(dialogues))
    wall = time.perf_counter() - started
    messages = [[(t.agent, t.raw_text) for t in transcript.turns] for transcript in batch]
    return wall, messages, backend.stats().to_dict()


def server_stats(base_url: str) -> dict:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/stats", timeout=10) as reply:
        return json.load(reply)


def reset(base_url: str) -> None:
    request = urllib.request.Request(base_url.removesuffix("/v1") + "/stats/reset", b"", {})
    urllib.request.urlopen(request, timeout=10).close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dialogues", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=0.1)
    parser.add_argument("--retry-after", type=float, default=0.5)
    parser.add_argument("--request-timeout", type=float, default=2.0)
    parser.add_argument("--kinds", default=KINDS, help="comma-separated fault kinds")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    common = ("--latency", str(LATENCY_S), "--decide-on-turn", "3")
    faults = (
        *("--fault-rate", str(args.rate), "--fault-kinds", args.kinds, "--seed", str(args.seed)),
        *("--retry-after", str(args.retry_after), "--timeout-hold", "30"),
    )
    print(
        f"{args.dialogues} dialogues, {args.rate:.0%} faults ({args.kinds}), Retry-After "
        f"{args.retry_after} s, client time-out {args.request_timeout} s, latency {LATENCY_S} s"
    )
    print(f"{'fault-free s':>13}{'faulty s':>10}{'ratio':>7}{'complete':>10}{'same':>6}  retries")
    ratios = []
    with test_server(*common) as (_, clean_url), test_server(*common, *faults) as (_, faulty_url):
        run(clean_url, 8, args.request_timeout)  # warm-up
        for _ in range(args.repeats):
            clean_wall, clean_messages, _ = run(clean_url, args.dialogues, args.request_timeout)
            reset(faulty_url)
            wall, messages, counters = run(faulty_url, args.dialogues, args.request_timeout)
            injected = server_stats(faulty_url)["faults"]
            expected = {CAUSE_OF[k]: v for k, v in injected.items()}
            complete = sum(1 for m in messages if m and m[-1][1].startswith("Decision:"))
            same = messages == clean_messages
            counted = "= server faults" if counters["retries_by_cause"] == expected else "MISMATCH"
            ratios.append(wall / clean_wall)
            print(
                f"{clean_wall:>13.2f}{wall:>10.2f}{wall / clean_wall:>7.2f}"
                f"{complete:>10}{same!s:>6}  {counters['retries_by_cause']} {counted}",
                flush=True,
            )
    print(f"median faulty / fault-free: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
