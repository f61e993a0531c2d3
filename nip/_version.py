"""The package version, in the lowest layer so that any module may stamp it on what it writes."""

__version__ = "0.1.0"
