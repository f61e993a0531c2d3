"""MALT tree generation over real HTTP against the latency test server.

32 nip trees of depth 5 (the verifier decides on its third turn), k = 2 and k = 3 samples per
node, grown breadth-first with ``n``-sampling: one request per open node and level, all of a
level in flight at once. Every level is one 200 ms call, so the ideal wall time is 1.0 s.
Reports wall / ideal, requests sent against nodes grown, and client and server CPU per
request. Each figure is the median of ``--repeats`` runs. (The original: 13.4 x ideal for a
single tree, strictly serial.)

    .venv/bin/python bench/malt_http.py [--trees 32] [--k 2 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from _server import test_server
from rollouts_http import DEFAULT_LATENCY_S as LATENCY_S
from rollouts_http import cpu_seconds, items, session

from nip.parameters import PureTextMaltParameters
from nip.training.algorithms.malt import build_trees_async


def one_run(base_url: str, trees: int, k: int, server_pid: int) -> dict[str, float]:
    s = session("nip", base_url)
    backend = s.backends.backends["openai"]
    malt = PureTextMaltParameters(num_responses_per_timestep=k)

    async def grow():
        await build_trees_async(s.handler, s.agents, items(2), malt=malt, seed=1)  # warm-up
        sent_before = backend.stats().requests_sent
        server_cpu = cpu_seconds(server_pid)
        cpu, wall = time.process_time(), time.perf_counter()
        grown = await build_trees_async(s.handler, s.agents, items(trees), malt=malt, seed=0)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        server_cpu = cpu_seconds(server_pid) - server_cpu
        await backend.aclose()
        return grown, wall, cpu, server_cpu, backend.stats().requests_sent - sent_before

    grown, wall, cpu, server_cpu, requests = asyncio.run(grow())
    depth = max(n.id.count(".") - t.tree_id.count(".") for t in grown for n in t.nodes.values())
    nodes = sum(len(t.nodes) - 1 for t in grown)  # roots are not generated
    return {
        "depth": depth,
        "ratio": depth * LATENCY_S / wall,
        "wall": wall,
        "requests": requests,
        "nodes": nodes,
        "client_ms": cpu / requests * 1000,
        "server_ms": server_cpu / requests * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=32)
    parser.add_argument("--k", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    options = ("--latency", str(LATENCY_S), "--decide-on-turn", "3")
    header = ("k", "trees", "depth", "nodes", "requests", "wall s", "ideal/wall", "client ms")
    print("".join(f"{h:>11}" for h in (*header, "server ms")), flush=True)
    with test_server(*options) as (server, base_url):
        for k in args.k:
            runs = [one_run(base_url, args.trees, k, server.pid) for _ in range(args.repeats)]
            row = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
            print(
                f"{k:>11}{args.trees:>11}{row['depth']:>11.0f}{row['nodes']:>11.0f}"
                f"{row['requests']:>11.0f}{row['wall']:>11.2f}{row['ratio']:>11.2f}"
                f"{row['client_ms']:>11.3f}{row['server_ms']:>11.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
