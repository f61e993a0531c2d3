"""``nip prepare-model``: convert an embedded model into nip's cache now."""

import argparse
import sys

HELP = (
    "Convert an embedded model into nip's cache now, once (setup.sh does it), so no run waits "
    "for it."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", nargs="?", default="SmolLM2-135M-Instruct", help="The model (default: %(default)s)."
    )


def run(args: argparse.Namespace) -> int:
    import time

    from nip.backends.local import ensure_local_model
    from nip.errors import GenerationError, ModelNotFoundError

    start = time.perf_counter()
    try:
        folder = ensure_local_model(args.name)
    except (ModelNotFoundError, GenerationError) as error:
        print(f"nip: {error}", file=sys.stderr)
        return 2
    print(f"{args.name}: {folder} ({time.perf_counter() - start:.1f} s)")
    return 0
