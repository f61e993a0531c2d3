"""``nip resume``: continue a run from its directory."""

import argparse

from nip.cli import _args

HELP = "Continue a run from its directory."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _args.add_run_dir(parser)
    parser.add_argument(
        "--force",
        action="store_true",
        help="Resume even if the run was saved by an incompatible nip.",
    )
    _args.add_override_options(parser)
    parser.add_argument(
        "--accept-changes",
        action="store_true",
        help="Let --set/--seed change the saved parameters (refused otherwise).",
    )
    parser.add_argument(
        "--accept-plan-change",
        action="store_true",
        help="Resume even if the run's plan (plan.json) would now differ; the diff is shown "
        "otherwise.",
    )
    _args.add_run_options(parser)
    _args.add_serve_options(parser)


def run(args: argparse.Namespace) -> int:
    from nip.training.trainer import PureTextEiTrainer

    settings = _args.opened_run(args, args.run_dir_positional)
    changes = {}
    if overrides := _args.cli_overrides(args):
        from nip.runs.changes import change_saved_parameters

        changes = change_saved_parameters(
            args.run_dir, overrides, accept=args.accept_changes, from_text=True
        )
        for path, (old, new) in changes.items():
            print(f"changed {path}: {old!r} -> {new!r}")
    with _args.served_run(args.run_dir, settings) as settings:
        trainer = PureTextEiTrainer.resume(
            args.run_dir,
            settings,
            force=args.force,
            # Accepted changes change the plan too: what they change is what was asked for.
            accept_plan_change=args.accept_plan_change or bool(changes),
        )
        print(f"resuming at iteration {trainer.state.iteration}, stage {trainer.state.stage}")
        _args.train(trainer)
    _args.print_metrics(trainer)
    return 0
