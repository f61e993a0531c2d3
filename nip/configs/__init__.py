"""Shipped experiment presets: YAML files of :class:`~nip.parameters.HyperParameters`.

A preset's name is its path here without ``.yaml`` (``paper/nip-ei``); its description is
the file's first comment line. A preset may be built on others::

    extends: [paper/nip-ei, open/_model]              # a preset, then fragments, in order
    set:                                               # optional: more dotted overrides
      rl.num_iterations: 4

A fragment (a name starting with ``_``, never listed or run alone) holds only ``set:``.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

from nip.errors import ConfigFileError, NipError
from nip.parameters import HyperParameters

#: Sub-folders of presets (each also a package, so that the files are installed).
PRESET_FOLDERS = ("", "paper", "open")
#: The folder of the shipped sweep grids (``nip sweep NAME``).
GRID_FOLDER = "sweeps"
#: The keys of a preset built on others.
_EXTENDING_KEYS = {"extends", "set"}


class UnknownPresetError(NipError, KeyError):
    """No shipped preset has this name."""

    def __init__(self, name: str, known: list[str]):
        self.name = name
        super().__init__(f"no preset named {name!r}; shipped presets: {', '.join(known)}")

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class Preset:
    """A shipped preset: ``name`` is what ``nip run`` takes, ``description`` its first comment."""

    name: str
    description: str

    def text(self) -> str:
        return _file(self.name).read_text(encoding="utf-8")

    def load(self) -> HyperParameters:
        """The preset's parameters, validated (those it extends, then its overrides)."""
        return _build(self.name, ())


@dataclass(frozen=True)
class Grid:
    """A shipped sweep grid (``nip sweep NAME``; the format: :mod:`nip.sweeps.grid`)."""

    name: str
    description: str

    def text(self) -> str:
        return _root().joinpath(GRID_FOLDER, f"{self.name}.yaml").read_text(encoding="utf-8")


def list_grids() -> list[Grid]:
    """Every shipped sweep grid, sorted by name."""
    files = [e for e in _root().joinpath(GRID_FOLDER).iterdir() if e.is_file()]
    grids = [Grid(e.name[:-5], _description(e)) for e in files if e.name.endswith(".yaml")]
    return sorted(grids, key=lambda grid: grid.name)


def list_presets() -> list[Preset]:
    """Every shipped preset, sorted by name."""
    presets = []
    for folder in PRESET_FOLDERS:
        directory = _root().joinpath(folder) if folder else _root()
        for entry in directory.iterdir():
            if entry.is_file() and entry.name.endswith(".yaml") and entry.name[0] != "_":
                name = f"{folder}/{entry.name[:-5]}" if folder else entry.name[:-5]
                presets.append(Preset(name, _description(entry)))
    return sorted(presets, key=lambda preset: preset.name)


def get_preset(name: str) -> Preset:
    """The shipped preset called ``name`` (``UnknownPresetError`` listing those there are)."""
    for preset in list_presets():
        if preset.name == name:
            return preset
    raise UnknownPresetError(name, [preset.name for preset in list_presets()])


def load_preset(name: str) -> HyperParameters:
    """The parameters of the shipped preset called ``name`` (``"paper/nip-ei"``)."""
    return get_preset(name).load()


def _build(name: str, seen: tuple[str, ...]) -> HyperParameters:
    """The parameters of preset ``name``: its file, or what it extends and its overrides."""
    import yaml

    if name in seen:
        raise ConfigFileError(f"preset {name!r} extends itself: {' -> '.join((*seen, name))}")
    entry = _file(name)
    if not entry.is_file():
        raise UnknownPresetError(name, [preset.name for preset in list_presets()])
    text = entry.read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict) or "extends" not in data:
        return HyperParameters.from_yaml(text)
    unknown = set(data) - _EXTENDING_KEYS
    if unknown:
        raise ConfigFileError(
            f"preset {name!r} extends others and so holds only extends and set, not "
            f"{', '.join(sorted(unknown))}"
        )
    bases = data["extends"] if isinstance(data["extends"], list) else [data["extends"]]
    params: HyperParameters | None = None
    for base in map(str, bases):
        if _is_fragment(base):
            if params is None:
                raise ConfigFileError(
                    f"preset {name!r}: extends starts with a preset, not {base!r}"
                )
            params = params.with_overrides(_fragment_overrides(base))
        elif params is None:
            params = _build(base, (*seen, name))
        else:
            raise ConfigFileError(f"preset {name!r}: extends one preset, then fragments (_name)")
    if params is None:
        raise ConfigFileError(f"preset {name!r}: extends names nothing")
    return params.with_overrides(dict(data.get("set") or {}))


def open_model_overrides() -> dict[str, object]:
    """The overrides that put a configuration's agents on the ``open/*`` presets' model."""
    return _fragment_overrides("open/_model")


def _is_fragment(name: str) -> bool:
    return name.rpartition("/")[2].startswith("_")


def _fragment_overrides(name: str) -> dict[str, object]:
    """The ``set:`` of fragment ``name`` (``open/_model``)."""
    import yaml

    entry = _file(name)
    if not entry.is_file():
        raise ConfigFileError(f"no preset fragment named {name!r}")
    data = yaml.safe_load(entry.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict) or set(data) - {"set"}:
        raise ConfigFileError(f"fragment {name!r} holds only set: (dotted overrides)")
    return dict(data.get("set") or {})


def _root() -> Traversable:
    return resources.files("nip.configs")


def _file(name: str) -> Traversable:
    folder, _, stem = name.rpartition("/")
    directory = _root().joinpath(folder) if folder else _root()
    return directory.joinpath(f"{stem}.yaml")


def _description(entry: Traversable) -> str:
    """The first comment line of a preset file, without the ``#``."""
    for line in entry.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
        if line.strip():
            break
    return ""
