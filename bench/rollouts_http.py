"""Rollouts over real HTTP against the latency test server: wall time relative to ideal.

The nip protocol with the verifier deciding on its third turn: 5 dependent calls per dialogue
at 200 ms each, so the ideal wall time of a batch is 1.0 s whatever its size. The server runs
in its own process; the client is nip's OpenAI backend (AsyncOpenAI) with a concurrency limit
of 1,000. Also reports the client's CPU time per request (the original: 5.8 ms per request;
18-34 x ideal for 32 dialogues).

    .venv/bin/python bench/rollouts_http.py [--sizes 32 256 1000] [--protocol nip]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.rollouts import Datapoint
from nip.session import Session
from nip.settings import ExperimentSettings

LATENCY_S = 0.2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nip.testing.server",
            "--port",
            str(port),
            "--latency",
            str(LATENCY_S),
            "--decide-on-turn",
            "3",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline()
    if "listening" not in line:
        process.kill()
        raise RuntimeError(f"the test server did not start: {line!r}")
    return process


def session(protocol: str, port: int) -> Session:
    os.environ["OPENAI_BASE_URL"] = f"http://127.0.0.1:{port}/v1"
    os.environ.setdefault("OPENAI_API_KEY", "not-needed")
    names = HyperParameters(interaction_protocol=protocol).agent_names
    hp = HyperParameters(
        interaction_protocol=protocol,
        agents={n: PureTextAgentParameters(model_name="dummy") for n in names},
    )
    settings = ExperimentSettings(show_progress=False, cache="off", max_concurrency=1000)
    return Session(hp, settings)


def run(protocol: str, size: int, port: int) -> tuple[float, float, int]:
    s = session(protocol, port)
    items = [
        Datapoint(id=str(i), question="Add.", solution=f"def f(a): return a + {i}", y=i % 2)
        for i in range(size)
    ]
    s.rollouts(items[:4])  # warm-up: connections, imports
    cpu, wall = time.process_time(), time.perf_counter()
    batch = s.rollouts(items)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    requests = sum(len(t.turns) for t in batch)
    rounds = max(t.num_rounds for t in batch)
    return wall / (rounds * LATENCY_S), cpu / requests * 1000, requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="*", default=[32, 256, 1000])
    parser.add_argument("--protocol", default="nip")
    args = parser.parse_args()
    port = free_port()
    server = start_server(port)
    try:
        header = ("dialogues", "requests", "wall/ideal", "ideal/wall", "CPU ms/req")
        print("".join(f"{h:>12}" for h in header))
        for size in args.sizes:
            ratio, cpu_ms, requests = run(args.protocol, size, port)
            print(f"{size:>12}{requests:>12}{ratio:>12.2f}{1 / ratio:>12.2f}{cpu_ms:>12.2f}")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
