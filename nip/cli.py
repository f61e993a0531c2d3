"""The ``nip`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _print_protocol(name: str, seed: int) -> None:
    from nip.parameters import HyperParameters
    from nip.protocols import build_protocol_handler

    handler = build_protocol_handler(HyperParameters(interaction_protocol=name))
    agents = handler.agent_names
    width = max(24, *(len(n) + 4 for n in agents))
    print(f"\n== {name}: {handler.num_rounds()} rounds, channels {list(handler.channel_names)}")
    print("round  " + "".join(f"{n:<{width}}" for n in agents))
    for row in handler.schedule(seed=seed):
        print(f"{row['round']:<7}" + "".join(f"{row[n]:<{width}}" for n in agents))
    rewards = ", ".join(
        f"{n} in [{handler.min_reward(n):g}, {handler.max_reward(n):g}]" for n in agents
    )
    print(f"episode rewards: {rewards}")


def _cmd_protocols(args: argparse.Namespace) -> int:
    from nip.protocols import PROTOCOLS

    for name in args.names or PROTOCOLS:
        _print_protocol(name, args.seed)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nip", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    protocols = sub.add_parser("protocols", help="Show who speaks when in each protocol.")
    protocols.add_argument("names", nargs="*", help="Protocols to show (default: all).")
    protocols.add_argument("--seed", type=int, default=0, help="Dialogue seed.")
    protocols.set_defaults(func=_cmd_protocols)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
