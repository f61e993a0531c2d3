"""``nip presets``: the shipped presets and sweep grids."""

import argparse

HELP = "List the shipped presets (nip run NAME)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from nip.configs import list_grids, list_presets, open_model_overrides

    presets, grids = list_presets(), list_grids()
    width = max(len(item.name) for item in [*presets, *grids]) + 2
    for preset in presets:
        print(f"{preset.name:<{width}}{preset.description}")
    print("\nRun one with: nip run NAME (e.g. nip run paper/nip-ei)")
    model = open_model_overrides().get("agents.*.model_name")
    print(
        f"open/*: every agent on {model} (open/_model.yaml), served by `--serve`; another model: "
        "--set agents.*.model_name=..."
    )
    print("\nSweep grids:")
    for grid in grids:
        print(f"{grid.name:<{width}}{grid.description}")
    print("\nRun one with: nip sweep NAME (e.g. nip sweep open-ei --dry-run)")
    return 0
