#!/usr/bin/env bash
# Install cascade and its dev tools into .venv, pull the default model, then lint, type-check, test.
set -euo pipefail
cd "$(dirname "$0")/.."
# Portable CPU build of llama.cpp (the native build crashes in ggml's AMX kernels on some Xeons).
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF}"
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
# redis-server for the remote tier's tests (they start their own on a free loopback port)
if ! command -v redis-server >/dev/null; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update && $SUDO apt-get install -y redis-server
fi
CASCADE_HOME="${CASCADE_TEST_HOME:-.cascade-test}" .venv/bin/cascade models pull
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/pytest "$@"
