"""Test doubles of the suite (not shipped with nip): a tiny random chat model and adapter, a
stand-in vLLM, a fine-tuning backend whose jobs fail on purpose, and process-group checks.

Imported as ``tests.doubles.<module>`` (the repository root is on ``sys.path``: pytest's
``pythonpath`` option, or ``python -m`` from the root)."""
