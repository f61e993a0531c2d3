"""``nip protocols``: who speaks when in each protocol."""

import argparse

HELP = "Show who speaks when in each protocol."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", help="Protocols to show (default: all).")
    parser.add_argument("--seed", type=int, default=0, help="Dialogue seed.")


def run(args: argparse.Namespace) -> int:
    from nip.parameters import HyperParameters
    from nip.protocols import PROTOCOLS, build_protocol_handler

    for name in args.names or PROTOCOLS:
        handler = build_protocol_handler(HyperParameters(interaction_protocol=name))
        agents = handler.agent_names
        width = max(24, *(len(n) + 4 for n in agents))
        print(f"\n== {name}: {handler.num_rounds()} rounds, channels {list(handler.channel_names)}")
        print("round  " + "".join(f"{n:<{width}}" for n in agents))
        for row in handler.schedule(seed=args.seed):
            print(f"{row['round']:<7}" + "".join(f"{row[n]:<{width}}" for n in agents))
        rewards = ", ".join(
            f"{n} in [{handler.min_reward(n):g}, {handler.max_reward(n):g}]" for n in agents
        )
        print(f"episode rewards: {rewards}")
    return 0
