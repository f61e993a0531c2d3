"""``nip compare``: accuracy per protocol and iteration over several runs."""

import argparse
import sys

from nip.cli import _args

HELP = "Accuracy per protocol and iteration over several runs, with intervals."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("run_dirs", nargs="+", metavar="RUN_DIR", help="Run directories.")
    add("--split", choices=["test", "train"], default="test", help="Which rollouts (test).")
    add("--confidence", type=_args.fraction, default=0.95, help="The intervals' coverage (0.95).")
    add(
        "--separate-seeds",
        action="store_true",
        help="One series per run instead of pooling a protocol's runs (seeds).",
    )
    add(
        "--over-seeds",
        action="store_true",
        help="The mean over seeds with a Student-t interval (how results vary by seed), "
        "instead of the pooled dialogues' Wilson interval.",
    )
    add("--html", help="Also write the figure to this HTML file.")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nip.viz.compare_runs import compare_runs

    if args.html and not Path(args.html).resolve().parent.is_dir():
        print(f"nip compare: --html {args.html}: its folder does not exist", file=sys.stderr)
        return 2
    try:
        figure, table = compare_runs(
            args.run_dirs,
            split=args.split,
            confidence=args.confidence,
            pool_seeds=not args.separate_seeds,
            over_seeds=args.over_seeds,
        )
    except FileNotFoundError as error:
        print(f"nip compare: {error}", file=sys.stderr)
        return 2
    width = max(len(s) for s in table["series"])
    print(
        table.to_string(
            index=False,
            formatters={"series": lambda s: f"{s:<{width}}"},
            columns=[c for c in table.columns if c not in ("protocol", "trainer", "split")],
            float_format=lambda v: f"{v:.3f}",
        )
    )
    if incomplete := table.attrs.get("incomplete"):
        print(f"\nnot finished, shown as far as they got: {'; '.join(incomplete)}")
    if args.html:
        figure.write_html(args.html)  # plotly.js embedded: opens offline
        print(f"\nfigure: {args.html}")
    return 0
