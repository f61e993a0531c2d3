"""Framework CPU time per generated message, with the dummy backend (no HTTP, no model).

Measures what nip itself costs per message: prompt building, parsing, scoring and records.
Target: at most 0.5 ms per message. (The original: about 2 ms in dummy mode.)

    .venv/bin/python bench/framework_cpu.py [--dialogues 1000]
"""

from __future__ import annotations

import argparse
import time

from nip.backends import DummyBackend, DummyPolicy
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.rollouts import Datapoint
from nip.session import Session
from nip.settings import ExperimentSettings


def measure(protocol: str, dialogues: int) -> tuple[float, int, float]:
    names = HyperParameters(interaction_protocol=protocol).agent_names
    hp = HyperParameters(
        interaction_protocol=protocol,
        agents={n: PureTextAgentParameters(use_dummy_api=True) for n in names},
    )
    session = Session(hp, ExperimentSettings(show_progress=False))
    backend = DummyBackend(DummyPolicy(decide_on_turn=3))
    for agent in session.agents.values():
        agent.backend = backend
    items = [
        Datapoint(
            id=str(i),
            question="Return the sum of a list. " * 20,
            solution="def f(xs):\n    return sum(xs[1:])\n" * 5,
            y=i % 2,
        )
        for i in range(dialogues)
    ]
    started_cpu, started = time.process_time(), time.perf_counter()
    batch = session.rollouts(items)
    cpu, wall = time.process_time() - started_cpu, time.perf_counter() - started
    messages = sum(len(t.turns) for t in batch)
    return cpu / messages * 1000, messages, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dialogues", type=int, default=1000)
    args = parser.parse_args()
    print(f"{'protocol':<15}{'messages':>10}{'ms CPU/message':>16}{'wall s':>9}")
    for protocol in ("nip", "debate", "mnip", "adp"):
        per_message, messages, wall = measure(protocol, args.dialogues)
        print(f"{protocol:<15}{messages:>10}{per_message:>16.3f}{wall:>9.2f}")


if __name__ == "__main__":
    main()
