"""A tutorial in a real browser: JupyterLab, Debian's Chromium, driven by Playwright.

The MALT tutorial (``notebooks/05_malt_trees.ipynb``) runs at CI size (a dummy prover, and the
embedded verifier with one small DPO job: minutes) from JupyterLab's Run menu; its ipywidgets
and its plotly figure must render. Screenshots go to the test's temporary folder and, when
``NIP_SCREENSHOT_DIR`` is set, there too.

``scripts/setup.sh`` installs Chromium (as root, with apt-get) and the ``dev`` extra installs
Playwright's Python package; ``playwright install`` is never needed. Without either, the test is
skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "05_malt_trees.ipynb"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LAB_START_TIMEOUT_S = 60
RUN_TIMEOUT_S = 480  # tutorial 5's DPO job trains a LoRA adapter on the CPU


def _missing() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (scripts/setup.sh installs Debian's chromium as root)"
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install playwright; no `playwright install`)"
    return None


pytestmark = [
    pytest.mark.browser,
    pytest.mark.notebook,
    pytest.mark.skipif(_missing() is not None, reason=_missing() or ""),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _lab_settings(home: Path) -> dict[str, str]:
    """Jupyter folders of its own, so that no user setting or workspace leaks in."""
    settings = home / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # Keep every cell in the DOM, so that the checks see outputs scrolled out of view.
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    labconfig = home / "config" / "labconfig"
    labconfig.mkdir(parents=True)
    # No "would you like to receive news?" toast (and no request for it).
    disabled = {"@jupyterlab/apputils-extension:announcements": True}
    (labconfig / "page_config.json").write_text(json.dumps({"disabledExtensions": disabled}))
    from nip.tutorial import fresh_cache_dir

    return {
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "JUPYTER_PLATFORM_DIRS": "1",
        "NIP_TUTORIAL_SIZE": "ci",
        "NIP_CACHE_DIR": str(fresh_cache_dir(home)),
        "WANDB_MODE": "disabled",
    }


@pytest.fixture
def jupyter_lab(tmp_path: Path) -> Iterator[str]:
    """JupyterLab serving a scratch copy of the notebook on a free loopback port.

    Yields the server's URL. The server (and its kernels, in its process group) is stopped
    afterwards whatever happens.
    """
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(NOTEBOOK, root)
    port = _free_port()
    log = tmp_path / "jupyterlab.log"
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        "--IdentityProvider.token=",
        "--ServerApp.allow_root=True",
        f"--ServerApp.root_dir={root}",
    ]
    env = {**os.environ, **_lab_settings(tmp_path / "jupyter")}
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + LAB_START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"JupyterLab exited at start:\n{log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer in {LAB_START_TIMEOUT_S} s")
                time.sleep(0.3)
        yield url
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    """Terminate the process group (the server and its kernels), killing it if it lingers."""
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


def _prompts(page) -> list[str]:
    return page.eval_on_selector_all(
        ".jp-CodeCell .jp-InputPrompt", "cells => cells.map(c => c.textContent.trim())"
    )


def _wait_for_all_cells(page) -> None:
    """Wait until every code cell has run; fail early, with the errors, if the run stopped."""
    executed = re.compile(r"^\[\d+\]:$")
    deadline = time.monotonic() + RUN_TIMEOUT_S
    stalled_since = None
    while time.monotonic() < deadline:
        prompts = _prompts(page)
        if prompts and all(executed.match(p) for p in prompts):
            return
        idle = page.locator(".jp-StatusBar-Widget", has_text="Idle").count() > 0
        if idle and not any(p == "[*]:" for p in prompts):
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > 10:  # nothing runs, nothing queued
                break
        else:
            stalled_since = None
        page.wait_for_timeout(500)
    errors = page.locator("[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
    pytest.fail(f"not every cell ran: {_prompts(page)}\n" + "\n".join(errors)[-3000:])


def _save(page, name: str, folders: list[Path]) -> None:
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / name))


@pytest.mark.timeout(LAB_START_TIMEOUT_S + RUN_TIMEOUT_S + 120)
def test_the_malt_tutorial_runs_in_jupyterlab_and_its_widgets_and_figure_render(
    jupyter_lab, tmp_path
):
    from playwright.sync_api import sync_playwright

    folders = [tmp_path / "screenshots"]
    if os.environ.get("NIP_SCREENSHOT_DIR"):
        folders.append(Path(os.environ["NIP_SCREENSHOT_DIR"]))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(90_000)
            page.goto(f"{jupyter_lab}/lab/tree/{NOTEBOOK.name}")
            page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first.wait_for()
            page.locator(".jp-StatusBar-Widget", has_text="Idle").first.wait_for()
            page.keyboard.press("Control+b")  # hide the file browser: more room for the notebook

            page.locator(".lm-MenuBar-item", has_text="Run").first.click()
            page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
            _wait_for_all_cells(page)

            assert page.get_by_text("Error displaying widget").count() == 0
            assert page.locator(".jupyter-widgets").count() > 0
            figure = page.locator(".jp-CodeCell", has_text="plot_tree(tree").first
            figure.locator("svg.main-svg").first.wait_for()
            figure.evaluate("e => e.scrollIntoView({block: 'start'})")
            _save(page, "05_malt_trees-tree.png", folders)
            # The icicle summary drew its blocks (an empty plot would still have an svg).
            summary = page.locator(".jp-CodeCell", has_text="plot_trees_summary(trees").first
            assert summary.locator(".main-svg g.slice").count() > 1
            summary.evaluate("e => e.scrollIntoView({block: 'start'})")
            page.mouse.move(5, 450)  # no hover label in the picture
            _save(page, "05_malt_trees-summary.png", folders)

            # The tree viewer talks to the kernel: another node in its picker, another panel.
            viewer = page.locator(".jp-CodeCell", has_text="TreeViewer(tree").first
            node_picker = viewer.locator(".jp-OutputArea .jupyter-widgets select").nth(1)
            panel = viewer.locator(".jp-OutputArea .widget-html").last
            before = panel.inner_text()
            options = node_picker.locator("option").all_inner_texts()
            assert len(options) > 2, options
            node_picker.select_option(options[1])
            page.wait_for_function(
                "([el, text]) => el.innerText !== text", arg=[panel.element_handle(), before]
            )
            assert "The dialogue up to here" in panel.inner_text()
            # Its figure drew the tree's nodes (one marker per node).
            assert viewer.locator("svg.main-svg .scatterlayer .point").count() >= len(options)
            viewer.evaluate("e => e.scrollIntoView({block: 'start'})")
            page.mouse.move(5, 450)  # no hover highlight in the picture
            _save(page, "05_malt_trees-viewer.png", folders)
        finally:
            browser.close()
