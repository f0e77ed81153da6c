#!/usr/bin/env bash
# Grid over BM25 k1, b and title weight on the SciFact TRAIN split (never test).
# Prints "k1=.. b=.. tw=.. nDCG@10 Recall@100" per line. The corpus is ingested once
# into $WORK/dd-$DD and reused; chunking comes from CT/OV.
#   K1S="0.9 1.2" BS="0.5 0.75" TWS="0 0.2" bench/tuning/bm25_grid.sh
set -euo pipefail
B=${NEURALCORE:-${CARGO_TARGET_DIR:-/var/cache/neuralcore-target}/release/neuralcore}
D=${SCIFACT:-/work/shared/data/beir/scifact}
WORK=${WORK:-/tmp/nc-tune}
DD=${DD:-c${CT:-256}-${OV:-0}}
for k1 in ${K1S:-0.6 0.9 1.2}; do for b in ${BS:-0.5 0.75}; do for tw in ${TWS:-0 0.2 0.4}; do
  r=$(env NEURALCORE_INGEST_CHUNK_TOKENS=${CT:-256} NEURALCORE_INGEST_CHUNK_OVERLAP=${OV:-0} \
      NEURALCORE_KEYWORD_K1=$k1 NEURALCORE_KEYWORD_B=$b NEURALCORE_KEYWORD_TITLE_WEIGHT=$tw \
      "$B" --data-dir "$WORK/dd-$DD" eval beir "$D" --split train --json -q \
    | python3 -c 'import json,sys; s=json.load(sys.stdin)["summary"]; print("%.4f %.4f"%(s["ndcg_at_10"], s["recall_at_100"]))')
  echo "k1=$k1 b=$b tw=$tw $r"
done; done; done
