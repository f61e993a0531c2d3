"""The scripted dummy that stands in for any provider when ``use_dummy_api=True``."""

from __future__ import annotations

from nip.backends.dummy import DummyBackend
from nip.jobs.dummy import DummyFineTuneBackend
from nip.parameters.providers import DUMMY, DUMMY_FACTS
from nip.providers._provider import Provider
from nip.providers.local import spec_settings

PROVIDER = Provider(
    DUMMY,
    DUMMY_FACTS,
    endpoint_key=lambda params: DUMMY,
    chat=lambda params, settings: DummyBackend(latency_s=settings.dummy_latency_s),
    fine_tune=lambda params, settings, chat: DummyFineTuneBackend(),
    job_settings=spec_settings,
)
