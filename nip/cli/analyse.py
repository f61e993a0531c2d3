"""``nip analyse``: judge a run's dialogues with an LLM."""

import argparse

from nip.cli import _args

HELP = "Judge a run's dialogues with an LLM."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from nip.parameters.providers import PROVIDER_FACTS

    _args.add_run_dir(parser)
    parser.add_argument(
        "--provider",
        default="OpenAI",
        choices=list(PROVIDER_FACTS),
        help="Who serves the judge model (default: OpenAI).",
    )
    parser.add_argument("--model", default="gpt-4o-mini-2024-07-18", help="The judge model.")
    parser.add_argument("--dummy", action="store_true", help="A dummy judge (for trying out).")
    parser.add_argument("--analysers", nargs="*", help="Which analysers (default: all).")
    _args.add_run_options(parser)


def run(args: argparse.Namespace) -> int:
    from nip.analysis.judges import ANALYSERS, check_analysers
    from nip.parameters import PureTextAgentParameters
    from nip.training.trainer import PureTextEiTrainer

    check_analysers(args.analysers or ())
    trainer = PureTextEiTrainer.resume(args.run_dir_positional, _args.opened_run(args))
    judge = PureTextAgentParameters(
        model_provider=args.provider, model_name=args.model, use_dummy_api=args.dummy
    )
    summary = trainer.analyse(judge, analysers=args.analysers or tuple(ANALYSERS))
    for key, value in summary.items():
        print(f"{key:<50} {'-' if value is None else f'{value:.3f}'}")
    return 0
