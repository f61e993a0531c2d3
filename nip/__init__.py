"""nip: neural interactive proofs with language-model agents, Jupyter-first.

The public API is flat: ``from nip import HyperParameters, build_protocol_handler``.
Heavy libraries (torch, transformers, vLLM) load only when a feature that needs them is used.
"""

from nip._version import __version__
from nip.errors import (
    IncompatibleParametersError,
    InvalidParameterError,
    NipError,
    UnknownKeyError,
    UnknownProtocolError,
)
from nip.parameters import (
    CodeValidationParameters,
    CommonProtocolParameters,
    DebateProtocolParameters,
    HyperParameters,
    MnipProtocolParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    PureTextEiParameters,
    PureTextMaltParameters,
    RlParameters,
    TextRlParameters,
)
from nip.protocols import PROTOCOLS, Decision, ProtocolHandler, build_protocol_handler
from nip.utils.lazy import lazy_attributes

# Loaded on first use, so that `import nip` stays fast.
_LAZY = {
    "Session": "nip.session",
    "ExperimentSettings": "nip.settings",
    "Dialogue": "nip.rollouts.dialogue",
    "RolloutBatch": "nip.rollouts.engine",
    "Transcript": "nip.rollouts.records",
    "Datapoint": "nip.rollouts.records",
    "PureTextWholeAgent": "nip.agents.agent",
    "OpenAiWholeAgent": "nip.agents.agent",
    "PureTextSharedModelGroup": "nip.training.groups",
    "OpenAiSharedModelGroup": "nip.training.groups",
    "PureTextEiTrainer": "nip.training.trainer",
    "PureTextMaltTrainer": "nip.training.trainer",
    "build_trainer": "nip.training.trainer",
    "RunPlan": "nip.training.plan",
    "plan_run": "nip.training.cost_estimate",
    "sweep": "nip.sweeps",
    "Sweep": "nip.sweeps",
    "GridSpec": "nip.sweeps.grid",
    "compare_runs": "nip.viz.compare_runs",
    "read_spend": "nip.runs.spend",
    "export_inspect": "nip.runs.inspect_export",
    "load_code_validation_dataset": "nip.data",
    "ServerHandle": "nip.server.background",
    "serve_in_background": "nip.server.background",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "PROTOCOLS",
    "CodeValidationParameters",
    "CommonProtocolParameters",
    "DebateProtocolParameters",
    "Decision",
    "HyperParameters",
    "IncompatibleParametersError",
    "InvalidParameterError",
    "MnipProtocolParameters",
    "NipError",
    "NipProtocolParameters",
    "ProtocolHandler",
    "PureTextAgentParameters",
    "PureTextEiParameters",
    "PureTextMaltParameters",
    "RlParameters",
    "TextRlParameters",
    "UnknownKeyError",
    "UnknownProtocolError",
    "__version__",
    "build_protocol_handler",
    *_LAZY,
]
