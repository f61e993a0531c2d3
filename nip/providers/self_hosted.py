"""SelfHosted: chat and LoRA fine-tuning on ``nip serve`` (one's own GPU server)."""

from __future__ import annotations

from nip.backends.self_hosted import SelfHostedBackend, served_params
from nip.jobs.openai_api import job_request
from nip.jobs.self_hosted import SelfHostedFineTuneBackend
from nip.parameters import PROVIDER_FACTS
from nip.providers._provider import Provider


def _chat(params, settings):
    limit = settings.max_concurrency
    return SelfHostedBackend.from_agent_params(
        params, **({} if limit is None else {"max_concurrency": limit})
    )


PROVIDER = Provider(
    "SelfHosted",
    PROVIDER_FACTS["SelfHosted"],
    endpoint_key=lambda p: (
        f"selfhosted:{p.language_model_server_scheme_host}:{p.language_model_server_port}"
    ),
    chat=_chat,
    fine_tune=lambda params, settings, chat: SelfHostedFineTuneBackend.from_agent_params(
        served_params(params, settings)  # the server its run owns, if any
    ),
    # The OpenAI API's job settings, plus the LoRA settings and learning rate nip serve reads.
    job_settings=lambda spec: job_request(spec, lora_settings=True),
)
