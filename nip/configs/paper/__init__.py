"""Presets of the paper's code-validation experiments (Hammond & Adam-Day, ICLR 2025).

See README.md ("Run a paper experiment") and docs/dataset.md for what they set and why.
"""
