"""Loading a local model shows none of transformers' own progress bars, notices or warnings
(in a notebook they would land in the tutorial's output), and leaves its settings as found."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("torch")

from transformers.utils import logging as hf_logging

from nip.backends.local._quiet import quiet_libraries
from nip.testing.tiny_model import build_tiny_chat_model


def test_while_loading_bars_notices_and_warnings_are_off_and_are_restored_after():
    hf_logging.enable_progress_bar()
    hf_logging.set_verbosity_warning()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_libraries():
            assert not hf_logging.is_progress_bar_enabled()
            assert hf_logging.get_verbosity() == hf_logging.ERROR
            warnings.warn("a conversion notice", UserWarning, stacklevel=1)
        assert caught == []
    assert hf_logging.is_progress_bar_enabled()
    assert hf_logging.get_verbosity() == hf_logging.WARNING


@pytest.mark.timeout(180)
def test_loading_the_model_writes_nothing_to_the_output(tmp_path: Path):
    """In a fresh process with progress bars on (no TQDM_DISABLE), as in a notebook."""
    folder = build_tiny_chat_model(tmp_path / "tiny-chat", seed=0)
    code = (
        "from nip.backends.local._engine import Engine; "
        f"Engine({str(folder)!r}, device='cpu'); print('loaded')"
    )
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=150
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "loaded\n", "")
