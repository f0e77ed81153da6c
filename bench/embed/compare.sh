#!/usr/bin/env bash
# Embedding throughput, side by side in one run: neuralcore's candle embedder
# (`nc-bench embed`) against sentence-transformers on CPU torch (`st_throughput.py`),
# alternating, on the first N SciFact texts (title + " " + text), 2 threads each; ours on
# every instruction set this CPU runs (ISA=avx2 or a list to choose), each named.
#   bench/embed/compare.sh [N=500] [ROUNDS=2]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
N="${1:-500}"; ROUNDS="${2:-2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/neuralcore-target}"
CORPUS="${SCIFACT_CORPUS:-/work/shared/data/beir/scifact/corpus.jsonl}"
[[ -f "$CORPUS" ]] || { echo "SKIP: $CORPUS missing"; exit 0; }
[[ -x "$HERE/.venv/bin/python" ]] || bash "$HERE/setup_venv.sh"
(cd "$ROOT" && cargo build --release -q -p neuralcore-bench -p neuralcore)
MODELS="$ROOT/.models"
"$CARGO_TARGET_DIR/release/neuralcore" --data-dir "$MODELS" models pull
for r in $(seq "$ROUNDS"); do
  "$CARGO_TARGET_DIR/release/nc-bench" embed --corpus "$CORPUS" --model-dir "$MODELS/models/all-minilm-l6-v2" -n "$N" --isa "${ISA:-all}"
  "$HERE/.venv/bin/python" "$HERE/st_throughput.py" -n "$N" --threads 2 --batch-size 32 2>/dev/null
done | tee /tmp/nc-embed-compare.jsonl
python3 - <<'PY'
import json, statistics
rows = [json.loads(l) for l in open("/tmp/nc-embed-compare.jsonl") if l.startswith("{")]
st = statistics.median(r["texts_per_s"] for r in rows if r["impl"] == "sentence-transformers")
print(f"sentence-transformers {st:.1f} texts/s")
for isa in sorted({r["isa"] for r in rows if r["impl"] == "neuralcore"}):
    o = statistics.median(r["texts_per_s"] for r in rows if r.get("isa") == isa)
    print(f"neuralcore {isa:8} {o:.1f} texts/s: ratio {o/st:.2f}x")
PY
