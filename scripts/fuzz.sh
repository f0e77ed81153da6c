#!/usr/bin/env bash
# Fuzzes every parser that reads outside input (fuzz/fuzz_targets: each loader with
# chunking, the keyword analyzer and sentence primitives, the LLM client's answer and
# stream parsing, SearxNG answers, the Mind's key globs, the markdown agent parser, MCP
# messages, the config loader) with cargo-fuzz (libFuzzer, AddressSanitizer, debug
# assertions) on the nightly toolchain.
#
#   scripts/fuzz.sh [SECONDS] [TARGET ...]   # SECONDS per target (default 60); all targets
#
# Each target starts from its committed seeds (fuzz/seeds/TARGET) plus the corpus earlier
# runs grew (kept under the target folder, not in the tree), with a per-input time limit
# (a hang) and an RSS limit (a memory blow-up). An input that crashes, hangs or blows up
# is kept in fuzz/artifacts/TARGET/ and the script fails; make it a regression test in
# the crate that parses it. Installs cargo-fuzz (pinned) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "$*" >&2; }
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
use_shared_target

SECS="${1:-60}"
shift || true
CARGO_FUZZ_VERSION=0.13.2
# Per input: a slower one is a hang. Per process: more is a blow-up (ASan's own shadow
# memory is not counted by libFuzzer's RSS limit).
TIMEOUT_S=10
RSS_MB=2048

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  log "the nightly toolchain is missing: installing it with rustup"
  rustup toolchain install nightly --profile minimal
fi
if [ "$(cargo fuzz --version 2>/dev/null | awk '{print $2}')" != "$CARGO_FUZZ_VERSION" ]; then
  log "cargo-fuzz $CARGO_FUZZ_VERSION not found: installing it from crates.io"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

FUZZ_TARGET_DIR="$CARGO_TARGET_DIR/fuzz"
# -O: optimized, -a: with debug assertions and overflow checks (what the tests build).
FLAGS=(-O -a --target-dir "$FUZZ_TARGET_DIR")
cargo +nightly fuzz build "${FLAGS[@]}"

if [ "$#" -gt 0 ]; then
  TARGETS=("$@")
else
  mapfile -t TARGETS < <(cargo +nightly fuzz list)
fi
if [ "${#TARGETS[@]}" -eq 0 ]; then
  log "no fuzz targets found (cargo fuzz list failed?)"
  exit 1
fi

failed=()
printf '%-16s %10s %8s %s\n' target runs corpus result >&2
for t in "${TARGETS[@]}"; do
  corpus="$FUZZ_TARGET_DIR/corpus/$t"
  artifacts="fuzz/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  out="$FUZZ_TARGET_DIR/$t.log"
  status=0
  cargo +nightly fuzz run "${FLAGS[@]}" "$t" "$corpus" "fuzz/seeds/$t" -- \
    -max_total_time="$SECS" -timeout="$TIMEOUT_S" -rss_limit_mb="$RSS_MB" \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts/" \
    >"$out" 2>&1 || status=$?
  runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out" | awk '{print $2}' | tail -n1 || true)"
  units="$(find "$corpus" -type f | wc -l)"
  if [ "$status" -eq 0 ]; then
    result="ok"
  else
    result="FAILED (exit $status): $(grep -m1 -E 'ERROR: |panicked at|timeout|out-of-memory' "$out" || echo "see $out")"
    failed+=("$t")
  fi
  printf '%-16s %10s %8s %s\n' "$t" "${runs:-?}" "$units" "$result" >&2
done

if [ "${#failed[@]}" -gt 0 ]; then
  log "fuzzing found failures in: ${failed[*]} (inputs in fuzz/artifacts/, logs in $FUZZ_TARGET_DIR/*.log)"
  exit 1
fi
log "fuzzing: ${#TARGETS[@]} targets, ${SECS} s each, no crash, hang or blow-up"
