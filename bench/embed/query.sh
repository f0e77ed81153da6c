#!/usr/bin/env bash
# The query path side by side in one run: neuralcore's `nc-bench embed-query` on every
# instruction set this CPU runs (f32 and the bf16 default) against sentence-transformers
# on CPU torch (`st_query.py`), one SciFact query at a time, ROUNDS rounds alternating.
#   bench/embed/query.sh [N=300] [ROUNDS=2]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
N="${1:-300}"; ROUNDS="${2:-2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/neuralcore-target}"
QUERIES="${SCIFACT_QUERIES:-/work/shared/data/beir/scifact/queries.jsonl}"
[[ -f "$QUERIES" ]] || { echo "SKIP: $QUERIES missing"; exit 0; }
[[ -x "$HERE/.venv/bin/python" ]] || bash "$HERE/setup_venv.sh"
(cd "$ROOT" && cargo build --release -q -p neuralcore-bench -p neuralcore)
MODELS="$ROOT/.models"
# Every instruction set this CPU runs (or ISAS="avx2 portable").
ISAS="${ISAS:-$("$CARGO_TARGET_DIR/release/nc-bench" isas)}"
# Environment that keeps torch (its own kernels, oneDNN, MKL) to one instruction set.
torch_caps() {
  case "$1" in
    avx2) echo "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2" ;;
    portable) echo "ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 MKL_ENABLE_INSTRUCTIONS=SSE4_2" ;;
    *) echo "ATEN_CPU_CAPABILITY=avx512" ;;
  esac
}
"$CARGO_TARGET_DIR/release/neuralcore" --data-dir "$MODELS" models pull >&2
OUT=/tmp/nc-embed-query.jsonl
for r in $(seq "$ROUNDS"); do
  for isa in $ISAS; do
    "$CARGO_TARGET_DIR/release/nc-bench" embed-query --queries "$QUERIES" \
      --model-dir "$MODELS/models/all-minilm-l6-v2" -n "$N" --isa "$isa" --query-weights f32,bf16
    # The peer on the same instruction set: torch's own kernels, oneDNN and MKL capped.
    env $(torch_caps "$isa") "$HERE/.venv/bin/python" "$HERE/st_query.py" -n "$N" --threads 2 --queries "$QUERIES" 2>/dev/null |
      python3 -c "import json,sys; [print(json.dumps({**json.loads(l), 'isa': '$isa'})) for l in sys.stdin if l.startswith('{')]"
  done
done | tee "$OUT"
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for isa in sorted({r["isa"] for r in rows}):
    st = statistics.median(r["p50_ms"] for r in rows if r["impl"] != "neuralcore" and r["isa"] == isa)
    for qw in ("f32", "bf16"):
        p50 = statistics.median(r["p50_ms"] for r in rows if r["impl"] == "neuralcore" and r["isa"] == isa and r["query_weights"] == qw)
        print(f"{isa:8} neuralcore {qw:4} p50 {p50:.2f} ms, sentence-transformers {st:.2f} ms: {st / p50:.2f}x")
PY
