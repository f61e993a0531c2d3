"""``nip control``: pause, resume or stop a run between stages."""

import argparse

from nip.cli import _args

HELP = "Pause, resume or stop a run between stages (from any process)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _args.add_run_dir(parser)
    parser.add_argument("request", choices=["pause", "resume", "stop"])


def run(args: argparse.Namespace) -> int:
    from nip.runs.control import read_status, request
    from nip.runs.run_dir import RunDirectory

    RunDirectory.of_run(args.run_dir_positional)  # refuses a folder that holds no run
    request(args.run_dir_positional, args.request)
    status = read_status(args.run_dir_positional).get("status", "not reported yet")
    print(f"asked the run to {args.request} (its last status: {status}); it acts between stages")
    return 0
