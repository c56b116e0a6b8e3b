#!/usr/bin/env bash
# The real-GPU run behind docs/real-gpu/llama-server/: build llama.cpp's llama-server with CUDA,
# serve a random-weight Llama-3.1-8B GGUF (F16) on one GPU, and run `infergap doctor` against a
# healthy server and against misconfigured ones; every stage's JSON, the server logs and the
# endpoints' raw answers are kept.
#
#   SRC=path/to/llama.cpp PHASE=build   bash benchmarks/real_gpu/run_llama_server.sh
#   PHASE=cases CASES="healthy-quick p1-quick ngl16-quick kv-cut kv-refuse" bash benchmarks/real_gpu/run_llama_server.sh
#
# (BIN=dir of prebuilt binaries and GGUFPY=llama.cpp's gguf-py skip the build: PHASE=prep.)
# build: configure and build llama-server and llama-bench (in a new session, so it outlives the
# calling shell; ~4.5 min on 16 cores), write the GGUF, and store a snapshot of the host with the
# active measurements (`infergap collect --active`). cases: one server per case, each followed by
# the doctor. Needs this repository's src on PYTHONPATH and llama.cpp's gguf-py. Writes to $OUT.
set -u
OUT=${OUT:-/tmp/infergap-llama}
WORK=${WORK:-/tmp/llama-run}
SRC=${SRC:-$WORK/llama.cpp}
MODEL=${MODEL:-$WORK/llama-3.1-8b.gguf}
PORT=${PORT:-8080}
URL=http://127.0.0.1:$PORT
BIN=${BIN:-$SRC/build/bin}
GGUFPY=${GGUFPY:-$SRC/gguf-py}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT" "$WORK"
log() { echo "[$(date +%T)] $*"; }

build() {
  if [ ! -x "$BIN/llama-server" ]; then
    log "building llama-server, llama-bench (log: $WORK/build.log)"
    (cd "$SRC" && setsid bash -c "cmake -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release > $WORK/build.log 2>&1 && \
      cmake --build build -j$(nproc) --target llama-server llama-bench llama-quantize >> $WORK/build.log 2>&1; echo \$? > $WORK/build.rc" \
      < /dev/null > /dev/null 2>&1 &)
  fi
  [ -f "$MODEL" ] || PYTHONPATH="$GGUFPY:${PYTHONPATH:-}" python3 "$HERE/make_random_gguf.py" --model llama-3.1-8b --out "$MODEL"
  PYTHONPATH="$GGUFPY:${PYTHONPATH:-}" python3 "$HERE/gguf_header.py" "$MODEL" > "$OUT/gguf-header.json" 2> "$OUT/gguf-header.err"
  [ -d "$WORK/snapshot" ] || timeout 300 python3 -m infergap collect --active -o "$WORK/snapshot" | tail -1
  tar czf "$OUT/snapshot.tar.gz" -C "$WORK" snapshot
  for _ in $(seq 1 "${BUILD_WAIT_S:-400}"); do [ -f "$WORK/build.rc" ] || [ -x "$BIN/llama-server" ] && break; sleep 1; done
  log "build: rc $(cat "$WORK/build.rc" 2>/dev/null || echo running)"; tail -3 "$WORK/build.log"
}

serve() {  # serve TAG FLAGS...: start llama-server in the background, wait until /health is ok
  local tag=$1; shift
  [ -f "$WORK/server.pid" ] && kill "$(cat "$WORK/server.pid")" 2>/dev/null && sleep 2  # one left by an interrupted run
  # SERVER_ENV: variables for the server alone (CUDA_VISIBLE_DEVICES= hides the GPU from it, not from the doctor)
  env ${SERVER_ENV:-} "$BIN/llama-server" -m "${SERVE_MODEL:-$MODEL}" --host 127.0.0.1 --port "$PORT" "$@" > "$OUT/$tag/server.log" 2>&1 &
  SERVER=$!
  echo $SERVER > "$WORK/server.pid"
  for _ in $(seq 1 240); do
    curl -sf "$URL/health" > /dev/null && { log "server $tag up"; return 0; }
    kill -0 $SERVER 2>/dev/null || { log "server $tag exited"; tail -20 "$OUT/$tag/server.log"; return 1; }
    sleep 0.5
  done
  log "server $tag did not come up"; return 1
}
stop() { kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; sleep 1; }

raw() {  # raw TAG: the endpoints' own answers, for the introspection tests
  for ep in props slots metrics v1/models; do
    curl -s -w '\n%{http_code}\n' "$URL/$ep" > "$OUT/$1/raw-$(echo $ep | tr / -).txt"
  done
}

case_run() {  # case_run TAG "SERVER FLAGS" DOCTOR-ARGS...
  local tag=$1 flags=$2; shift 2
  mkdir -p "$OUT/$tag"
  echo "llama-server $flags" > "$OUT/$tag/cmdline.txt"
  # shellcheck disable=SC2086
  serve "$tag" $flags || return 1
  raw "$tag"
  nvidia-smi --query-gpu=memory.used,memory.total,power.draw,clocks.sm,clocks.max.sm --format=csv > "$OUT/$tag/nvidia-smi.csv"
  timeout 240 python3 -m infergap doctor --url "$URL" --snapshot "$WORK/snapshot" --evidence "$OUT/$tag/server.log" \
    --output-dir "$OUT/$tag" "$@" > "$OUT/$tag/doctor.txt" 2> "$OUT/$tag/doctor.err"
  echo "doctor rc $?" >> "$OUT/$tag/doctor.txt"
  raw "$tag"
  cat "$OUT/$tag/doctor.txt"
  stop
}

SWEEP=(--input-len 128 --output-len 64)
case "${PHASE:-cases}" in
  build) build ;;
  prep) mkdir -p "$WORK"; [ -f "$MODEL" ] || PYTHONPATH="$GGUFPY:${PYTHONPATH:-}" python3 "$HERE/make_random_gguf.py" --model llama-3.1-8b --out "$MODEL" ;;
  cases)
    for c in ${CASES:-healthy p1 ngl16 kv-fits}; do
      log "case $c"
      case $c in
        healthy) case_run healthy "-ngl 99 -c 32768 --parallel 16 -fa on --metrics" --concurrency 1,4,16,32,64 "${SWEEP[@]}" ;;
        p1)      case_run p1 "-ngl 99 -c 4096 --parallel 1 -fa on --metrics" --concurrency 1,4,16 "${SWEEP[@]}" ;;
        ngl16)   case_run ngl16 "-ngl 16 -c 32768 --parallel 16 -fa on --metrics" --concurrency 1,4 --num-prompts 4 "${SWEEP[@]}" ;;
        kv-fits) case_run kv-fits "-ngl 99 -c 2048 --parallel 16 -fa on --metrics" --concurrency 1,4,16,32 "${SWEEP[@]}" ;;
        # 16 slots of 256 tokens (llama.cpp rounds -c 2048 up to its 256-token minimum per slot):
        # prompts that fit but leave no room for the output, then prompts that do not fit at all
        kv-cut)  case_run kv-cut "-ngl 99 -c 2048 --parallel 16 -fa on --metrics" --quick --concurrency 1,4,16 --input-len 200 --output-len 64 ;;
        kv-refuse) case_run kv-refuse "-ngl 99 -c 2048 --parallel 16 -fa on --metrics" --quick --concurrency 1,4,16 --input-len 256 --output-len 64 ;;
        healthy-quick) case_run healthy-quick "-ngl 99 -c 32768 --parallel 16 -fa on --metrics" --quick --concurrency 1,16,32 "${SWEEP[@]}" ;;
        p1-quick) case_run p1-quick "-ngl 99 -c 4096 --parallel 1 -fa on --metrics" --quick --concurrency 1,4,16 "${SWEEP[@]}" ;;
        ngl16-quick) case_run ngl16-quick "-ngl 16 -c 32768 --parallel 16 -fa on --metrics" --quick --concurrency 1,4 --num-prompts 4 "${SWEEP[@]}" ;;
        nometrics) mkdir -p "$OUT/nometrics"; serve nometrics -ngl 99 -c 32768 --parallel 16 -fa on && raw nometrics && \
                   python3 -c "from infergap.server import introspect; print(introspect('$URL').model_dump_json(indent=2))" > "$OUT/nometrics/server.json"; stop ;;
        # misconfigurations the serving process and the sweep's shape must name (the doctor with process reading)
        nkvo)    case_run nkvo "-ngl 99 -c 32768 --parallel 16 -fa on --metrics --no-kv-offload" --quick --concurrency 1,4,16 --num-prompts 16 --input-len 128 --output-len 32 ;;
        nocb)    case_run nocb "-ngl 99 -c 32768 --parallel 16 -fa on --metrics --no-cont-batching" --quick --concurrency 1,4,16 --num-prompts 64 "${SWEEP[@]}" ;;
        ub32)    case_run ub32 "-ngl 99 -c 65536 --parallel 16 -fa on --metrics -b 32 -ub 32" --quick --concurrency 1,4 --num-prompts 8 --input-len 2048 --output-len 16 ;;
        ub-default) case_run ub-default "-ngl 99 -c 65536 --parallel 16 -fa on --metrics" --quick --concurrency 1,4 --num-prompts 8 --input-len 2048 --output-len 16 ;;
        novis)   SERVER_ENV="CUDA_VISIBLE_DEVICES=" case_run novis "-ngl 99 -c 4096 --parallel 4 --metrics" --quick --concurrency 1,2 --num-prompts 2 --input-len 128 --output-len 16 ;;
        q8)      SERVE_MODEL="${MODEL%.gguf}-q8_0.gguf" case_run q8 "-ngl 99 -c 32768 --parallel 16 -fa on --metrics" --quick --concurrency 1,4,16 --num-prompts 32 "${SWEEP[@]}" ;;
        quant)   [ -f "${MODEL%.gguf}-q8_0.gguf" ] || "$BIN/llama-quantize" "$MODEL" "${MODEL%.gguf}-q8_0.gguf" Q8_0 > "$WORK/quant.log" 2>&1; tail -2 "$WORK/quant.log" ;;
        bench-q8) for m in "$MODEL" "${MODEL%.gguf}-q8_0.gguf"; do "$BIN/llama-bench" -m "$m" -p 0 -n 128 -ngl 99 -fa 1 -o json; done > "$OUT/llama-bench-f16-q8.json" 2> "$OUT/llama-bench-f16-q8.err" ;;
        bench-ub) for ub in 32 512; do "$BIN/llama-bench" -m "$MODEL" -p 2048 -n 0 -b "$ub" -ub "$ub" -ngl 99 -fa 1 -o json; done > "$OUT/llama-bench-ub.json" 2> "$OUT/llama-bench-ub.err" ;;
        bench)   "$BIN/llama-bench" -m "$MODEL" -p 0 -n 128 -ngl 99 -fa 1 -o json > "$OUT/llama-bench.json" 2> "$OUT/llama-bench.err"; tail -c 600 "$OUT/llama-bench.json" ;;
      esac
    done ;;
esac
log "done"
