#!/usr/bin/env bash
# Real clients for the server's compatibility tests: the official `openai` Python
# package (against /v1/chat/completions), schemathesis (against /openapi.json) and the
# official MCP Python SDK (against `neuralcore mcp` and /mcp), from PyPI into a venv under ${NEURALCORE_CACHE:-/var/cache/neuralcore}/clients-venv.
# Also the MCP Inspector (`@modelcontextprotocol/inspector` from npm, for its CLI mode)
# under $CACHE/mcp-inspector, with Debian's nodejs and npm when missing.
# The last line on stdout is `export NEURALCORE_TEST_PYTHON=... NEURALCORE_TEST_MCP_INSPECTOR=...`, so
#   eval "$(scripts/clients.sh | tail -n1)"
# sets up the environment for the tests that run them.
set -euo pipefail

CACHE="${NEURALCORE_CACHE:-/var/cache/neuralcore}"
VENV="$CACHE/clients-venv"
# Pinned: the tests check these clients' behaviour, not whatever is newest.
PACKAGES=(openai==3.57.0 schemathesis==4.32.5 mcp==2.3.0)

log() { echo "clients: $*" >&2; }
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

pip_pinned "$VENV" "${PACKAGES[@]}"

INSPECTOR="$CACHE/mcp-inspector"
INSPECTOR_VERSION=2.12.0
if ! command -v npm >/dev/null 2>&1; then
  log "npm not found: installing nodejs and npm with apt-get"
  apt_install nodejs npm
fi
have="$(node -p "require('$INSPECTOR/node_modules/@modelcontextprotocol/inspector/package.json').version" 2>/dev/null || true)"
if [[ "$have" != "$INSPECTOR_VERSION" ]]; then
  log "installing @modelcontextprotocol/inspector@$INSPECTOR_VERSION from npm"
  mkdir -p "$INSPECTOR"
  (cd "$INSPECTOR" && { [[ -f package.json ]] || echo '{"private": true}' > package.json; } &&
    npm install --no-audit --no-fund --silent "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" >&2)
fi
echo "export NEURALCORE_TEST_PYTHON=$VENV/bin/python NEURALCORE_TEST_MCP_INSPECTOR=$INSPECTOR"
