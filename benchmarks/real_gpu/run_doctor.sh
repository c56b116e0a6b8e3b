#!/usr/bin/env bash
# The real-GPU run behind docs/real-gpu/: serve a random-weight Llama-3.1-8B (bf16, the roofline's
# own config) with `transformers serve` on one GPU, run `infergap doctor` against it, then re-run
# the sweep with the server's continuous batching on and compare with the doctor's sweep.
# Needs: torch with CUDA, transformers[serving], this repository on PYTHONPATH. Writes to $OUT.
set -u
OUT=${OUT:-/tmp/infergap-real-gpu}
MODEL=${MODEL:-/tmp/infergap-random-llama}
PORT=${PORT:-8000}
URL=http://127.0.0.1:$PORT
mkdir -p "$OUT"
# transformers serve lists models by scanning the Hugging Face cache, which must exist; nothing is
# downloaded (HF_HUB_OFFLINE).
export HF_HUB_OFFLINE=1
mkdir -p "${HF_HUB_CACHE:-$HOME/.cache/huggingface/hub}"
log() { echo "[$(date +%T)] $*"; }

log "writing the random model"
python3 benchmarks/real_gpu/make_random_model.py --model llama-3.1-8b --out "$MODEL" ${MAKE_ARGS:-} || exit 1
transformers serve --help > "$OUT/serve-help.txt" 2>&1

serve() {  # serve TAG [extra flags]: start transformers serve in the background, wait for /v1/models
  local tag=$1; shift
  transformers serve "$MODEL" --host 127.0.0.1 --port "$PORT" "$@" > "$OUT/serve-$tag.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 1 180); do
    curl -sf "$URL/v1/models" > "$OUT/models-$tag.json" && { log "server $tag up: $(head -c 300 "$OUT/models-$tag.json")"; return 0; }
    kill -0 $SERVER 2>/dev/null || { log "server $tag exited"; tail -20 "$OUT/serve-$tag.log"; return 1; }
    sleep 1
  done
  log "server $tag did not come up"; return 1
}
stop() { kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; sleep 2; }

SWEEP=(--model "$MODEL" --concurrency 1,4,16 --trials 2 --warmup 2 --input-len 64 --output-len 32 --num-prompts 16 --format json)

serve default || exit 1
log "doctor"
curl -s "$URL/openapi.json" > "$OUT/openapi.json"
timeout 300 python3 -m infergap doctor --url "$URL" --model llama-3.1-8b --served-model "$MODEL" --quick --output-dir "$OUT/doctor" | tee "$OUT/doctor.txt"
log "bench, default server"
timeout 240 python3 -m infergap bench --url "$URL" "${SWEEP[@]}" --output "$OUT/bench-default.json" | tail -3
stop

if grep -q -- "--continuous-batching" "$OUT/serve-help.txt"; then
  serve cb --continuous-batching || exit 0
  log "bench, continuous batching on, against the default server's sweep"
  timeout 240 python3 -m infergap bench --url "$URL" "${SWEEP[@]}" --output "$OUT/bench-cb.json" --baseline "$OUT/bench-default.json" | tail -3
  python3 -c "
import json
from infergap.bench import compare_bench, load_result
from infergap.render.bench import comparison_text
print(comparison_text(compare_bench(load_result('$OUT/bench-default.json'), load_result('$OUT/bench-cb.json'))))" > "$OUT/compare-cb.txt" 2>&1
  cat "$OUT/compare-cb.txt"
  stop
fi
tar czf "$OUT/logs.tar.gz" -C "$OUT" $(cd "$OUT" && ls serve-*.log models-*.json openapi.json serve-help.txt 2>/dev/null) doctor && \
  (cd "$OUT" && rm -rf doctor serve-*.log models-*.json serve-help.txt)
log "done"
