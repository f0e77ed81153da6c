#!/usr/bin/env bash
# A real browser for the web console's test (crates/cli/tests/console.rs): Debian's
# `chromium` (installed with apt-get when missing: Playwright's own browser download is
# not used) driven by Playwright's Python package, pinned, from PyPI into a venv of its
# own under ${NEURALCORE_CACHE:-/var/cache/neuralcore}/console-venv.
# The last line on stdout is
#   export NEURALCORE_TEST_CONSOLE_PYTHON=... NEURALCORE_TEST_CHROMIUM=...
# so `eval "$(scripts/console-client.sh | tail -n1)"` sets up the environment for it.
set -euo pipefail

CACHE="${NEURALCORE_CACHE:-/var/cache/neuralcore}"
VENV="$CACHE/console-venv"
# Pinned: the test checks the console through this client, not whatever is newest.
PACKAGES=(playwright==1.65.2)

log() { echo "console-client: $*" >&2; }
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

CHROMIUM="$(command -v chromium || true)"
if [[ -z "$CHROMIUM" ]]; then
  log "chromium not found: installing it with apt-get (about 100 MB)"
  apt_install chromium
  CHROMIUM="$(command -v chromium)"
fi

pip_pinned "$VENV" "${PACKAGES[@]}"
echo "export NEURALCORE_TEST_CONSOLE_PYTHON=$VENV/bin/python NEURALCORE_TEST_CHROMIUM=$CHROMIUM"
