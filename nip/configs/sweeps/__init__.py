"""Shipped sweep grids (``nip sweep NAME``): the paper's comparisons as one command each.

See docs/training.md ("Sweeps") for the grid format.
"""
