"""``nip run``: run an experiment (``--dry-run``: its plan and cost, nothing called)."""

import argparse

from nip.cli import _args

HELP = "Run an experiment from a YAML or JSON config."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "config", help="HyperParameters as YAML/JSON, or a preset (quickstart, paper/nip-ei)."
    )
    parser.add_argument("--run-dir", help="Where to save the run (default: runs/<time>).")
    parser.add_argument("--overwrite", action="store_true", help="Replace a run in --run-dir.")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="Print the model calls, tokens and USD the run would cost, and exit: no model "
        "is called, no API key is needed, no run directory is made.",
    )
    parser.add_argument(
        "--sample-items",
        type=_args.count,
        default=4,
        help="--dry-run: build the real prompts of this many items per pass (default 4).",
    )
    _args.add_gpu_options(parser)
    _args.add_override_options(parser)
    _args.add_run_options(parser)
    _args.add_serve_options(parser)


def run(args: argparse.Namespace) -> int:
    hyper_params = _args.configured(args)
    if args.dry_run:
        return _dry_run(args, hyper_params)
    from pathlib import Path

    from nip.runs.run_dir import new_run_path, refuse_existing_run
    from nip.server.run_servers import serving
    from nip.training.trainer import build_trainer

    _args.refuse_gpu_options_without_dry_run(args)
    settings = _args.run_settings(args)
    _args.check_serve_options(settings)
    _args.print_openai_notice(hyper_params)
    if settings.serve and settings.run_dir is None:
        settings.run_dir = new_run_path()  # the server's storage lives in the run directory
    elif settings.serve and not args.overwrite:  # before a server starts for nothing
        refuse_existing_run(
            settings.run_dir,
            f"resume it with nip resume {settings.run_dir} --serve, or pass --overwrite",
        )
    storage = Path(settings.run_dir or ".") / "serve"
    # ``--serve``'s servers (nothing without it), stopped at the end.
    with serving([hyper_params], settings, storage) as settings:
        trainer = build_trainer(hyper_params, settings, overwrite=args.overwrite)
        _args.train(trainer)
    _args.print_metrics(trainer)
    return 0


def _dry_run(args: argparse.Namespace, hyper_params) -> int:
    """The plan, then its cost."""
    from nip.training.cost_estimate import estimate_cost

    gpu = _args.gpu_options(args)
    estimate = estimate_cost(hyper_params, _args.run_settings(args), sample_items=args.sample_items)
    print(f"{estimate.plan}\n\n{estimate}")
    _args.print_gpu_time([("run", hyper_params, estimate)], gpu)
    _args.print_openai_notice(hyper_params, estimate.plan)
    _args.print_together_warnings(hyper_params, estimate.plan)
    return 0
