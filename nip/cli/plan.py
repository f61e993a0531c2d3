"""``nip plan``: what a run would do, iteration by iteration."""

import argparse

from nip.cli import _args

HELP = (
    "Print what a run would do, iteration by iteration: items, tests, which groups train how, "
    "and each job's settings as sent (no model called, no API key)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="HyperParameters as YAML/JSON, or a preset (paper/nip-ei).")
    _args.add_override_options(parser)


def run(args: argparse.Namespace) -> int:
    from nip.training.cost_estimate import plan_run

    hyper_params = _args.configured(args)
    plan = plan_run(hyper_params)
    print(plan)
    _args.print_openai_notice(hyper_params, plan)
    _args.print_together_warnings(hyper_params, plan)
    return 0
