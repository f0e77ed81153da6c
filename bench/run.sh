#!/usr/bin/env bash
# Keyword-retrieval benchmarks: neuralcore against bm25s in the same run, plus the
# CLI's SciFact ingest and peak memory on generated corpora. See bench/README.md.
#
#   bench/run.sh            everything (about 1.5 minutes on 2 cores once the release build is done)
#   bench/run.sh --quick    skip the generated-corpus memory benchmark (4)
#
# Environment: CARGO_TARGET_DIR (default /var/cache/neuralcore-target), SCIFACT (default
# /work/shared/data/beir/scifact), REPS (repetitions per measurement, default 5),
# ROUNDS (alternating ours/bm25s rounds, default 2), SIZES (generated corpora in MB
# for (4), default "50 200").
set -euo pipefail

QUICK=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $a (use --quick)" >&2; exit 2 ;;
  esac
done

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$BENCH_DIR/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/neuralcore-target}"
SCIFACT="${SCIFACT:-/work/shared/data/beir/scifact}"
REPS="${REPS:-5}"
ROUNDS="${ROUNDS:-2}"
SIZES="${SIZES:-50 200}"
VENV="$BENCH_DIR/.venv"
PY="$VENV/bin/python"
OUT="$BENCH_DIR/out"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
RESULTS="$OUT/results-$STAMP.jsonl"
SUMMARY="$OUT/summary-$STAMP.txt"
mkdir -p "$OUT"
: >"$RESULTS"

TMPS=()
cleanup() {
  local d
  for d in "${TMPS[@]+"${TMPS[@]}"}"; do rm -rf "$d"; done
}
trap cleanup EXIT

log() { printf '== %s\n' "$*" >&2; }

have_scifact=1
missing=()
for f in corpus.jsonl queries.jsonl qrels/test.tsv; do
  [[ -f "$SCIFACT/$f" ]] || missing+=("$SCIFACT/$f")
done
if (( ${#missing[@]} )); then
  have_scifact=0
  echo "SKIP: SciFact data missing (${missing[*]}); skipping benchmarks (1)-(3)." >&2
fi
if [[ $have_scifact == 0 && $QUICK == 1 ]]; then
  echo "SKIP: nothing to run without SciFact in --quick mode." >&2
  exit 0
fi

# --- tools ------------------------------------------------------------------------
if [[ ! -x /usr/bin/time ]]; then
  log "installing GNU time (Debian package 'time')"
  apt-get update -qq && apt-get install -y -qq time >/dev/null
fi

if [[ $have_scifact == 1 ]]; then
  if [[ ! -x "$PY" ]]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
  fi
  if ! "$PY" -c 'import bm25s, Stemmer, numpy, scipy; assert bm25s.__version__ == "0.3.16"' 2>/dev/null; then
    log "installing bm25s into $VENV"
    "$PY" -m pip install -q --disable-pip-version-check \
      'bm25s==0.3.16' 'PyStemmer==3.1.0' 'numpy==2.4.6' 'scipy==1.17.1'
  fi
fi

log "building (release): neuralcore-bench, neuralcore"
(cd "$ROOT" && cargo build --release -q -p neuralcore-bench -p neuralcore)
NC_BENCH="$CARGO_TARGET_DIR/release/nc-bench"
NC="$CARGO_TARGET_DIR/release/neuralcore"

# bm25s in the same conditions as the README describes: numpy's OpenBLAS tuning
# variables, if the machine sets them, slow a current numpy, so drop them here.
bm25s() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" "$BENCH_DIR/bm25s_bench.py" "$@"; }

# timed NAME CORPUS BYTES CMD...: runs CMD under GNU time (stdout to $OUT/NAME.json)
# and a /proc sampler, and appends one JSON line (wall time, peak RSS, peak anonymous
# and file-backed RSS, MB/s, CMD's JSON summary) to $RESULTS.
timed() {
  local name="$1" corpus="$2" bytes="$3" status=0
  shift 3
  # time -v's peak RSS is that of the largest descendant (getrusage RUSAGE_CHILDREN),
  # i.e. CMD's: the Python sampler between them stays near 10 MB. Its wall time
  # includes the sampler's start (a few tens of ms).
  /usr/bin/time -v -o "$OUT/$name.time" python3 "$BENCH_DIR/summarize.py" sample \
    --out "$OUT/$name.sample" --stdout "$OUT/$name.json" -- "$@" || status=$?
  python3 "$BENCH_DIR/summarize.py" record --name "$name" --time "$OUT/$name.time" \
    --stdout "$OUT/$name.json" --sample "$OUT/$name.sample" --bytes "$bytes" \
    --extra "{\"corpus\": \"$corpus\"}" | tee -a "$RESULTS"
  if [[ $status != 0 ]]; then
    echo "run.sh: '$*' exited with $status (see $OUT/$name.json)" >&2
    return "$status"
  fi
}

# What was measured, where: one JSON line of context at the top of the results.
commit="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git -C "$ROOT" status --porcelain -- crates Cargo.toml Cargo.lock 2>/dev/null)" ]]; then
  commit="$commit+uncommitted-changes"
fi
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)"
python3 - "$commit" "$(nproc)" "$cpu" "$STAMP" "$(rustc --version 2>/dev/null || true)" \
  >>"$RESULTS" <<'EOF'
import json, sys
print(json.dumps({"bench": "meta", "commit": sys.argv[1], "cores": int(sys.argv[2]),
                  "cpu": sys.argv[3], "utc": sys.argv[4], "rustc": sys.argv[5]}))
EOF

# --- (1) indexing and (2) querying, alternating ours / bm25s ------------------------
if [[ $have_scifact == 1 ]]; then
  CORPUS="$SCIFACT/corpus.jsonl"
  QUERIES="$SCIFACT/queries.jsonl"
  QRELS="$SCIFACT/qrels/test.tsv"
  STOP="$OUT/bm25s-stopwords-en.txt"
  bm25s stopwords >"$STOP"
  # "aligned": as close to bm25s as our API allows: bm25s's stop-word list and its
  # 2-character minimum token length, k1 1.2, b 0.75, and only the body field scored
  # (the body is indexed with the title in front, i.e. bm25s's "title + text"). The
  # tokenizers still differ slightly (bm25s: regex \w\w+; ours: alphanumeric runs).
  ALIGN=(--variant aligned --stopwords-file "$STOP" --min-token-len 2 --no-fold)
  ALIGN_Q=("${ALIGN[@]}" --k1 1.2 --b 0.75 --title-weight 0)
  for round in $(seq 1 "$ROUNDS"); do
    log "round $round/$ROUNDS: indexing (ours, bm25s, ours aligned, ours without stemmer)"
    "$NC_BENCH" index --corpus "$CORPUS" --reps "$REPS" | tee -a "$RESULTS"
    bm25s index --corpus "$CORPUS" --reps "$REPS" | tee -a "$RESULTS"
    "$NC_BENCH" index --corpus "$CORPUS" --reps "$REPS" "${ALIGN[@]}" | tee -a "$RESULTS"
    # Diagnostic only (not comparable): the default analyzer without its stemmer,
    # to show how much of our time stemming takes.
    "$NC_BENCH" index --corpus "$CORPUS" --reps "$REPS" --variant no-stemmer \
      --stemmer none | tee -a "$RESULTS"
    log "round $round/$ROUNDS: querying (ours, bm25s, ours aligned, ours without stemmer)"
    "$NC_BENCH" query --corpus "$CORPUS" --queries "$QUERIES" --qrels "$QRELS" \
      --reps "$REPS" --k 10 | tee -a "$RESULTS"
    bm25s query --corpus "$CORPUS" --queries "$QUERIES" --qrels "$QRELS" \
      --reps "$REPS" --k 10 --modes batch-seq,batch-pool1,per-query,per-query-pool1 | tee -a "$RESULTS"
    "$NC_BENCH" query --corpus "$CORPUS" --queries "$QUERIES" --qrels "$QRELS" \
      --reps "$REPS" --k 10 "${ALIGN_Q[@]}" | tee -a "$RESULTS"
    "$NC_BENCH" query --corpus "$CORPUS" --queries "$QUERIES" --reps "$REPS" --k 10 \
      --variant no-stemmer --stemmer none | tee -a "$RESULTS"
  done

  # --- (3) SciFact end-to-end ingest through the CLI ----------------------------------
  DATA="$(mktemp -d /tmp/nc-bench-data.XXXXXX)"
  TMPS+=("$DATA")
  log "SciFact ingest via the CLI into $DATA"
  timed ingest scifact "$(stat -c %s "$CORPUS")" \
    "$NC" --data-dir "$DATA" --json ingest "$CORPUS" -c scifact
  log "SciFact eval (nDCG@10) reusing $DATA"
  timed eval scifact 0 "$NC" --data-dir "$DATA" --json eval beir "$SCIFACT" -c scifact
  rm -rf "$DATA"
fi

# --- (4) peak RSS ingesting generated corpora ---------------------------------------
if [[ $QUICK == 0 ]]; then
  for mb in $SIZES; do
    GEN="$(mktemp -d /tmp/nc-bench-corpus.XXXXXX)"
    DATA="$(mktemp -d /tmp/nc-bench-data.XXXXXX)"
    TMPS+=("$GEN" "$DATA")
    log "generating a ${mb} MB corpus in $GEN"
    python3 "$BENCH_DIR/gen_corpus.py" --out "$GEN" --mb "$mb" --seed 42 >&2
    log "ingesting it"
    timed "ingest-gen${mb}" "generated-${mb}MB" "$(du -sb "$GEN" | cut -f1)" \
      "$NC" --data-dir "$DATA" --json ingest "$GEN" -c gen
    echo "{\"bench\": \"data-dir\", \"corpus\": \"generated-${mb}MB\", \"bytes\": $(du -sb "$DATA" | cut -f1)}" >>"$RESULTS"
    rm -rf "$GEN" "$DATA"
  done
fi

# --- summary ------------------------------------------------------------------------
python3 "$BENCH_DIR/summarize.py" report "$RESULTS" | tee "$SUMMARY"
log "raw results: $RESULTS"
log "summary: $SUMMARY"
