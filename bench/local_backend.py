"""Throughput of the local backend: 16 concurrent requests, batched vs one at a time.

Run (SmolLM2-135M-Instruct on CPU; converts the model into the cache on first use)::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/local_backend.py
    HF_HUB_OFFLINE=1 .venv/bin/python bench/local_backend.py --dtype bfloat16 --tokens 64

Each setting answers the same requests greedily; the batched run sends them all at once to a
backend with ``max_batch_size=16``, the other to one with ``max_batch_size=1``, so the only
difference is batching. Tokens/s counts completion tokens over wall-clock time (model loading
and one warm-up request excluded).
"""

from __future__ import annotations

import argparse
import asyncio
import time

from nip.backends import GenerationRequest
from nip.backends.local import LocalBackend

TOPICS = [
    "the moon",
    "bread",
    "rivers",
    "chess",
    "bees",
    "volcanoes",
    "libraries",
    "trains",
    "coffee",
    "glaciers",
    "music",
    "bridges",
    "forests",
    "clocks",
    "islands",
    "paper",
]


def make_requests(model: str, count: int, tokens: int) -> list[GenerationRequest]:
    """``count`` different prompts that all invite an answer longer than ``tokens``."""
    return [
        GenerationRequest(
            model=model,
            messages=(
                {
                    "role": "user",
                    "content": f"Write a detailed paragraph about {TOPICS[i % len(TOPICS)]}.",
                },
            ),
            max_tokens=tokens,
            temperature=0,
        )
        for i in range(count)
    ]


async def measure(
    model: str, requests: list[GenerationRequest], batch_size: int, device: str, dtype: str
) -> dict[str, float]:
    """Wall time, tokens and batches for answering ``requests`` concurrently."""
    backend = LocalBackend(model, device=device, dtype=dtype, max_batch_size=batch_size)
    try:
        await backend.generate(requests[0])  # load the model and warm up
        before = backend.stats()
        start = time.perf_counter()
        results = await asyncio.gather(*(backend.generate(r) for r in requests))
        wall = time.perf_counter() - start
        after = backend.stats()
    finally:
        await backend.aclose()
    tokens = sum(r.usage.completion_tokens for r in results)
    return {
        "wall_s": wall,
        "tokens": tokens,
        "tokens_per_s": tokens / wall,
        "batches": after.batches - before.batches,
        "mean_latency_s": sum(r.latency_s for r in results) / len(results),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="SmolLM2-135M-Instruct")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64, help="max_tokens of each request")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    args = parser.parse_args()

    requests = make_requests(args.model, args.requests, args.tokens)
    rows = []
    for label, batch_size in (("one at a time", 1), (f"batched (≤{args.requests})", args.requests)):
        row = await measure(args.model, requests, batch_size, args.device, args.dtype)
        rows.append((label, row))

    print(
        f"\n{args.model}, {args.requests} requests x ≤{args.tokens} new tokens, "
        f"device={args.device}, dtype={args.dtype}\n"
    )
    print(f"{'mode':<16} {'batches':>7} {'tokens':>6} {'wall s':>7} {'tok/s':>7} {'latency s':>9}")
    for label, row in rows:
        print(
            f"{label:<16} {row['batches']:>7} {row['tokens']:>6} {row['wall_s']:>7.1f} "
            f"{row['tokens_per_s']:>7.1f} {row['mean_latency_s']:>9.1f}"
        )
    speedup = rows[1][1]["tokens_per_s"] / rows[0][1]["tokens_per_s"]
    print(f"\nbatching speed-up: {speedup:.1f}x")


if __name__ == "__main__":
    asyncio.run(main())
