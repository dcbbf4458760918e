#!/usr/bin/env bash
# The README's headline figures, each written to bench/results/ with its provenance, then
# BENCHMARKS.md regenerated. Needs the test models (./scripts/test.sh pulls them) and the texts:
#   python bench/fetch_text.py emma persuasion northangerabbey
# Run from the repository root: bench/headline.sh   (about 45 minutes on 2 CPU cores)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
GEMMA=.cascade-test/models/gemma-3-270m-q4_k_m.gguf
$PY bench/restore_speed.py --text bench/data/emma.txt
$PY bench/restore_speed.py --text bench/data/emma.txt --model "$GEMMA"
$PY bench/codec_quality.py --text bench/data/emma.txt --chunks 12
$PY bench/ttft.py --book persuasion --make 32000 --window 4096 --questions 8 --rerank off
$PY bench/ttft.py --book persuasion --doc base-persuasion-32000 --window 2048 --questions 8 --rerank off
$PY bench/niah.py --text bench/data/northangerabbey.txt --topic Bath --depths 10 --lengths 25 --tasks single
$PY bench/chat_resume.py --runs 3
$PY bench/serve.py reuse
$PY bench/ingest_speed.py --text bench/data/emma.txt --tokens 8192 --memory-tokens 20000 60000
$PY -m bench.report
