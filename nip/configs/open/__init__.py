"""The paper's presets on one open-weight model served by ``nip serve`` (``open/*``).

Each preset extends its ``paper/*`` preset (schedule, data, protocol options) and the fragment
``open/_model.yaml``, the one place that names the model and its LoRA settings. See
docs/training.md ("The paper's comparison on open weights").
"""
