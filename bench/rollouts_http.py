"""Rollouts over real HTTP against the latency test server: wall time relative to ideal.

The verifier decides on its third turn, so a nip dialogue is 5 dependent calls of 200 ms and
the ideal wall time of a batch is 1.0 s whatever its size (debate and mnip: the provers of a
round speak at once, so their ideal is also rounds x 200 ms). The server runs in its own
process (``python -m nip.testing.server``: FastAPI on uvicorn); the client is nip's
``OpenAIBackend`` (the OpenAI SDK on httpx, one client) with no concurrency limit in the way
and the response cache off. Reports the client's and the
server's CPU time per request. Each figure is the median of ``--repeats`` batches.

    .venv/bin/python bench/rollouts_http.py [--sizes 32 256 1000 4000] \
        [--protocols nip debate mnip] [--repeats 3] [--latency 0.2]

``--bare`` replaces each dialogue by 5 dependent requests
sent straight to the backend, without nip's protocols, prompts and records: what the HTTP
stack alone allows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from _server import test_server

from nip.backends.openai_compatible import OpenAIBackend, OpenAIBackendConfig
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.providers.pool import BackendPool
from nip.rollouts import Datapoint
from nip.session import Session
from nip.settings import ExperimentSettings

DEFAULT_LATENCY_S = 0.2


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def session(protocol: str, base_url: str) -> Session:
    """A session whose agents all use one backend pointing at the test server."""
    names = HyperParameters(interaction_protocol=protocol).agent_names
    hp = HyperParameters(
        interaction_protocol=protocol,
        agents={n: PureTextAgentParameters(model_name="dummy") for n in names},
    )
    config = OpenAIBackendConfig(base_url=base_url, max_concurrency=100_000)
    settings = ExperimentSettings(show_progress=False, cache="off")
    backends = BackendPool(settings, overrides={"openai": OpenAIBackend(config)})
    return Session(hp, settings, backends=backends)


def items(size: int) -> list[Datapoint]:
    return [
        Datapoint(id=str(i), question="Add.", solution=f"def f(a): return a + {i}", y=i % 2)
        for i in range(size)
    ]


def one_batch(s: Session, size: int, server_pid: int, latency_s: float) -> dict[str, float]:
    """Wall, ideal, requests and CPU per request (client, server) of one batch."""
    batch_items = items(size)
    server_cpu = cpu_seconds(server_pid)
    cpu, wall = time.process_time(), time.perf_counter()
    batch = s.rollouts(batch_items)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    server_cpu = cpu_seconds(server_pid) - server_cpu
    requests = sum(len(t.turns) for t in batch)
    ideal = max(t.num_rounds for t in batch) * latency_s
    return {
        "ratio": ideal / wall,
        "wall": wall,
        "requests": requests,
        "client_ms": cpu / requests * 1000,
        "server_ms": server_cpu / requests * 1000,
    }


def bare_batch(
    backend: OpenAIBackend, size: int, server_pid: int, latency_s: float
) -> dict[str, float]:
    """Like :func:`one_batch`, but each "dialogue" is 5 dependent bare requests."""
    from nip.backends import GenerationRequest

    system = {"role": "system", "content": "You are the prover. " + "Explain the code. " * 40}
    requests = [
        GenerationRequest("dummy", (system, {"role": "user", "content": f"Question {i}?"}))
        for i in range(size)
    ]

    async def dialogue(request: GenerationRequest) -> None:
        for _ in range(5):
            await backend.generate(request)

    async def batch() -> None:
        await asyncio.gather(*(dialogue(r) for r in requests))
        await backend.aclose()

    server_cpu = cpu_seconds(server_pid)
    cpu, wall = time.process_time(), time.perf_counter()
    asyncio.run(batch())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    server_cpu = cpu_seconds(server_pid) - server_cpu
    requests_sent = 5 * size
    return {
        "ratio": 5 * latency_s / wall,
        "wall": wall,
        "requests": requests_sent,
        "client_ms": cpu / requests_sent * 1000,
        "server_ms": server_cpu / requests_sent * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 256, 1000, 4000])
    parser.add_argument("--protocols", nargs="+", default=["nip", "debate", "mnip"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bare", action="store_true", help="HTTP only, no nip dialogues")
    parser.add_argument(
        "--latency", type=float, default=DEFAULT_LATENCY_S, help="seconds per model call"
    )
    args = parser.parse_args()
    latency = args.latency
    options = ("--latency", str(latency), "--decide-on-turn", "3")
    header = ("protocol", "dialogues", "requests", "wall s", "ideal/wall", "client ms", "server ms")
    print("".join(f"{h:>11}" for h in header), flush=True)
    with test_server(*options) as (server, base_url):
        for protocol in ["bare"] if args.bare else args.protocols:
            s = session("nip" if args.bare else protocol, base_url)
            backend = s.backends.backends["openai"]
            s.rollouts(items(8))  # warm-up: imports, first connections
            for size in args.sizes:
                runs = [
                    bare_batch(backend, size, server.pid, latency)
                    if args.bare
                    else one_batch(s, size, server.pid, latency)
                    for _ in range(args.repeats)
                ]
                row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                print(
                    f"{protocol:>11}{size:>11}{row['requests']:>11.0f}{row['wall']:>11.2f}"
                    f"{row['ratio']:>11.2f}{row['client_ms']:>11.3f}{row['server_ms']:>11.3f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
