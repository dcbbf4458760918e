#!/usr/bin/env bash
# Install cascade and its dev tools into .venv, pull the default model, then lint, type-check, test.
set -euo pipefail
cd "$(dirname "$0")/.."
# Portable CPU build of llama.cpp (the native build crashes in ggml's AMX kernels on some Xeons).
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF}"
# Headless Chromium for the browser test (tests/server/test_browser.py), where missing.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"
  else SUDO="none"; fi
  if [ "$SUDO" = none ] || ! $SUDO apt-get install -y -q chromium >/dev/null; then
    echo "chromium not installed: the browser test will be skipped" >&2
  fi
fi
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
CASCADE_HOME="${CASCADE_TEST_HOME:-.cascade-test}" .venv/bin/cascade models pull
# the second architecture the suite runs (sliding-window attention): Gemma 3 270M
CASCADE_HOME="${CASCADE_TEST_HOME:-.cascade-test}" .venv/bin/cascade models pull gemma3-270m
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/pytest "$@"
