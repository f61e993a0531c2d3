"""The tutorials in a real browser: JupyterLab, Debian's Chromium, driven by Playwright.

Each notebook of :data:`TUTORIALS` (tutorial 08, on the dummy API, and
``tests/notebooks/widgets.ipynb`` for the widgets of the tutorials that run the real model)
runs at CI size from JupyterLab's Run menu in one JupyterLab server and one browser shared by
all; then its row's check clicks real buttons of its widgets and asserts what the page shows
next. Screenshots go to the test's temporary folder and, when ``NIP_SCREENSHOT_DIR`` is set,
there too (``<notebook>-<what>.png``). To cover another notebook, add a row.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
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
#: How long a check waits for the page to answer a click.
CLICK_TIMEOUT_MS = 60_000


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


@pytest.fixture(scope="module")
def jupyter_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One JupyterLab for every tutorial, serving scratch copies of them on a free loopback
    port.

    Yields the server's URL. The server (and its kernels, in its process group) is stopped
    afterwards whatever happens.
    """
    tmp_path = tmp_path_factory.mktemp("jupyterlab")
    root = tmp_path / "root"
    root.mkdir()
    for tutorial in TUTORIALS:
        shutil.copy(tutorial.path, root)
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
        "--ServerApp.disable_check_xsrf=True",  # the test shuts kernels down with DELETE
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


def _wait_for_all_cells(page, timeout_s: float) -> None:
    """Wait until every code cell has run; fail early, with the errors, if the run stopped."""
    executed = re.compile(r"^\[\d+\]:$")
    deadline = time.monotonic() + timeout_s
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


class Screenshots:
    """Saves screenshots of a page as ``<notebook>-<what>.png`` in every folder given."""

    def __init__(self, notebook: str, folders: list[Path]):
        self.prefix = Path(notebook).stem
        self.folders = folders

    def save(self, page, what: str, cell=None, block: str = "start") -> None:
        """Scroll ``cell`` (a locator) into view first (to the top, or ``block``); keep the
        mouse off the figures."""
        if cell is not None:
            cell.evaluate(f"e => e.scrollIntoView({{block: '{block}'}})")
        page.mouse.move(5, 450)  # no hover label in the picture
        for folder in self.folders:
            folder.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(folder / f"{self.prefix}-{what}.png"))


def _cell(page, source_text: str):
    """The code cell whose source holds ``source_text``."""
    return page.locator(".jp-CodeCell", has_text=source_text).first


def _changes(page, locator, action: Callable[[], None]) -> str:
    """Run ``action`` (a click) and wait until ``locator``'s text changes; the new text."""
    before = locator.inner_text()
    action()
    page.wait_for_function(
        "([el, text]) => el.innerText !== text",
        arg=[locator.element_handle(), before],
        timeout=CLICK_TIMEOUT_MS,
    )
    return locator.inner_text()


# ---------------------------------------------------------------- each tutorial's check
def _check_parameters_form(page, shots: Screenshots) -> None:
    """01: the form shows every agent's fields; Save writes the YAML and says where."""
    form = _cell(page, "ParametersForm(params)")
    assert form.locator(".widget-tab").count() > 0  # one tab per agent
    status = form.locator(".jupyter-widgets.widget-html").last
    assert "saved to" in _changes(page, status, form.get_by_role("button", name="Save").click)
    shots.save(page, "parameters-form", form)
    # The dialogues' DataFrame reads decisions as words.
    frame = _cell(page, "df = batch.to_dataframe()")
    assert re.search(r"\b(accept|reject|no decision)\b", frame.locator("table").inner_text())
    shots.save(page, "dataframe", frame)


def _check_step_controller(page, shots: Screenshots) -> None:
    """03: the prompt inspector shows another agent's prompt when picked; the controller's
    Branch button adds a branch with its own controls."""
    inspector = _cell(page, "PromptInspector(dialogue")
    agent_picker = inspector.locator(".jp-OutputArea select").first
    prompt = inspector.locator(".jp-OutputArea .widget-html").first
    assert "prompt of verifier" in prompt.inner_text()
    assert "prompt of prover" in _changes(
        page, prompt, lambda: agent_picker.select_option("prover")
    )
    shots.save(page, "prompt-inspector", inspector)

    controller = _cell(page, "controller = DialogueController(")
    assert "over after" in controller.inner_text()
    assert controller.get_by_role("button", name="Next round").is_disabled()  # the branch is over
    branch_title = controller.get_by_text(re.compile(r"^branch 1 \(from round \d+\)$"))
    assert branch_title.count() == 0
    controller.get_by_role("button", name="Branch").first.click()
    branch_title.first.wait_for(timeout=CLICK_TIMEOUT_MS)
    branch_title.first.click()  # unfold it: the branch has buttons of its own
    branch_buttons = controller.get_by_role("button", name="Branch")
    page.wait_for_function(
        "el => el.querySelectorAll('button').length >= 8",  # 4 per controller
        arg=controller.element_handle(),
        timeout=CLICK_TIMEOUT_MS,
    )
    assert branch_buttons.count() == 2
    shots.save(page, "step-controller", controller)


def _drawn(elements, at_least: int) -> int:
    """How many of ``elements`` there are once ``at_least`` of them are drawn (plotly draws
    after the cell's output appears: a count taken at once may see none yet)."""
    elements.nth(at_least - 1).wait_for(state="attached", timeout=CLICK_TIMEOUT_MS)
    return elements.count()


def _check_job_launcher_and_dashboard(page, shots: Screenshots) -> None:
    """04: the launcher shows the job the trainer ran, and its switch button switches the
    group; the run dashboard shows the finished run with its plots."""
    launcher = _cell(page, "launcher = FineTuneLauncher(")
    status = launcher.locator(".jp-OutputArea .widget-hbox .widget-html").last
    assert "succeeded" in status.inner_text()
    switch = launcher.get_by_role("button", name="Switch to new model")
    assert "verifier now generates with" in _changes(page, status, switch.click)
    assert switch.is_disabled()
    shots.save(page, "job-launcher", status, block="center")

    dashboard = _cell(page, "RunMonitor(trainer)")
    dashboard.get_by_text("finished").first.wait_for(timeout=CLICK_TIMEOUT_MS)
    assert dashboard.get_by_role("button", name="Stop after stage").is_disabled()
    # Accuracy per split and reward per agent, drawn as lines with markers.
    assert _drawn(dashboard.locator("svg.main-svg .scatterlayer .trace"), 3) >= 3
    shots.save(page, "dashboard", dashboard)


def _check_malt_figures(page, shots: Screenshots) -> None:
    """05: the tree and icicle figures draw; the tree viewer shows the node picked in its list
    or clicked in its figure."""
    figure = _cell(page, "plot_tree(tree")
    figure.locator("svg.main-svg").first.wait_for()
    shots.save(page, "tree", figure)
    # The icicle summary drew its blocks (an empty plot would still have an svg).
    summary = _cell(page, "plot_trees_summary(trees")
    assert _drawn(summary.locator(".main-svg g.slice"), 2) > 1
    shots.save(page, "summary", summary)

    # The tree viewer talks to the kernel: another node in its picker, another panel.
    viewer = _cell(page, "TreeViewer(tree")
    node_picker = viewer.locator(".jp-OutputArea .jupyter-widgets select").nth(1)
    panel = viewer.locator(".jp-OutputArea .widget-html").last
    options = node_picker.locator("option").all_inner_texts()
    assert len(options) > 2, options
    text = _changes(page, panel, lambda: node_picker.select_option(options[1]))
    assert "The dialogue up to here" in text
    # Its figure drew the tree's nodes (one marker per node).
    assert _drawn(viewer.locator("svg.main-svg .scatterlayer .point"), len(options)) >= len(options)
    # A click on the root's marker reaches the kernel (plotly's click, relayed by a small
    # widget beside the figure): the panel shows the root.
    traces = viewer.locator("svg.main-svg .scatterlayer .trace")
    nodes = next(
        traces.nth(i)
        for i in range(traces.count())
        if traces.nth(i).locator(".point").count() == len(options)
    )
    root_marker = nodes.locator(".point").first
    root_marker.evaluate("e => e.scrollIntoView({block: 'center'})")  # a click needs it on screen
    box = root_marker.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2

    def click_the_root() -> None:
        page.mouse.move(x, y)
        page.mouse.click(x, y)

    root = options[0].replace("\xa0", " ").split(" · ")[0]  # the option text: id · speaker
    assert root in _changes(page, panel, click_the_root).splitlines()[0]
    shots.save(page, "viewer", viewer)


def _check_sweep_dashboard(page, shots: Screenshots) -> None:
    """08: the sweep's dashboard shows every cell finished and the comparison drawn; a click on
    a cell's name opens its own dashboard, which says what its dummy jobs did; the comparison
    figure below draws a line per protocol."""
    dashboard = _cell(page, "monitor = SweepMonitor(sweep)")
    dashboard.get_by_text("4/4 cells done").first.wait_for(timeout=CLICK_TIMEOUT_MS)
    table = dashboard.locator(".widget-html table").first
    assert table.inner_text().count("finished") == 4
    assert _drawn(dashboard.locator("svg.main-svg .scatterlayer .trace"), 2) >= 2
    dashboard.get_by_role("button", name="debate_seed1").click()
    opened = dashboard.get_by_text(re.compile(r"debate_seed1 · finished")).first
    opened.wait_for(timeout=CLICK_TIMEOUT_MS)
    dashboard.get_by_text("dummy backend: trains nothing").first.wait_for(timeout=CLICK_TIMEOUT_MS)
    shots.save(page, "sweep-monitor", dashboard)
    comparison = _cell(page, "figure, table = sweep.compare()")
    assert _drawn(comparison.locator("svg.main-svg .scatterlayer .trace"), 2) == 2
    shots.save(page, "comparison", comparison)


def _check_widgets_of_the_model_tutorials(page, shots: Screenshots) -> None:
    """tests/notebooks/widgets.ipynb: what tutorials 01, 03, 04 and 05 show, on the dummy API."""
    _check_parameters_form(page, shots)
    _check_step_controller(page, shots)
    _check_job_launcher_and_dashboard(page, shots)
    _check_malt_figures(page, shots)


@dataclass(frozen=True)
class Tutorial:
    """One notebook the browser runs, and what it checks once every cell has run."""

    path: Path
    check: Callable[..., None]
    #: How long Run All may take at CI size (generous: a loaded 2-core machine).
    run_timeout_s: float = 180

    @property
    def notebook(self) -> str:
        return self.path.name


#: The tutorials that run the real model (01, 03, 04, 05, 07) spend their time in it and in
#: LoRA jobs: nbval runs them (tests/test_notebooks.py), and their widgets are clicked here in
#: widgets.ipynb, on the dummy API, where the same widgets take seconds. Tutorial 08 runs on
#: the dummy API itself, so it runs here as it is.
TUTORIALS = (
    Tutorial(NOTEBOOKS / "08_compare_protocols.ipynb", _check_sweep_dashboard),
    Tutorial(ROOT / "tests" / "notebooks" / "widgets.ipynb", _check_widgets_of_the_model_tutorials),
)


@pytest.fixture(scope="module")
def browser_context() -> Iterator:
    """One Chromium, and one browser context for every tutorial's page: JupyterLab's scripts
    are fetched and compiled once, from the context's cache (a page in a context of its own,
    as ``Browser.new_page`` makes, loaded them anew for each tutorial)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium.new_context(viewport={"width": 1400, "height": 900})
        finally:
            chromium.close()


def _shut_down_kernels(url: str) -> None:
    """Stop every kernel of the server, so that the next tutorial has the CPU to itself."""
    with urllib.request.urlopen(f"{url}/api/kernels", timeout=10) as response:
        kernels = json.load(response)
    for kernel in kernels:
        request = urllib.request.Request(f"{url}/api/kernels/{kernel['id']}", method="DELETE")
        urllib.request.urlopen(request, timeout=30).close()


@pytest.mark.parametrize(
    "tutorial",
    [
        pytest.param(
            t,
            id=Path(t.notebook).stem,
            marks=pytest.mark.timeout(LAB_START_TIMEOUT_S + t.run_timeout_s + 180),
        )
        for t in TUTORIALS
    ],
)
def test_the_tutorial_runs_in_jupyterlab_and_its_widgets_answer_clicks(
    tutorial: Tutorial, jupyter_lab: str, browser_context, tmp_path: Path
):
    folders = [tmp_path / "screenshots"]
    if os.environ.get("NIP_SCREENSHOT_DIR"):
        folders.append(Path(os.environ["NIP_SCREENSHOT_DIR"]))
    page = browser_context.new_page()
    try:
        page.set_default_timeout(90_000)
        # A workspace of its own: no tab of an earlier tutorial is restored beside it.
        workspace = Path(tutorial.notebook).stem.replace("_", "-")
        page.goto(f"{jupyter_lab}/lab/workspaces/{workspace}/tree/{tutorial.notebook}")
        page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first.wait_for()
        page.locator(".jp-StatusBar-Widget", has_text="Idle").first.wait_for()
        if page.locator(".jp-FileBrowser").first.is_visible():
            page.keyboard.press("Control+b")  # hide the file browser: more room for the notebook

        page.locator(".lm-MenuBar-item", has_text="Run").first.click()
        page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
        _wait_for_all_cells(page, tutorial.run_timeout_s)

        assert page.get_by_text("Error displaying widget").count() == 0
        assert page.locator(".jupyter-widgets").count() > 0
        tutorial.check(page, Screenshots(tutorial.notebook, folders))
    finally:
        page.close()
        _shut_down_kernels(jupyter_lab)
