"""Memory per dialogue as the number of rounds grows: it must grow linearly.

Plays ``--dialogues`` nip dialogues of up to R rounds (the dummy verifier decides only on its
last turn, round R - 1 or R - 2 since it speaks on even rounds) with the dummy backend, for
R = 8, 16 and 32, and measures with ``tracemalloc`` the memory the finished batch holds and
the size of its JSONL. Linear growth means the bytes per round stay flat; the original's
rollouts held a history snapshot at every step (quadratic).

    .venv/bin/python bench/memory_rounds.py [--dialogues 200] [--rounds 8 16 32]
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

from nip.backends import DummyBackend, DummyPolicy
from nip.parameters import HyperParameters, NipProtocolParameters, PureTextAgentParameters
from nip.rollouts import Datapoint
from nip.session import Session
from nip.settings import ExperimentSettings


def measure(rounds: int, dialogues: int) -> tuple[float, float, float]:
    """Bytes held per dialogue, JSONL bytes per dialogue, and mean rounds played."""
    hp = HyperParameters(
        interaction_protocol="nip",
        agents={n: PureTextAgentParameters(use_dummy_api=True) for n in ("prover", "verifier")},
        nip_protocol=NipProtocolParameters(max_message_rounds=rounds),
    )
    session = Session(hp, ExperimentSettings(show_progress=False))
    backend = DummyBackend(DummyPolicy(decide_on_turn=10**6))  # decides on its last turn only
    for agent in session.agents.values():
        agent.backend = backend
    items = [
        Datapoint(id=str(i), question="Return the sum of a list.", solution="def f(xs): ...", y=1)
        for i in range(dialogues)
    ]
    session.rollouts(items[:2])  # warm-up: caches, templates
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    batch = session.rollouts(items)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    played = sum(t.num_rounds for t in batch) / len(batch)
    return held / dialogues, len(batch.to_jsonl().encode()) / dialogues, played


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dialogues", type=int, default=200)
    parser.add_argument("--rounds", type=int, nargs="+", default=[8, 16, 32])
    args = parser.parse_args()
    print(f"{'rounds':>7}{'played':>8}{'KiB/dialogue':>14}{'B/round':>9}{'JSONL KiB':>11}")
    for rounds in args.rounds:
        held, jsonl, played = measure(rounds, args.dialogues)
        print(
            f"{rounds:>7}{played:>8.1f}{held / 1024:>14.1f}{held / played:>9.0f}"
            f"{jsonl / 1024:>11.1f}"
        )


if __name__ == "__main__":
    main()
