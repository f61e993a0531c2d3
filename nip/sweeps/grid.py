"""A sweep's grid: a base configuration and axes of values, expanded into named cells.

A grid file (YAML)::

    name: ei-comparison            # optional: the sweep's name (default: the file's stem)
    base: paper/nip-ei             # a preset or a config file (relative to the grid file)
    set:                           # optional: overrides every cell shares
      rl.num_iterations: 4
    axes:                          # a product over these, in this order
      interaction_protocol: [nip, debate]
      seed: [0, 1, 2]
    zip:                           # optional: groups of axes that move together
      - agents.prover.model_name: [gpt-4o-mini-2024-07-18, gpt-4o-2024-08-06]
        agents.verifier.model_name: [gpt-4o-mini-2024-07-18, gpt-4o-2024-08-06]
    max_parallel: 4                # optional: cells running at once (--max-parallel wins)
    serve: true                    # optional: the sweep owns its nip serve (--serve/--no-serve win)

An axis is any dotted path :meth:`HyperParameters.with_overrides` takes, or ``base`` itself
(``base: [paper/nip-ei, paper/debate-ei]``). Each cell is named from its axis values
(``nip-ei_seed0``) and is an ordinary run directory under the sweep's directory.
"""

from __future__ import annotations

import html
import itertools
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nip.errors import ConfigFileError, InvalidParameterError, NipError, require_count
from nip.extras import needs
from nip.parameters import HyperParameters
from nip.runs.spend import sum_known
from nip.runs.sweep_dir import cell_run_dir, read_manifest
from nip.settings import ExperimentSettings
from nip.training.cost_report import CostEstimate, text_table

__all__ = [
    "GridSpec",
    "SweepCell",
    "SweepEstimate",
    "default_sweep_dir",
    "estimate_sweep",
    "load_base",
    "load_sweep_spec",
]

_KEYS = {"name", "base", "set", "axes", "zip", "max_parallel", "serve"}


def load_base(name_or_path: str, relative_to: Path | None = None) -> HyperParameters:
    """A config file (relative to ``relative_to`` when not absolute) or a shipped preset."""
    from nip.configs import UnknownPresetError, load_preset

    path = Path(name_or_path)
    if relative_to is not None and not path.is_absolute():
        path = relative_to / path
    if path.is_file():
        return HyperParameters.load(path)
    try:
        return load_preset(name_or_path)
    except UnknownPresetError as error:
        raise InvalidParameterError(
            "base",
            name_or_path,
            "a shipped preset (nip presets) or a config file",
            reason=str(error),
        ) from None


def _mapping(value: Any, key: str, allowed: str) -> dict[str, Any]:
    """A grid's mapping (``axes``, ``set``, a zip group), its keys dotted paths."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidParameterError(key, value, allowed)
    return dict(value)


def _label(path: str, value: Any) -> str:
    """The part of a cell's name one axis value gives (``seed0``, ``nip-ei``, ``debate``)."""
    if path == "base":
        text = Path(str(value)).stem if str(value).endswith((".yaml", ".yml", ".json")) else value
        return re.sub(r"[^A-Za-z0-9._-]+", "-", str(text).rsplit("/", 1)[-1])
    if path == "interaction_protocol":
        return str(value)
    leaf = path.rsplit(".", 1)[-1]
    short = re.sub(r"[^A-Za-z0-9._-]+", "-", str(value))
    return f"{leaf}{short}" if leaf == "seed" else f"{leaf}-{short}"


@dataclass
class SweepCell:
    """One configuration of the grid: its ``name`` (its run directory's), its axis ``values`` by
    path (``{"base": "paper/nip-ei", "seed": 0}``) and its whole ``hyper_params``."""

    name: str
    values: dict[str, Any]
    hyper_params: HyperParameters

    def run_dir(self, sweep_dir: str | Path) -> Path:
        return cell_run_dir(sweep_dir, self.name)


@dataclass
class GridSpec:
    """A grid file's contents (see the module docstring)."""

    base: str
    name: str = "sweep"
    overrides: dict[str, Any] = field(default_factory=dict)
    axes: dict[str, list[Any]] = field(default_factory=dict)
    zipped: list[dict[str, list[Any]]] = field(default_factory=list)
    max_parallel: int = 4
    folder: Path | None = None
    serve: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, folder: Path | None = None, name: str = "sweep"):
        """Read a grid from its dict (``folder``: where relative config paths start)."""
        if not isinstance(data, Mapping):
            raise ConfigFileError("a grid is a mapping with base and axes")
        unknown = set(data) - _KEYS
        if unknown:
            raise InvalidParameterError(
                ", ".join(sorted(unknown)), "...", f"grid keys: {', '.join(sorted(_KEYS))}"
            )
        axes = _mapping(data.get("axes"), "axes", "a mapping of dotted paths to lists of values")
        zip_groups = data.get("zip") or []
        if not isinstance(zip_groups, list):
            raise InvalidParameterError(
                "zip", zip_groups, "a list of groups, each a mapping of paths to lists"
            )
        zipped = [_mapping(g, "zip", "a mapping of dotted paths to lists") for g in zip_groups]
        for key, group in [("axes", axes), *(("zip", g) for g in zipped)]:
            for path, values in group.items():
                if not isinstance(values, list) or not values:
                    raise InvalidParameterError(f"{key}.{path}", values, "a non-empty list")
        for group in zipped:
            lengths = {len(v) for v in group.values()}
            if len(lengths) > 1:
                raise InvalidParameterError(
                    "zip", list(group), "lists of the same length in one zip group"
                )
        base = data.get("base") if data.get("base") != "" else None  # "": saved with a base axis
        if (base is None and "base" not in axes) or not isinstance(base, str | None):
            raise InvalidParameterError("base", base, "a preset or config file (or a base axis)")
        max_parallel = require_count("max_parallel", data.get("max_parallel", 4))
        given = data.get("name")
        if given is not None and not re.fullmatch(r"[A-Za-z0-9._-]+", str(given)):
            raise InvalidParameterError("name", given, "a folder name: letters, digits, . _ -")
        name = str(given or name)
        if not isinstance(data.get("serve", False), bool):
            raise InvalidParameterError("serve", data["serve"], "true or false")
        return cls(
            base=str(base) if base is not None else "",
            name=name,
            overrides=_mapping(data.get("set"), "set", "a mapping of dotted paths to values"),
            axes=axes,
            zipped=zipped,
            max_parallel=max_parallel,
            folder=folder,
            serve=data.get("serve", False),
        )

    @classmethod
    def load(cls, path: str | Path) -> GridSpec:
        """Read a grid file (YAML or JSON), or a shipped grid by name (``paper-ei``); raises
        :class:`ConfigFileError` for no such grid or bad YAML."""
        import yaml

        path = Path(path)
        if not path.is_file():
            from nip.configs import list_grids

            shipped = next((g for g in list_grids() if g.name == path.name), None)
            if shipped is None:
                raise ConfigFileError(f"no grid file or shipped grid named {str(path)!r}")
            return cls.from_dict(yaml.safe_load(shipped.text()), folder=None, name=path.name)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            reason = " ".join(str(error).split())  # one line
            raise ConfigFileError(f"{path}: not valid YAML: {reason}", path=path) from None
        if not isinstance(data, Mapping):
            raise ConfigFileError(f"{path}: a grid is a mapping with base and axes", path=path)
        return cls.from_dict(data, folder=path.parent.resolve(), name=path.stem)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "base": self.base, "set": self.overrides}
        out |= {"axes": self.axes, "zip": self.zipped, "max_parallel": self.max_parallel}
        return out | {"serve": self.serve}

    def cells(self) -> list[SweepCell]:
        """Every cell of the grid, configured and validated, in grid order (an
        :class:`InvalidParameterError` names a bad cell, or two cells of one name)."""
        dimensions = [[{path: v} for v in values] for path, values in self.axes.items()]
        for group in self.zipped:  # a zip group is one dimension: its paths move together
            rows = zip(*group.values(), strict=True)
            dimensions.append([dict(zip(group, row, strict=True)) for row in rows])
        cells, bases = [], {}
        for combination in itertools.product(*dimensions):
            values = {path: value for step in combination for path, value in step.items()}
            base = str(values.get("base", self.base))
            if base not in bases:
                bases[base] = load_base(base, self.folder)
            changes = {**self.overrides, **{k: v for k, v in values.items() if k != "base"}}
            name = "_".join(_label(p, v) for p, v in values.items()) or "cell"
            with in_cell(name):
                hyper_params = bases[base].with_overrides(changes)
            cells.append(SweepCell(name, values, hyper_params))
        names = [c.name for c in cells]
        if len(set(names)) != len(names):
            raise InvalidParameterError("axes", names, "values that name every cell differently")
        return cells


@contextmanager
def in_cell(name: str) -> Iterator[None]:
    """Name the cell in the message of a nip error raised in the block (once)."""
    try:
        yield
    except NipError as error:
        if error.args and isinstance(error.args[0], str):
            error.args = (f"cell {name}: {error.args[0]}", *error.args[1:])
        raise


@dataclass
class SweepEstimate:
    """The dry run of a whole grid: each cell's estimate and their total."""

    name: str
    cells: list[tuple[SweepCell, CostEstimate]]

    @property
    def total_usd(self) -> float | None:
        """The sum of the cells' estimates (None when one of them has no price)."""
        return sum_known(estimate.total_usd for _, estimate in self.cells)

    @property
    def total_calls(self) -> int:
        return sum(estimate.total_calls for _, estimate in self.cells)

    def rows(self) -> list[dict[str, Any]]:
        """One row per cell: its name, axis values, protocol, iterations, dialogues, model
        calls and USD (None: a model has no price)."""
        return [
            {
                "cell": cell.name,
                **cell.values,
                "protocol": cell.hyper_params.interaction_protocol,
                "iterations": cell.hyper_params.rl.num_iterations,
                "dialogues": sum(row["dialogues"] for row in estimate.by_stage()),
                "calls": estimate.total_calls,
                "usd": estimate.total_usd,
            }
            for cell, estimate in self.cells
        ]

    def to_dataframe(self):
        """:meth:`rows` as a DataFrame (the total is :attr:`total_usd`)."""
        with needs("dataframes"):
            import pandas as pd

        return pd.DataFrame(self.rows())

    @property
    def total(self) -> str:
        """The total in words: model calls and USD."""
        usd = (
            "unknown (a model has no price)"
            if self.total_usd is None
            else f"${self.total_usd:,.2f}"
        )
        return f"{self.total_calls:,} model calls at most, about {usd}"

    def __str__(self) -> str:
        head = ("cell", "protocol", "iters", "dialogues", "calls", "USD")
        formats = {"cell": "", "protocol": "", "iterations": "", "dialogues": ",", "calls": ","}
        formats["usd"] = ",.2f"
        rows = [
            ["?" if r[k] is None else f"{r[k]:{f}}" for k, f in formats.items()]
            for r in self.rows()
        ]
        title = f"Dry run of sweep {self.name!r}: {len(self.cells)} cells"
        return "\n".join([title, "", text_table(head, rows), "", f"total: {self.total}"])

    def __repr__(self) -> str:
        return f"SweepEstimate({self.name!r}: {len(self.cells)} cells, {self.total})"

    def _repr_html_(self) -> str:
        frame = self.to_dataframe().to_html(index=False, na_rep="?", float_format="{:,.2f}".format)
        title = f"Dry run of sweep {self.name!r}: {len(self.cells)} cells, {self.total}"
        return f"<div><b>{html.escape(title)}</b>{frame}</div>"


def estimate_sweep(
    spec: GridSpec, settings: ExperimentSettings | None = None, *, sample_items: int = 4
) -> SweepEstimate:
    """Every cell's dry run (:func:`~nip.training.cost_estimate.estimate_cost`): nothing is
    called and nothing is written."""
    from nip.training.cost_estimate import estimate_cost

    settings = settings or ExperimentSettings(show_progress=False)
    estimates = [
        (cell, estimate_cost(cell.hyper_params, settings, sample_items=sample_items))
        for cell in spec.cells()
    ]
    return SweepEstimate(spec.name, estimates)


def default_sweep_dir(name: str) -> Path:
    """Where a sweep's cells go unless told otherwise: ``runs/sweeps/<name>``."""
    return Path("runs") / "sweeps" / name


def load_sweep_spec(sweep_dir: str | Path) -> GridSpec:
    """The grid a sweep directory was made from (:class:`NotASweepDirectoryError` where none)."""
    manifest = read_manifest(sweep_dir)
    folder = manifest.get("folder")
    return GridSpec.from_dict(manifest["grid"], folder=Path(folder) if folder else None)
