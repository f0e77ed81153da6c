#!/usr/bin/env bash
# Ingest speed with 1 and with 2 `neuralcore worker` processes (issue 19): a replica that
# only queues (`serve --no-jobs`) over PostgreSQL takes the SciFact corpus as JOBS
# uploads of documents, then W workers (each on a data dir of its own) run the jobs,
# embeddings included; the time from the workers' start to the last job indexed is
# reported for each W, and the ratio. A fresh schema for every run.
#
#   bench/workers.sh [CORPUS] [JOBS]
#
# CORPUS defaults to ../shared/data/beir/scifact/corpus.jsonl, JOBS to 8. The binary is
# NEURALCORE_BIN (default: the shared target folder's debug build, whose dependencies
# are optimized), the PostgreSQL scripts/postgres.sh's. Prints one JSON line.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
use_shared_target
CORPUS="${1:-../shared/data/beir/scifact/corpus.jsonl}"
JOBS="${2:-8}"
BIN="${NEURALCORE_BIN:-$CARGO_TARGET_DIR/debug/neuralcore}"
PG="$(scripts/postgres.sh | tail -n1 | sed 's/^export NEURALCORE_TEST_PG_URL=//')"
PSQL="$(scripts/postgres.sh bin | tail -n1)/psql"
PORT="${NEURALCORE_BENCH_PORT:-18731}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/nc-workers.XXXXXX")"
PY="$(command -v python3)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

one_run() {
    local workers="$1" schema="ncbench_workers_$$_$1"
    local dir="$WORK/w$workers"
    mkdir -p "$dir"
    cat > "$dir/neuralcore.toml" <<EOF
[store]
backend = "postgres"
postgres_url = "$PG"
postgres_schema = "$schema"

[embedding]
model_dir = "$PWD/.models/models"
EOF
    "$PSQL" "$PG" -qc "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
    "$BIN" --quiet --config "$dir/neuralcore.toml" --data-dir "$dir/replica" db migrate >/dev/null
    "$BIN" --config "$dir/neuralcore.toml" --data-dir "$dir/replica" serve --no-jobs \
        --addr "127.0.0.1:$PORT" > "$dir/replica.log" 2>&1 &
    local replica=$!
    until http_answers "http://127.0.0.1:$PORT/healthz" 2; do sleep 0.2; done
    # Queue every job before any worker runs.
    "$PY" - "$CORPUS" "$JOBS" "http://127.0.0.1:$PORT" > "$dir/jobs.txt" <<'EOF'
import json, sys, urllib.request
corpus, jobs, base = sys.argv[1], int(sys.argv[2]), sys.argv[3]
docs = [json.loads(l) for l in open(corpus)]
for j in range(jobs):
    part = [{"name": d["_id"], "text": (d.get("title", "") + "\n\n" + d["text"]).strip()}
            for d in docs[j::jobs]]
    req = urllib.request.Request(f"{base}/v1/collections/scifact/documents",
                                 data=json.dumps({"documents": part}).encode(),
                                 headers={"Content-Type": "application/json"})
    print(json.load(urllib.request.urlopen(req))["id"])
EOF
    local start pids=()
    start=$(date +%s.%N)
    for i in $(seq "$workers"); do
        "$BIN" --config "$dir/neuralcore.toml" --data-dir "$dir/worker-$i" worker \
            > "$dir/worker-$i.log" 2>&1 &
        pids+=($!)
    done
    "$PY" - "http://127.0.0.1:$PORT" "$dir/jobs.txt" <<'EOF'
import json, sys, time, urllib.request
base, ids = sys.argv[1], open(sys.argv[2]).read().split()
while True:
    states = [json.load(urllib.request.urlopen(f"{base}/v1/jobs/{i}"))["state"] for i in ids]
    if any(s == "failed" for s in states):
        sys.exit(f"a job failed: {states}")
    if all(s == "indexed" for s in states):
        break
    time.sleep(0.2)
EOF
    local end
    end=$(date +%s.%N)
    kill -TERM "${pids[@]}" "$replica" 2>/dev/null || true
    wait "${pids[@]}" "$replica" 2>/dev/null || true
    "$PSQL" "$PG" -qc "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
    "$PY" -c "print(round($end - $start, 2))"
}

one=$(one_run 1)
two=$(one_run 2)
"$PY" - "$one" "$two" "$JOBS" "$CORPUS" "$("$BIN" --version)" <<'EOF'
import json, os, sys
one, two = float(sys.argv[1]), float(sys.argv[2])
isa = os.environ.get("NEURALCORE_ISA") or (
    "avx512" if "avx512f" in open("/proc/cpuinfo").read() else "avx2")
print(json.dumps({"bench": "workers-ingest", "corpus": sys.argv[4], "jobs": int(sys.argv[3]),
                  "one_worker_s": one, "two_workers_s": two, "speedup": round(one / two, 3),
                  "cores": os.cpu_count(), "isa": isa, "binary": sys.argv[5]}))
EOF
