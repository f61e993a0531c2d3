"""Typed errors a caller can catch, each with a message a researcher understands."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class NipError(Exception):
    """Base class of every error raised on purpose by nip."""


class MissingExtraError(NipError, ImportError):
    """A feature needs a pip extra that is not installed (see :mod:`nip.extras`).

    Attributes:
        feature: The feature, as the user meets it (``"nip serve"``).
        extra: The extra that installs it (``"server"``).
        modules: The modules that are missing.
    """

    def __init__(self, feature: str, extra: str, modules: Iterable[str]):
        self.feature = feature
        self.extra = extra
        self.modules = list(modules)
        super().__init__(
            f"{feature} needs {', '.join(self.modules)} (not installed): pip install 'nip[{extra}]'"
        )


class InvalidParameterError(NipError, ValueError):
    """A configuration value is not allowed.

    Attributes:
        field: Dotted address of the offending field (e.g. ``"agents.verifier.top_p"``).
        allowed: A short description of what is allowed.
        reason: Why, in words (``"expected " + allowed`` when not given).
    """

    def __init__(self, field: str, value: Any, allowed: str, *, reason: str | None = None):
        self.field = field
        self.value = value
        self.allowed = allowed
        self.reason = reason or f"expected {allowed}"
        message = f"{field}={value!r} is not allowed: {self.reason}"
        if reason:
            message += f" (allowed: {allowed})"
        super().__init__(message)

    def with_prefix(self, prefix: str) -> InvalidParameterError:
        """Return the same error with ``prefix.`` in front of the field address (with no
        prefix: this error; with no field: ``prefix`` is the address)."""
        if not prefix:
            return self
        dot = "." if self.field else ""
        error = InvalidParameterError(f"{prefix}{dot}{self.field}", self.value, self.allowed)
        error.args, error.reason = (f"{prefix}{dot}{self.args[0]}",), self.reason
        return error


def require_count(field: str, value: Any, minimum: int = 1) -> int:
    """``value``, if a whole number >= ``minimum`` (else ``InvalidParameterError``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidParameterError(field, value, f"an integer >= {minimum}")
    return value


class UnknownKeyError(NipError, KeyError):
    """A dictionary of parameters has a key that no field matches."""

    def __init__(self, cls_name: str, keys: Iterable[str], fields: Iterable[str]):
        self.keys = sorted(keys)
        self.fields = sorted(fields)
        super().__init__(
            f"{cls_name} has no field(s) {', '.join(self.keys)}; "
            f"known fields: {', '.join(self.fields)}. "
            "Pass ignore_extra_keys=True to drop unknown keys."
        )

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class ConfigFileError(NipError, ValueError):
    """A configuration file (``path``, if any) or text is not valid YAML or JSON."""

    def __init__(self, message: str, *, path: Any = None):
        self.path = path
        super().__init__(message)


class IncompatibleParametersError(NipError):
    """Saved parameters come from an incompatible version of the parameter schema."""


class UnknownProtocolError(NipError, ValueError):
    """The interaction protocol named does not exist."""


# ---------------------------------------------------------------------- generation
class ProtocolDefinitionError(NipError, TypeError):
    """A protocol class is not well defined (its agents, channels or turn schedule disagree)."""


class ProtocolUsageError(NipError, ValueError):
    """A protocol was asked about something it does not have: an agent it lacks, a prover's
    stance for the verifier, a decision outside the verifier's decision window."""


class GenerationError(NipError):
    """A model backend could not produce a completion."""


class BackendUnavailableError(GenerationError):
    """The backend could not be reached, or kept failing after every retry (``attempts``)."""

    def __init__(self, message: str, *, attempts: int = 1):
        self.attempts = attempts
        super().__init__(message)


class InsufficientCreditsError(GenerationError):
    """The provider refused the request for lack of credits (HTTP 402). Never retried."""


class ModelNotFoundError(GenerationError):
    """The backend does not know the model (or adapter) name asked for."""


class UnservableAdapterError(ModelNotFoundError):
    """A LoRA adapter (or a stack of them) that an engine cannot serve as it is."""


class AuthenticationError(GenerationError):
    """The backend refused the API key (HTTP 401/403). The key itself is never shown."""


class ContentFilterError(GenerationError):
    """The provider blocked the completion with its content filter."""


class UnknownFinishReasonError(GenerationError):
    """The completion stopped for a reason nip does not know how to handle."""


class InvalidResponseError(GenerationError):
    """The completion does not have the form the protocol needs (retried)."""


class InvalidDecisionError(InvalidResponseError):
    """The verifier wrote ``Decision:`` followed by something other than accept or reject."""


class NotAllActiveChannelsInResponseError(InvalidResponseError):
    """A multi-channel response is missing the header of a channel it must write to."""


# --------------------------------------------------------------------- fine-tuning
class FineTuneError(NipError):
    """A fine-tuning job could not be created, or its backend refused a request."""


class FineTuneJobFailed(FineTuneError):
    """A fine-tuning job (``job_id``) ended in failure; ``error`` is the backend's account."""

    def __init__(self, job_id: str, error: str):
        self.job_id = job_id
        self.error = error
        super().__init__(f"fine-tuning job {job_id} failed: {error}")


class FineTuningClosedError(FineTuneError):
    """The fine-tuning API refused a job (no permission, or no longer accepting: see
    :mod:`nip.jobs.openai_closing`). Never transient: the run stops, resumable elsewhere."""


class SharedModelGroupError(NipError, ValueError):
    """Agents in one shared model group disagree on a setting that defines the model."""


class FineTuneStoppedError(FineTuneJobFailed):
    """``group``'s fine-tuning job failed and ``on_fine_tune_failure="stop"`` ended the run;
    ``nip resume`` resubmits the job."""

    def __init__(self, group: str, job_id: str, error: str):
        self.group = group
        super().__init__(job_id, error)
        self.args = (
            f"group {group!r}: fine-tuning job {job_id} failed: {error}; the run stopped "
            "(text_rl.on_fine_tune_failure='stop'); `nip resume RUN_DIR` resubmits the job",
        )
