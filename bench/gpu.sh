#!/usr/bin/env bash
# The headline figures on a GPU, both registered generators, all layers offloaded.
#
#   bench/gpu.sh            (from the repository root, on a machine with CUDA and nvcc)
#
# Builds llama-cpp-python 0.3.36 with CUDA into .venv-gpu (CUDA_ARCH picks the architectures,
# default "native"), pulls SmolLM2-135M and Gemma 3 270M, then for each model runs: restore of a
# 4k window from disk and RAM vs its re-prefill (bench/restore_speed.py), ask TTFT vs a prefill of
# the same layout (bench/niah.py builds the base document, bench/ttft.py asks), chat resume
# (bench/chat_resume.py) and serve reuse before/after a restart (bench/serve.py reuse).
# Each benchmark writes its result file with provenance (bench/provenance.py; on a GPU the name
# ends in -gpu), then the report is rendered; the console output also goes to
# bench/results/gpu-<UTC time>.txt (RESULTS overrides), a log. Sized to finish in
# under 10 minutes on one data-centre GPU after the build (2-8 minutes with 16 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=${RESULTS:-bench/results/gpu-$stamp.txt}
mkdir -p "$(dirname "$RESULTS")" bench/data
PY=.venv-gpu/bin/python
if ! [ -x "$PY" ] || ! "$PY" -c 'import llama_cpp, sys; sys.exit(not llama_cpp.llama_supports_gpu_offload())' 2>/dev/null; then
  python3 -m venv .venv-gpu
  "$PY" -m pip install -q --upgrade pip
  CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-native} -DLLAVA_BUILD=OFF" \
    "$PY" -m pip install -q --no-cache-dir -e '.[dev]'
fi
"$PY" -c 'import llama_cpp, sys; sys.exit(not llama_cpp.llama_supports_gpu_offload())' \
  || { echo "llama-cpp-python was built without GPU offload" >&2; exit 1; }
export CASCADE_TEST_HOME=${CASCADE_TEST_HOME:-$PWD/.cascade-test}
CASCADE_HOME=$CASCADE_TEST_HOME .venv-gpu/bin/cascade models pull
CASCADE_HOME=$CASCADE_TEST_HOME .venv-gpu/bin/cascade models pull gemma3-270m
[ -f bench/data/persuasion.txt ] || "$PY" bench/fetch_text.py persuasion emma \
  || cp cascade_cli/samples/persuasion.txt bench/data/persuasion.txt
TEXT=bench/data/persuasion.txt
export CASCADE_THREADS=${CASCADE_THREADS:-4} CASCADE_GPU_LAYERS=-1

run() {  # run TITLE CMD...: the command's output under a heading, timed
  local t0=$SECONDS
  { echo; echo "## $1"; echo "\$ ${*:2}"; } | tee -a "$RESULTS"
  "${@:2}" 2>&1 | grep -v '^llama\|^load\|^print_info\|^ggml' | tee -a "$RESULTS"
  echo "($((SECONDS - t0)) s)" | tee -a "$RESULTS"
}

{
  echo "# cascade on a GPU — $stamp"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  git log -1 --format='commit %H %s'
} | tee "$RESULTS"
for model in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf; do
  path=$CASCADE_TEST_HOME/models/$model
  run "$model: restore a 4k window vs re-prefill (disk q4, RAM)" \
    "$PY" bench/restore_speed.py --model "$path" --text "$TEXT" --repeats 3
  run "$model: base document for ask TTFT (8 windows of 4096)" \
    "$PY" bench/niah.py --model "$path" --text "$TEXT" --topic Bath --window 4096 \
    --lengths 8 --depths 2 --tasks single
  doc=base-$([ "$model" = SmolLM2-135M-Instruct.Q4_1.gguf ] || echo "${model%.gguf}-")persuasion-32768
  run "$model: ask TTFT vs prefill of the same layout (window 4096)" \
    "$PY" bench/ttft.py --model "$path" --doc "$doc" --questions 4 --window 4096
  run "$model: chat resume vs re-prefill" \
    env BENCH_MODEL="$path" "$PY" bench/chat_resume.py --runs 2
  run "$model: serve reuse before and after a restart" \
    env BENCH_MODEL="$path" "$PY" bench/serve.py reuse
done
"$PY" -m bench.report
echo "log: $RESULTS"
