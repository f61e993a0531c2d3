"""A run's dialogues in Inspect's own log viewer: ``inspect view`` on the exported logs, in
Debian's Chromium driven by Playwright, shows a dialogue's messages under its agents' names.

Like ``tests/test_browser.py``, it is skipped (with the reason) without ``/usr/bin/chromium``
or Playwright's Python package; ``playwright install`` is never needed.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    RlParameters,
    TextRlParameters,
)
from nip.runs.inspect_export import export_inspect
from nip.runs.run_dir import RunDirectory
from nip.settings import ExperimentSettings
from nip.training.trainer import build_trainer

CHROMIUM = Path("/usr/bin/chromium")
START_TIMEOUT_S = 60
#: How long the page may take to show what a click asked for.
SHOW_TIMEOUT_MS = 60_000


def _missing() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (scripts/setup.sh installs Debian's chromium as root)"
    for module in ("playwright", "inspect_ai"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (the dev extra installs it)"
    return None


pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(300),
    pytest.mark.skipif(_missing() is not None, reason=_missing() or ""),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    """Terminate the viewer's process group, killing it if it lingers."""
    for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def test_inspect_view_shows_a_dialogues_messages_under_its_agents_names(
    make_tiny_dataset, tmp_path
):
    from playwright.sync_api import sync_playwright

    params = HyperParameters(
        trainer="pure_text_ei",
        dataset=str(make_tiny_dataset(items=12, train=8)),
        agents={
            "prover": PureTextAgentParameters(use_dummy_api=True),
            "verifier": PureTextAgentParameters(use_dummy_api=True),
        },
        nip_protocol=NipProtocolParameters(max_message_rounds=3),
        rl=RlParameters(num_iterations=1, rollouts_per_iteration=4),
        text_rl=TextRlParameters(test_scheme="none"),
    )
    run = tmp_path / "run"
    build_trainer(params, ExperimentSettings(run_dir=run, show_progress=False)).train()
    (log,) = export_inspect(run, tmp_path / "logs")
    dialogue = RunDirectory(run).load_rollouts("train", 0)[0]

    port = _free_port()
    inspect = shutil.which("inspect", path=str(Path(sys.executable).parent)) or "inspect"
    output = (tmp_path / "view.log").open("wb")
    command = [inspect, "view", "--log-dir", str(tmp_path / "logs"), "--host", "127.0.0.1"]
    viewer = subprocess.Popen(
        [*command, "--port", str(port)],
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert viewer.poll() is None, (tmp_path / "view.log").read_text()[-2000:]
            try:
                urllib.request.urlopen(f"{url}/api/logs", timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"inspect view did not answer at {url}"
                time.sleep(0.3)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox"]
            )
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"{url}/#/tasks/{log.name}/samples/sample/{dialogue.id}/1/")
                for turn in dialogue.turns:
                    page.get_by_text(turn.raw_text).first.wait_for(timeout=SHOW_TIMEOUT_MS)
                for agent in ("prover", "verifier"):
                    call = page.get_by_text(f"model call ({agent})", exact=False).first
                    call.wait_for(timeout=SHOW_TIMEOUT_MS)
                page.screenshot(path=str(tmp_path / "inspect-view.png"))
            finally:
                browser.close()
    finally:
        _stop(viewer)
        output.close()
