"""Throughput of OpenAIBackend against the local test server, which answers in 200 ms.

For 32, 256 and 1,000 concurrent requests through one backend (concurrency limit above the
largest size): the wall time, its ratio to the ideal (one server latency, as every request
could overlap), and the client's CPU time per request. The server runs in its own process
(``python -m nip.testing.server``), so ``time.process_time`` here is the client's CPU alone.
Each size runs once to open the connections, then ``--repeats`` times; medians are shown.

    .venv/bin/python bench/backend_throughput.py [--latency 0.2] [--repeats 3] \
        [--sizes 32 256 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx
from _server import test_server

from nip.backends import GenerationRequest
from nip.backends.openai_compatible import OpenAIBackend, OpenAIBackendConfig


def requests_for(size: int) -> list[GenerationRequest]:
    """``size`` distinct prover requests of a realistic length."""
    system = {"role": "system", "content": "You are the prover. " + "Explain the code. " * 40}
    return [
        GenerationRequest(
            model="gpt-4o-mini",
            messages=(system, {"role": "user", "content": f"Question {i}: is it correct?"}),
            max_tokens=225,
        )
        for i in range(size)
    ]


async def one_round(backend: OpenAIBackend, size: int) -> tuple[float, float]:
    """Wall and client CPU seconds of ``size`` concurrent requests."""
    requests = requests_for(size)
    cpu, wall = time.process_time(), time.perf_counter()
    results = await asyncio.gather(*(backend.generate(r) for r in requests))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if len(results) != size or any(not r.completions for r in results):
        raise RuntimeError("a request came back without completions")
    return wall, cpu


async def measure(base_url: str, sizes: list[int], repeats: int, latency_s: float) -> None:
    config = OpenAIBackendConfig(base_url=base_url, max_concurrency=max(sizes))
    backend = OpenAIBackend(config)
    server_url = base_url.removesuffix("/v1")
    print(f"{'concurrent':>10} {'wall s':>8} {'x ideal':>8} {'CPU ms/req':>11} {'server max':>11}")
    async with httpx.AsyncClient(base_url=server_url) as admin:
        for size in sizes:
            await one_round(backend, size)  # opens the connections
            await admin.post("/stats/reset")
            rounds = [await one_round(backend, size) for _ in range(repeats)]
            wall = statistics.median(w for w, _ in rounds)
            cpu_ms = 1000 * statistics.median(c for _, c in rounds) / size
            max_in_flight = (await admin.get("/stats")).json()["max_in_flight"]
            ratio = wall / latency_s
            print(f"{size:>10} {wall:>8.3f} {ratio:>8.2f} {cpu_ms:>11.2f} {max_in_flight:>11}")
    stats = backend.stats()
    print(f"backend: {stats.requests_sent} requests sent, {stats.retries} retries")
    await backend.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 256, 1000])
    args = parser.parse_args()
    with test_server("--latency", str(args.latency)) as (_, base_url):
        asyncio.run(measure(base_url, args.sizes, args.repeats, args.latency))


if __name__ == "__main__":
    main()
