#!/usr/bin/env bash
# The real-GPU tune behind docs/real-gpu/tune/: llama.cpp's llama-server (the source llama-cpp-python
# 0.3.36 vendors, built with CUDA for sm_90) serving the random-weight Llama-3.1-8B in F16 of
# make_random_gguf.py, started misconfigured (--parallel 1 under 16 requests in flight), then
# `infergap tune --levers plan` on it within what is left of one 10-minute command, the plan of the
# server it leaves running (reading the tune's experiments), `infergap history --experiments`, and
# the dry run of `infergap fix` (nothing on the host is changed). The GGUF is written while the
# build runs.
#
#   SRC_TGZ=build/tune-gpu/llama-src.tar.gz WHL=build/tune-gpu/whl OUT=/tmp/infergap-tune bash benchmarks/real_gpu/run_tune.sh
#
# SRC_TGZ: a tarball of llama.cpp's source tree (its top folder llama.cpp/); WHL: wheels of the
# Python packages the machine's image lacks (pydantic, pydantic-core, annotated-types,
# typing-inspection, orjson, platformdirs, gguf). DEADLINE_S: seconds from the start by which
# everything must have ended (the tune's --budget is what is left of it).
set -u
T0=$(date +%s)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export OUT=${OUT:-/tmp/infergap-tune} WORK=${WORK:-/tmp/llama-run}
mkdir -p "$OUT" "$WORK"
log() { echo "[$(date +%T)] $*"; }
python3 -m pip install -q --no-index --no-deps --target "$WORK/site" "${WHL:-$ROOT/build/tune-gpu/whl}"/*.whl
export PYTHONPATH="$ROOT/src:$WORK/site"
[ -d "$WORK/llama.cpp" ] || tar xzf "${SRC_TGZ:-$ROOT/build/tune-gpu/llama-src.tar.gz}" -C "$WORK"
BIN=$WORK/llama.cpp/build/bin
if [ ! -x "$BIN/llama-server" ]; then
  log "build (log: $WORK/build.log)"
  (cd "$WORK/llama.cpp" && cmake -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release > "$WORK/build.log" 2>&1 && \
    cmake --build build -j"$(nproc)" --target llama-server >> "$WORK/build.log" 2>&1; echo $? > "$WORK/build.rc") &
  BUILD=$!
fi
MODEL=$WORK/llama-3.1-8b.gguf
[ -f "$MODEL" ] || python3 "$HERE/make_random_gguf.py" --model llama-3.1-8b --out "$MODEL"
[ -n "${BUILD:-}" ] && wait "$BUILD"
log "build rc $(cat "$WORK/build.rc" 2>/dev/null || echo prebuilt)"; tail -2 "$WORK/build.log" 2>/dev/null
[ -x "$BIN/llama-server" ] || { log "no llama-server"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv > "$OUT/nvidia-smi.csv"
URL=http://127.0.0.1:8080
DB=$OUT/ledger.sqlite3
LAUNCH="$BIN/llama-server -m $MODEL --host 127.0.0.1 --port 8080 -ngl 99 -c 16384 --parallel 1 --metrics"
# What is left of the deadline, less the plan and the final start afterwards, is the tune's budget.
LEFT=$(( ${DEADLINE_S:-560} - ($(date +%s) - T0) - 100 ))
log "tune, budget ${LEFT}s"
echo "$LAUNCH" > "$OUT/launch.txt"
python3 -m infergap tune --launch "$LAUNCH" --levers plan --budget "${LEFT}s" --rounds 2 --concurrency 16 \
  --num-prompts 32 --input-len 128 --output-len 64 --start-timeout 180 --log-dir "$WORK/tune-logs" --db "$DB" \
  --html "$OUT/tune.html" -o "$OUT/tune.txt" 2> "$OUT/tune.err"
echo "tune rc $?" >> "$OUT/tune.txt"
cat "$OUT/tune.txt"; tail -5 "$OUT/tune.err"
timeout 60 python3 -m infergap plan --url "$URL" --db "$DB" > "$OUT/plan.txt" 2> "$OUT/plan.err"
echo "plan rc $?" >> "$OUT/plan.txt"
grep -n -A12 "TRIED" "$OUT/plan.txt" | head -30
python3 -m infergap history --experiments --db "$DB" > "$OUT/history.txt" 2>&1
timeout 45 python3 -m infergap fix --dry-run > "$OUT/fix-dry-run.txt" 2>&1
tail -3 "$OUT/fix-dry-run.txt"
PID=$(sed -n 's/^left running: pid \([0-9]*\) .*/\1/p' "$OUT/tune.txt")
[ -n "$PID" ] && kill "$PID"  # the server the tune left running (its own session: it would outlive the command)
log "done in $(( $(date +%s) - T0 ))s"
