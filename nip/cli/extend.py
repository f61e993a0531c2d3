"""``nip extend``: more iterations for a finished run."""

import argparse

from nip.cli import _args

HELP = "More iterations for a finished run."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _args.add_run_dir(parser)
    parser.add_argument("--iterations", type=_args.count, required=True, help="How many more.")
    parser.add_argument(
        "--from-sampling",
        action="store_true",
        help="Start at the next iteration's sampling with the models the run finished with, "
        "without fine-tuning on its last iteration first (the original's "
        "force_more_iterations; by default that fine-tuning comes first, as in a longer run).",
    )
    _args.add_run_options(parser)
    _args.add_serve_options(parser)


def run(args: argparse.Namespace) -> int:
    from nip.experiments.extend import extend_run, extension_schedule

    run_dir, more, from_sampling = args.run_dir_positional, args.iterations, args.from_sampling
    settings = _args.opened_run(args, run_dir)
    schedule = extension_schedule(run_dir, more, from_sampling=from_sampling)
    with _args.served_run(run_dir, settings) as settings:
        trainer = extend_run(run_dir, more, settings, from_sampling=from_sampling)
        print(schedule)  # once the extension is under way: a refused one prints only its error
        trainer.train()
    _args.print_metrics(trainer)
    return 0
