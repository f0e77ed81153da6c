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
"$CARGO_TARGET_DIR/release/neuralcore" --data-dir "$MODELS" models pull >&2
OUT=/tmp/nc-embed-query.jsonl
for r in $(seq "$ROUNDS"); do
  "$CARGO_TARGET_DIR/release/nc-bench" embed-query --queries "$QUERIES" \
    --model-dir "$MODELS/models/all-minilm-l6-v2" -n "$N" --isa all --query-weights f32,bf16
  "$HERE/.venv/bin/python" "$HERE/st_query.py" -n "$N" --threads 2 --queries "$QUERIES" 2>/dev/null
done | tee "$OUT"
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
st = statistics.median(r["p50_ms"] for r in rows if r["impl"] == "sentence-transformers")
print(f"sentence-transformers p50 {st:.2f} ms")
keys = sorted({(r["isa"], r["query_weights"]) for r in rows if r["impl"] == "neuralcore"})
for isa, qw in keys:
    p50 = statistics.median(r["p50_ms"] for r in rows if r.get("isa") == isa and r.get("query_weights") == qw)
    print(f"neuralcore {isa:8} {qw:4} p50 {p50:.2f} ms: {st / p50:.2f}x faster than sentence-transformers")
PY
