#!/usr/bin/env bash
# Checks every dependency (Cargo.lock and fuzz/Cargo.lock) against the RustSec advisory
# database with cargo-audit, warnings denied: a vulnerability, or an unmaintained, unsound
# or yanked crate, fails unless .cargo/audit.toml ignores it with a reason.
#
#   scripts/audit.sh [ADVISORY_DB]   # default: ../shared/advisory-db (a snapshot; the
#                                    # live database's GitHub home is unreachable here)
#
# The snapshot is copied into a git repository of its own (cargo-audit reads one) under
# the shared target folder. Installs cargo-audit (pinned) when missing: about 12 minutes
# on 2 cores, once per machine.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "$*" >&2; }
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
use_shared_target

SRC="${1:-../shared/advisory-db}"
CARGO_AUDIT_VERSION=0.22.2
if [ ! -d "$SRC/crates" ]; then
  log "no advisory database at $SRC (want a copy of github.com/rustsec/advisory-db)"
  exit 1
fi
if ! cargo audit --version 2>/dev/null | grep -q " $CARGO_AUDIT_VERSION\$"; then
  log "cargo-audit $CARGO_AUDIT_VERSION not found: installing it from crates.io"
  cargo install cargo-audit --version "$CARGO_AUDIT_VERSION" --locked
fi

DB="$CARGO_TARGET_DIR/advisory-db"
stamp="$(cat "$SRC/SNAPSHOT" 2>/dev/null || stat -c %Y "$SRC")"
if [ ! -d "$DB/.git" ] || [ "$(cat "$DB/.source" 2>/dev/null)" != "$stamp" ]; then
  log "copying the advisory database from $SRC"
  rm -rf "$DB"
  cp -r "$SRC" "$DB"
  git -C "$DB" init -q
  git -C "$DB" add -A
  git -C "$DB" -c user.name=audit -c user.email=audit@localhost commit -qm snapshot
  echo "$stamp" >"$DB/.source"
fi

for lock in Cargo.lock fuzz/Cargo.lock; do
  cargo audit --db "$DB" --no-fetch -D warnings -f "$lock"
done
log "audit: no unaddressed advisory in Cargo.lock or fuzz/Cargo.lock ($(head -c 80 "$DB/.source"))"
