"""Loading a local model shows none of transformers' own progress bars, notices or warnings
(in a notebook they would land in the tutorial's output), and leaves its settings as found."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from importlib.util import find_spec

import pytest

from nip.backends.local._quiet import quiet_libraries
from tests.doubles.tiny_model import build_tiny_chat_model

# torch is imported by the tests, not at collection (2-3 s in every pytest-xdist worker).
pytestmark = pytest.mark.skipif(find_spec("torch") is None, reason="torch is not installed")


def test_while_loading_bars_notices_and_warnings_are_off_and_are_restored_after():
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    hf_logging.set_verbosity_warning()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_libraries():
            assert not hf_logging.is_progress_bar_enabled()
            assert hf_logging.get_verbosity() == hf_logging.ERROR
            warnings.warn("a conversion notice", UserWarning, stacklevel=1)
        # Only this thread's warning counts: a server thread of an earlier test in this worker
        # may warn meanwhile, and catch_warnings records every thread's.
        assert [w for w in caught if str(w.message) == "a conversion notice"] == []
    assert hf_logging.is_progress_bar_enabled()
    assert hf_logging.get_verbosity() == hf_logging.WARNING


#: What each scenario of the fresh process runs; each must write nothing but its last line.
SCENARIOS = {
    # Loading first, in a process that has imported nothing yet (as a notebook's first cell).
    "load": """
from nip.backends.local._engine import Engine
Engine(FOLDER, device="cpu")
print("loaded")
""",
    # transformers 5 warns on a deprecated cache argument at every generate (also through PEFT).
    "generate": """
import asyncio
from nip.backends import GenerationRequest
from nip.backends.local import LocalBackend

async def main():
    for cache_mb in (0, 16):
        backend = LocalBackend(FOLDER, device="cpu", prefix_cache_mb=cache_mb)
        backend.register_adapter("tuned", ADAPTER)
        hi = ({"role": "user", "content": "Hi"},)
        for name in (FOLDER, "tuned", "tuned"):
            await backend.generate(GenerationRequest(name, hi, max_tokens=3))
        await backend.aclose()
    print("generated")

asyncio.run(main())
""",
    # transformers >= 5.17 warns at a BPE tokenizer's first decode when its configuration asks
    # for WordPiece's space clean-up (it ignores it).
    "clean_up": """
import asyncio
from nip.backends import GenerationRequest
from nip.backends.local import LocalBackend

async def main():
    backend = LocalBackend(CLEAN_UP_FOLDER, device="cpu")
    hi = ({"role": "user", "content": "Hi, how are you?"},)
    await backend.generate(GenerationRequest(CLEAN_UP_FOLDER, hi, max_tokens=6))
    await backend.aclose()
    print("generated")

asyncio.run(main())
""",
}
#: Runs the scenarios in order, each between markers on both streams; an exception is printed
#: in its own scenario's section and the next scenario still runs.
RUNNER = """
import sys, traceback
for name, code in SCENARIOS.items():
    for stream in (sys.stdout, sys.stderr):
        print(f"=== {name}", file=stream, flush=True)
    try:
        exec(code, {**PATHS, "__name__": f"scenario_{name}"})
    except BaseException:
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
"""


def _sections(text: str) -> dict[str, str]:
    """``{scenario: what it wrote}`` from a stream split by the runner's markers."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines(keepends=True):
        if line.startswith("=== ") and line[4:].strip() in SCENARIOS:
            current = line[4:].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
        else:
            sections.setdefault("before", []).append(line)
    return {name: "".join(lines) for name, lines in sections.items()}


@pytest.fixture(scope="module")
def fresh_process(tmp_path_factory) -> tuple[int, dict[str, str], dict[str, str]]:
    """One fresh process with progress bars on (no TQDM_DISABLE), as in a notebook, runs every
    scenario in :data:`SCENARIOS`: its exit status and each scenario's stdout and stderr.

    One process, not one per scenario, because each start imports torch and transformers
    (about 5 s of CPU). A scenario's output cannot hide behind an earlier one's: a warning
    shown once per process would have shown, and failed, in the earlier scenario.
    """
    import json

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("quiet")
    folder = build_tiny_chat_model(root / "tiny-chat", seed=0)
    model = AutoModelForCausalLM.from_pretrained(folder)
    adapter = get_peft_model(model, LoraConfig(r=2, target_modules="all-linear"))
    adapter.save_pretrained(root / "adapter")
    clean_up = build_tiny_chat_model(root / "tiny-chat-clean-up", seed=0)
    config_path = clean_up / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "clean_up_tokenization_spaces": True}))
    paths = {
        "FOLDER": str(folder),
        "ADAPTER": str(root / "adapter"),
        "CLEAN_UP_FOLDER": str(clean_up),
    }
    code = f"SCENARIOS = {SCENARIOS!r}\nPATHS = {paths!r}\n{RUNNER}"
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    return done.returncode, _sections(done.stdout), _sections(done.stderr)


@pytest.mark.timeout(360)
def test_loading_the_model_writes_nothing_to_the_output(fresh_process):
    """In a fresh process with progress bars on (no TQDM_DISABLE), as in a notebook."""
    returncode, stdout, stderr = fresh_process
    assert (returncode, stdout["load"], stderr["load"]) == (0, "loaded\n", "")
    assert "before" not in stdout and "before" not in stderr


@pytest.mark.timeout(360)
def test_generating_base_and_adapter_writes_nothing_to_the_output(fresh_process):
    """transformers 5 warns on a deprecated cache argument at every generate (also through
    PEFT): the engine passes none it does not need, under the name the model takes."""
    returncode, stdout, stderr = fresh_process
    assert (returncode, stdout["generate"], stderr["generate"]) == (0, "generated\n", "")


@pytest.mark.timeout(360)
def test_a_tokenizer_that_asks_for_space_clean_up_writes_nothing_to_the_output(fresh_process):
    """transformers >= 5.17 warns at a BPE tokenizer's first decode when its configuration
    asks for WordPiece's space clean-up (it ignores it); nip decodes without it."""
    returncode, stdout, stderr = fresh_process
    assert (returncode, stdout["clean_up"], stderr["clean_up"]) == (0, "generated\n", "")
