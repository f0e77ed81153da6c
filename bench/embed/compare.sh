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
"$CARGO_TARGET_DIR/release/neuralcore" --data-dir "$MODELS" models pull
for r in $(seq "$ROUNDS"); do
  for isa in $ISAS; do
    "$CARGO_TARGET_DIR/release/nc-bench" embed --corpus "$CORPUS" --model-dir "$MODELS/models/all-minilm-l6-v2" -n "$N" --isa "$isa"
    # The peer on the same instruction set: torch's own kernels, oneDNN and MKL capped.
    env $(torch_caps "$isa") "$HERE/.venv/bin/python" "$HERE/st_throughput.py" -n "$N" --threads 2 --batch-size 32 2>/dev/null |
      python3 -c "import json,sys; [print(json.dumps({**json.loads(l), 'isa': '$isa'})) for l in sys.stdin if l.startswith('{')]"
  done
done | tee /tmp/nc-embed-compare.jsonl
python3 - <<'PY'
import json, statistics
rows = [json.loads(l) for l in open("/tmp/nc-embed-compare.jsonl") if l.startswith("{")]
for isa in sorted({r["isa"] for r in rows}):
    o = statistics.median(r["texts_per_s"] for r in rows if r["impl"] == "neuralcore" and r["isa"] == isa)
    st = statistics.median(r["texts_per_s"] for r in rows if r["impl"] != "neuralcore" and r["isa"] == isa)
    print(f"{isa:8} neuralcore {o:.1f} texts/s, sentence-transformers {st:.1f} texts/s: ratio {o/st:.2f}x")
PY
