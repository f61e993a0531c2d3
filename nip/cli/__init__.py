"""The ``nip`` command line: one module per command, listed in :data:`COMMANDS`.

A command's module holds ``HELP`` (optionally ``DESCRIPTION``), ``add_arguments(parser)`` and
``run(args) -> int``; what commands share is in :mod:`nip.cli._args`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib import import_module

from nip.cli._args import Parser

#: Each command's module (in ``nip.cli``), in the order ``nip --help`` lists them.
COMMANDS: dict[str, str] = {
    "protocols": "protocols",
    "presets": "presets",
    "prepare-model": "prepare_model",
    "run": "run",
    "resume": "resume",
    "sweep": "sweep",
    "retest": "retest",
    "extend": "extend",
    "plan": "plan",
    "control": "control",
    "compare": "compare",
    "analyse": "analyse",
    "serve": "serve",
    "export": "export",
    "schema": "schema",
}


def build_parser() -> Parser:
    parser = Parser(
        prog="nip",
        description="Neural interactive proofs with language models: run and resume "
        "experiments, analyse their dialogues, serve models for them.",
        epilog="Start with: nip run quickstart (Expert Iteration on the embedded model).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module_name in COMMANDS.items():
        module = import_module(f"nip.cli.{module_name}")
        command = sub.add_parser(
            name, help=module.HELP, description=getattr(module, "DESCRIPTION", None)
        )
        module.add_arguments(command)
        command.set_defaults(func=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2: bad input, said in one line)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, or an argument refused: already said
        return exit_.code if isinstance(exit_.code, int) else 2
    from nip.errors import MissingExtraError, NipError

    try:
        return args.func(args)
    except NipError as error:
        # A typed error already says what is wrong and how to fix it: no traceback.
        kind = "" if isinstance(error, MissingExtraError) else f"{type(error).__name__}: "
        print(f"nip: error: {kind}{error}", file=sys.stderr)
        return 2
