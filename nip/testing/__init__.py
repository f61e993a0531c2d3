"""The fault-injecting OpenAI-compatible server of tutorial 06 (:mod:`nip.testing.server`,
:mod:`nip.testing.faults`).

``FaultPlan`` is light; the server (FastAPI on uvicorn) loads on use. The suite's other test
doubles live in ``tests/doubles``.
"""

from nip.testing.faults import FaultKind, FaultPlan
from nip.utils.lazy import lazy_attributes

_LAZY = dict.fromkeys(("create_app", "serve", "RunningServer", "ServerStats"), "nip.testing.server")


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)


__all__ = ["FaultKind", "FaultPlan", *_LAZY]
