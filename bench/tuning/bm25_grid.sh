#!/bin/bash
B=/var/cache/neuralcore-target/debug/neuralcore
D=/work/shared/data/beir/scifact
DD=${DD:-c256-0}
for k1 in ${K1S:-0.6 0.9 1.2}; do for b in ${BS:-0.5 0.75}; do for tw in ${TWS:-0.2 0.3 0.4 0.5}; do
  r=$(env NC_TIB=1 NEURALCORE_INGEST_CHUNK_TOKENS=${CT:-256} NEURALCORE_INGEST_CHUNK_OVERLAP=${OV:-0} NEURALCORE_KEYWORD_K1=$k1 NEURALCORE_KEYWORD_B=$b NEURALCORE_KEYWORD_TITLE_WEIGHT=$tw $B --data-dir /tmp/tune/dd-$DD eval beir $D --split train --json -q 2>/dev/null | python3 -c 'import json,sys; s=json.load(sys.stdin)["summary"]; print("%.4f %.4f"%(s["ndcg_at_10"], s["recall_at_100"]))')
  echo "k1=$k1 b=$b tw=$tw $r"
done; done; done
