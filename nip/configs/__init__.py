"""Shipped experiment presets: YAML files of :class:`~nip.parameters.HyperParameters`.

A preset's name is its path below this folder without ``.yaml`` (``quickstart``,
``paper/nip-ei``); its description is the first comment line of the file. ``nip presets``
lists them and ``nip run NAME`` runs one.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

from nip.errors import NipError
from nip.parameters import HyperParameters

#: Sub-folders of presets (each also a package, so that the files are installed).
PRESET_FOLDERS = ("", "paper")


class UnknownPresetError(NipError, KeyError):
    """No shipped preset has this name."""

    def __init__(self, name: str, known: list[str]):
        self.name = name
        super().__init__(f"no preset named {name!r}; shipped presets: {', '.join(known)}")

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class Preset:
    """A shipped preset.

    Attributes:
        name: What ``nip run`` takes (``paper/nip-ei``).
        description: The file's first comment line.
    """

    name: str
    description: str

    def text(self) -> str:
        """The YAML text of the preset."""
        return _file(self.name).read_text(encoding="utf-8")

    def load(self) -> HyperParameters:
        """The preset's parameters, validated."""
        return HyperParameters.from_yaml(self.text())


def list_presets() -> list[Preset]:
    """Every shipped preset, sorted by name."""
    presets = []
    for folder in PRESET_FOLDERS:
        directory = resources.files("nip.configs").joinpath(folder) if folder else _root()
        for entry in directory.iterdir():
            if entry.is_file() and entry.name.endswith(".yaml"):
                name = f"{folder}/{entry.name[:-5]}" if folder else entry.name[:-5]
                presets.append(Preset(name, _description(entry)))
    return sorted(presets, key=lambda preset: preset.name)


def get_preset(name: str) -> Preset:
    """The shipped preset called ``name``.

    Raises:
        UnknownPresetError: There is none (the message lists those there are).
    """
    for preset in list_presets():
        if preset.name == name:
            return preset
    raise UnknownPresetError(name, [preset.name for preset in list_presets()])


def load_preset(name: str) -> HyperParameters:
    """The parameters of the shipped preset called ``name`` (``"paper/nip-ei"``)."""
    return get_preset(name).load()


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
