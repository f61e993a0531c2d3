"""Fine-tuning on ``nip serve``: the OpenAI fine-tuning API, plus LoRA settings and a check
that the server speaks a compatible API version.

The server trains a LoRA adapter per job and serves it under the job's ``fine_tuned_model``
(``verifier-it3``) as soon as it succeeds, so switching models is only a change of name.
"""

from __future__ import annotations

import os

from nip.backends.self_hosted import API_KEY_ENV, check_server, server_url
from nip.jobs._types import FineTuneSpec
from nip.jobs.openai_api import OpenAIFineTuneBackend
from nip.parameters import PureTextAgentParameters


class SelfHostedFineTuneBackend(OpenAIFineTuneBackend):
    """Fine-tuning jobs on ``nip serve`` at ``server_url`` (``http://host:5000``), with its bearer
    token ``api_key`` (None: a loopback server without one)."""

    name = "self-hosted-fine-tuning"

    def __init__(self, server_url: str, api_key: str | None = None):
        super().__init__(f"{server_url.rstrip('/')}/v1", api_key, send_lora_settings=True)
        self.server_url = server_url.rstrip("/")
        self._checked = False

    @classmethod
    def from_agent_params(cls, params: PureTextAgentParameters) -> SelfHostedFineTuneBackend:
        """The server named by the agent's ``language_model_server_*`` fields."""
        return cls(server_url(params), os.environ.get(API_KEY_ENV))

    async def check_server(self) -> None:
        """Check the server's API version once (:class:`IncompatibleServerError` when its major
        version differs; a minor difference only warns)."""
        if not self._checked:
            await check_server(self.server_url, self._api_key)
            self._checked = True

    async def create_job(self, spec: FineTuneSpec) -> str:
        await self.check_server()
        return await super().create_job(spec)

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._checked = False

    def __repr__(self) -> str:
        return f"SelfHostedFineTuneBackend(server_url={self.server_url!r})"
