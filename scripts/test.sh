#!/usr/bin/env bash
# Install cascade and its dev tools into .venv, pull the test models, then lint, type-check, test.
#   ./scripts/test.sh [PYTEST ARGS]          the whole suite (arguments go to pytest)
#   ./scripts/test.sh --quick [PYTEST ARGS]  the same steps, then only the tests that start no
#                                            process, redis-server or browser and are not slow
#                                            (pyproject.toml's markers), and not the in-process
#                                            ingest/ask/chat suites: under 5 minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK="not slow and not browser and not redis and not subprocess"
# whole ingests, asks and conversations on the real model, in process (another 5½ minutes on
# 2 cores): the full run has them; the engine, kv, store and recall tests still load the
# default model in the quick one
QUICK_SKIP=(--ignore=tests/session --ignore=tests/prompts)
for t in damage ingest_ask locations recovery rerank resource_bounds swa; do
  QUICK_SKIP+=(--ignore="tests/documents/test_$t.py")
done
quick=""
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi
# Portable CPU build of llama.cpp (the native build crashes in ggml's AMX kernels on some Xeons).
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF}"
# System packages the tests drive for real, installed where missing (Debian's packages):
# headless Chromium (tests/server/test_browser.py) and redis-server (tests/remote: each test
# starts its own on a free loopback port).
need=""
command -v chromium >/dev/null 2>&1 || need="$need chromium"
command -v redis-server >/dev/null 2>&1 || need="$need redis-server"
if [ -n "$need" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q $need >/dev/null \
    || echo "could not install$need: the tests that need it are skipped" >&2
fi
# Document tools for tests/documents and tests/cli/test_documents_cli.py, which make their PDFs
# and EPUBs with pandoc and groff (gropdf), encrypt with qpdf and check pages with poppler's
# pdftotext; installed without recommends (groff's would bring Ghostscript and ImageMagick).
docs=""
command -v pandoc >/dev/null 2>&1 || docs="$docs pandoc"
command -v gropdf >/dev/null 2>&1 || docs="$docs groff"
command -v qpdf >/dev/null 2>&1 || docs="$docs qpdf"
command -v pdftotext >/dev/null 2>&1 || docs="$docs poppler-utils"
if [ -n "$docs" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  $SUDO apt-get update -q >/dev/null \
    && $SUDO apt-get install -y -q --no-install-recommends $docs >/dev/null \
    || echo "could not install$docs: the tests that need them are skipped" >&2
fi
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
# the default model (Qwen2.5-Coder 0.5B: tests/test_qwen.py) and the embedding model recall uses
CASCADE_HOME="${CASCADE_TEST_HOME:-.cascade-test}" .venv/bin/cascade models pull
# the suite's own model where the default is not under test (tests/suite_model.py): SmolLM2-135M
CASCADE_HOME="${CASCADE_TEST_HOME:-.cascade-test}" .venv/bin/cascade models pull smollm2-135m
# the second architecture the suite runs (sliding-window attention): Gemma 3 270M
CASCADE_HOME="${CASCADE_TEST_HOME:-.cascade-test}" .venv/bin/cascade models pull gemma3-270m
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
if [ -n "$quick" ]; then
  .venv/bin/pytest -m "$QUICK" "${QUICK_SKIP[@]}" "$@"
else
  .venv/bin/pytest "$@"
fi
