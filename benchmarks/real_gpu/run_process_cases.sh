#!/usr/bin/env bash
# The real-GPU run behind tests/fixtures/real-gpu/h200-llama-process/: the misconfigurations the
# doctor must name from the serving process and from the shape of the sweep, on llama.cpp's
# llama-server built with CUDA (the source llama-cpp-python 0.3.36 vendors) and a random-weight
# Llama-3.1-8B (F16, and Q8_0 from llama-quantize). Runs detached (setsid) so that it outlives one
# command of the lent machine; DONE appears in $WORK when it ends.
#
#   SRC=build/llama-src WHL=build/whl bash benchmarks/real_gpu/run_process_cases.sh
#
# Steps: the Python packages the image lacks (wheels in $WHL, no index); the build and the GGUF
# (run_llama_server.sh PHASE=build, the host snapshot taken from the H200 fixture rather than
# collected again); Q8_0; llama-bench (tg128 F16 vs Q8_0, pp2048 at -ub 32 vs 512); the cases; the
# process and flag-table tests against this binary. Writes to $OUT (default /tmp/infergap-process).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${ROOT:-$(cd "$HERE/../.." && pwd)}
export OUT=${OUT:-/tmp/infergap-process} WORK=${WORK:-/tmp/llama-run}
export SRC=$(cd "${SRC:-$ROOT/build/llama-src}" && pwd)
export PYTHONPATH="$ROOT/src:$SRC/gguf-py:${PYTHONPATH:-}"
mkdir -p "$OUT" "$WORK"
{
  python3 -m pip install -q --no-index --find-links "${WHL:-$ROOT/build/whl}" pydantic platformdirs orjson
  [ -d "$WORK/snapshot" ] || tar xzf "$ROOT/tests/fixtures/real-gpu/h200-llama-server/snapshot.tar.gz" -C "$WORK"
  PHASE=build BUILD_WAIT_S=560 bash "$HERE/run_llama_server.sh"
  "$SRC/build/bin/llama-server" --help > "$OUT/llama-server-help.txt" 2>&1
  PHASE=cases CASES="quant nkvo nocb ub32 novis q8 bench-q8 bench-ub" bash "$HERE/run_llama_server.sh"
} > "$WORK/run.log" 2>&1
touch "$WORK/DONE"
