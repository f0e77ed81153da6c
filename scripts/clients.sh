#!/usr/bin/env bash
# Real clients for the server's compatibility tests: the official `openai` Python
# package (against /v1/chat/completions) and schemathesis (against /openapi.json), from
# PyPI into a venv under ${NEURALCORE_CACHE:-/var/cache/neuralcore}/clients-venv.
# The last line on stdout is `export NEURALCORE_TEST_PYTHON=...`, so
#   eval "$(scripts/clients.sh | tail -n1)"
# sets up the environment for the tests that run them.
set -euo pipefail

CACHE="${NEURALCORE_CACHE:-/var/cache/neuralcore}"
VENV="$CACHE/clients-venv"
# Pinned: the tests check these clients' behaviour, not whatever is newest.
PACKAGES=(openai==3.57.0 schemathesis==4.32.5)

log() { echo "clients: $*" >&2; }
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

make_venv "$VENV"
if ! "$VENV/bin/python" - "${PACKAGES[@]}" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    assert version(name) == want, spec
PY
then
  log "installing ${PACKAGES[*]} from PyPI"
  "$VENV/bin/pip" install --quiet "${PACKAGES[@]}" >&2
fi
echo "export NEURALCORE_TEST_PYTHON=$VENV/bin/python"
