"""nip: neural interactive proofs with language-model agents, Jupyter-first.

The public API is flat: ``from nip import HyperParameters, build_protocol_handler``.
Heavy libraries (torch, transformers, vLLM) load only when a feature that needs them is used.
"""

__version__ = "0.1.0"

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
]
