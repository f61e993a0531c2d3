"""``nip schema``: the JSON Schema of a configuration file, for an editor to check it as typed."""

import argparse
import json
from pathlib import Path

HELP = "Print the JSON Schema of a config file (nip schema > nip-config.schema.json)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", help="Write it to this file instead of stdout.")


def run(args: argparse.Namespace) -> int:
    from nip.errors import InvalidParameterError
    from nip.parameters import config_json_schema

    text = json.dumps(config_json_schema(), indent=1)
    if args.out is None:
        print(text)
        return 0
    out = Path(args.out)
    if out.is_dir() or not out.parent.is_dir():
        raise InvalidParameterError("--out", args.out, "a file in an existing folder")
    out.write_text(text + "\n")
    print(f"wrote {args.out}")
    return 0
