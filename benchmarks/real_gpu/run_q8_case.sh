#!/usr/bin/env bash
# The healthy Q8_0 case behind tests/fixtures/real-gpu/h200-llama-process/q8: llama.cpp's
# llama-server (the source llama-cpp-python 0.3.36 vendors, built with CUDA for sm_90 outside the
# repository) serving the random-weight Llama-3.1-8B written as Q8_0 by make_random_gguf.py
# (--type q8_0: every 2-D tensor quantized with gguf-py's reference Q8_0 quantizer), the same
# server flags as the healthy F16 run of tests/fixtures/real-gpu/h200-llama-server, then
# `infergap doctor --quick` against it and llama-bench tg128. Fits one command of the lent machine:
# the GGUF is written while the build runs.
#
#   SRC=build/llama-src WHL=build/whl OUT=/tmp/infergap-q8 bash benchmarks/real_gpu/run_q8_case.sh
#
# WHL: wheels of the Python packages the machine's image lacks (pydantic, orjson, platformdirs, gguf).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export OUT=${OUT:-/tmp/infergap-q8} WORK=${WORK:-/tmp/llama-run}
mkdir -p "$OUT" "$WORK"
log() { echo "[$(date +%T)] $*"; }
python3 -m pip install -q --no-index --no-deps --target "$WORK/site" "${WHL:-$ROOT/build/whl}"/*.whl
export PYTHONPATH="$ROOT/src:$WORK/site"
[ -d "$WORK/llama.cpp" ] || cp -r "${SRC:-$ROOT/build/llama-src}" "$WORK/llama.cpp"
log "build (log: $WORK/build.log)"
(cd "$WORK/llama.cpp" && cmake -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release > "$WORK/build.log" 2>&1 && \
  cmake --build build -j"$(nproc)" --target llama-server llama-bench >> "$WORK/build.log" 2>&1; echo $? > "$WORK/build.rc") &
BUILD=$!
MODEL=$WORK/llama-3.1-8b.gguf  # not written: the q8 case serves ${MODEL%.gguf}-q8_0.gguf
Q8=${MODEL%.gguf}-q8_0.gguf
[ -f "$Q8" ] || python3 "$HERE/make_random_gguf.py" --type q8_0 --model llama-3.1-8b --out "$Q8"
python3 "$HERE/gguf_header.py" "$Q8" > "$OUT/gguf-header-q8_0.json" 2> "$OUT/gguf-header.err"
wait $BUILD
log "build rc $(cat "$WORK/build.rc")"; tail -2 "$WORK/build.log"
[ -d "$WORK/snapshot" ] || tar xzf "$ROOT/tests/fixtures/real-gpu/h200-llama-server/snapshot.tar.gz" -C "$WORK"
MODEL=$MODEL BIN=$WORK/llama.cpp/build/bin PHASE=cases CASES="q8 bench-q8" bash "$HERE/run_llama_server.sh"
log "done"
