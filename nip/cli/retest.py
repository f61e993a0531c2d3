"""``nip retest``: test a run's saved models again."""

import argparse

from nip.cli import _args

HELP = "Test a run's saved models again (more passes, another split)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _args.add_run_dir(parser)
    parser.add_argument(
        "--iterations", type=_args.iterations, help="Which iterations, e.g. 0,7 (default: all)."
    )
    parser.add_argument("--passes", type=_args.count, help="Test passes (default: the run's).")
    parser.add_argument("--split", help="The dataset split (default: the run's test split).")
    _args.add_run_options(parser)
    _args.add_serve_options(parser)


def run(args: argparse.Namespace) -> int:
    from nip.experiments.retest import retest

    settings = _args.opened_run(args)
    run_dir = args.run_dir_positional
    with _args.served_run(run_dir, settings) as settings:
        options = {k: getattr(args, k) for k in ("iterations", "passes", "split")}
        out = retest(run_dir, settings=settings, **options)
    print(f"retest results: {out} (nip compare {run_dir} shows them)")
    return 0
