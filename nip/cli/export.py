"""``nip export inspect RUN_DIR``: a run's (or a sweep's) dialogues as Inspect evaluation logs."""

import argparse

from nip.utils import counted

HELP = "Write a run's dialogues in another tool's format (inspect: for inspect view)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("format", choices=["inspect"], help="inspect: Inspect evaluation logs")
    parser.add_argument("run_dir", help="A run directory, or a sweep directory.")
    parser.add_argument("--out", help="Where the logs go (default: RUN_DIR/inspect).")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nip.runs.inspect_export import export_inspect

    logs = export_inspect(args.run_dir, args.out)
    out = Path(args.out) if args.out else Path(args.run_dir) / "inspect"
    print(
        f"{counted(len(logs), 'Inspect log')} in {out}; "
        f"open them with: inspect view --log-dir {out}"
    )
    return 0
