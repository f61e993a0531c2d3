"""Which fine-tuning backend serves an agent: decided here, from its parameters."""

from __future__ import annotations

from pathlib import Path

from nip.errors import FineTuneError
from nip.jobs._types import FineTuneBackend, FineTuneEvent, FineTuneJob, FineTuneSpec
from nip.jobs.dummy import DummyFineTuneBackend
from nip.parameters import PureTextAgentParameters
from nip.settings import ExperimentSettings


class NotFineTunableBackend:
    """For providers that offer no fine-tuning (OpenRouter): every job is refused."""

    name = "not-fine-tunable"

    def __init__(self, provider: str):
        self.provider = provider

    async def create_job(self, spec: FineTuneSpec) -> str:
        raise FineTuneError(
            f"{self.provider} offers no fine-tuning; freeze these agents (freeze_agent=True) "
            "or use another provider"
        )

    async def get_job(self, job_id: str) -> FineTuneJob:
        return FineTuneJob(id=job_id, status="not_found")

    async def cancel_job(self, job_id: str) -> None:
        return None

    async def list_events(self, job_id: str) -> list[FineTuneEvent]:
        return []


def fine_tune_backend_for(
    params: PureTextAgentParameters, settings: ExperimentSettings
) -> FineTuneBackend:
    """The fine-tuning backend for agents with these parameters."""
    if params.use_dummy_api:
        return DummyFineTuneBackend()
    provider = params.model_provider
    if provider == "Local":
        from nip.jobs.local_lora import InProcessLoraFineTuneBackend

        root = Path(settings.run_dir) if settings.run_dir else Path.cwd() / "runs" / "adhoc"
        return InProcessLoraFineTuneBackend(root / "jobs")
    if provider == "OpenRouter":
        return NotFineTunableBackend("OpenRouter")
    from nip.jobs.openai_api import OpenAIFineTuneBackend

    return OpenAIFineTuneBackend.from_agent_params(params)
