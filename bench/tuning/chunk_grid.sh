#!/usr/bin/env bash
# Grid over chunk size and overlap (tokens) on the SciFact TRAIN split, at the BM25
# defaults of the build. Prints "chunk=.. ov=.. nDCG@10 Recall@100" per line.
set -euo pipefail
B=${NEURALCORE:-${CARGO_TARGET_DIR:-/var/cache/neuralcore-target}/release/neuralcore}
D=${SCIFACT:-/work/shared/data/beir/scifact}
WORK=${WORK:-/tmp/nc-tune}
for ct in ${CTS:-128 192 256 384 512}; do for ov in ${OVS:-0 32}; do
  r=$(env NEURALCORE_INGEST_CHUNK_TOKENS=$ct NEURALCORE_INGEST_CHUNK_OVERLAP=$ov \
      "$B" --data-dir "$WORK/dd-c$ct-$ov" eval beir "$D" --split train --json -q \
    | python3 -c 'import json,sys; s=json.load(sys.stdin)["summary"]; print("%.4f %.4f"%(s["ndcg_at_10"], s["recall_at_100"]))')
  echo "chunk=$ct ov=$ov $r"
done; done
