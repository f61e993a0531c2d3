"""An interpreter that "has vLLM" for tests of code that looks for vLLM or starts it."""

from __future__ import annotations

import sys
from pathlib import Path


def fake_vllm_python(folder: Path, api_server: str | None = None) -> str:
    """A shell script running this interpreter with a package named ``vllm`` on its path.

    Args:
        folder: Where the script and the package go.
        api_server: The source of ``vllm.entrypoints.openai.api_server`` (what
            ``python -m vllm.entrypoints.openai.api_server`` runs); None: the package is empty.

    Returns:
        The script's path, usable wherever an interpreter with vLLM is asked for.
    """
    package = folder / "site" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    if api_server is not None:
        server = package / "entrypoints" / "openai"
        server.mkdir(parents=True)
        (package / "entrypoints" / "__init__.py").write_text("")
        (server / "__init__.py").write_text("")
        (server / "api_server.py").write_text(api_server)
    script = folder / "python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={folder / "site"} exec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return str(script)
