"""Stands in for rfc3987_syntax on the PYTHONPATH of the processes tests start (conftest)."""

raise ImportError("kept out of the processes tests start (tests/conftest.py)")
