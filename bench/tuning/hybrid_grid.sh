#!/usr/bin/env bash
# Grid over hybrid-fusion settings on a BEIR split (default: SciFact train), one JSON
# line per setting. Needs a data dir where the corpus was ingested with the embedding
# model (a first `neuralcore eval beir` run does that; later runs reuse it).
#   DATA=/tmp/ncsf SPLIT=train bench/tuning/hybrid_grid.sh > bench/tuning/hybrid_train.jsonl
set -euo pipefail
B=${B:-${CARGO_TARGET_DIR:-target}/release/neuralcore}
DATA=${DATA:-/tmp/ncsf}
SPLIT=${SPLIT:-train}
DS=${DS:-/work/shared/data/beir/scifact}
run() { # fusion alpha rrf_k candidates
  NEURALCORE_SEARCH_FUSION=$1 NEURALCORE_SEARCH_ALPHA=$2 NEURALCORE_SEARCH_RRF_K=$3 \
  NEURALCORE_SEARCH_CANDIDATES=$4 \
    "$B" --data-dir "$DATA" -q --json eval beir "$DS" --split "$SPLIT" --mode hybrid |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d['runs'][0]['summary']; print(json.dumps({'fusion':'$1','alpha':$2,'rrf_k':$3,'candidates':$4,'ndcg10':s['ndcg_at_10'],'recall100':s['recall_at_100'],'p50_ms':s['latency_p50_ms']}))"
}
for c in 100; do
  for a in 0.3 0.4 0.5 0.6 0.7; do run convex $a 60 $c; done
  for k in 10 30 60 100; do run rrf 0.5 $k $c; done
done
for c in 30 50 200; do run convex 0.5 60 $c; done
