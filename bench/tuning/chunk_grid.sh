#!/bin/bash
# usage: tune.sh -> prints "config ndcg"
B=/var/cache/neuralcore-target/debug/neuralcore
D=/work/shared/data/beir/scifact
run() { # name, env...
  local name=$1; shift
  local r=$(env "$@" $B --data-dir /tmp/tune/dd-$DD eval beir $D --split train --json -q 2>/dev/null | python3 -c 'import json,sys; s=json.load(sys.stdin)["summary"]; print("%.4f %.4f"%(s["ndcg_at_10"], s["recall_at_100"]))')
  echo "$name $r"
}
for ct in 128 192 256 384 512; do for ov in 0 32; do
  DD=c$ct-$ov run "chunk=$ct ov=$ov" NEURALCORE_INGEST_CHUNK_TOKENS=$ct NEURALCORE_INGEST_CHUNK_OVERLAP=$ov
done; done
