#!/usr/bin/env bash
# A local Arize Phoenix (an LLM-observability server that accepts OTLP traces) for the
# tracing tests: neuralcore exports spans to it and the tests read them back from its
# REST API.
#
#   scripts/phoenix.sh          install if needed, start if not running, wait, print the URL
#   scripts/phoenix.sh stop     stop the server this script started
#   scripts/phoenix.sh status   say whether something answers on the port
#
# It installs the pinned `arize-phoenix` package from PyPI into a venv (about a minute
# the first time) and runs `phoenix serve` on 127.0.0.1 with a working folder of its own
# (SQLite inside it). OTLP over HTTP is at $URL/v1/traces; spans are read back from
# $URL/v1/projects/<project>/spans. Everything lives under
# ${NEURALCORE_CACHE:-/var/cache/neuralcore}: phoenix-venv/, phoenix/, phoenix.{log,pid}.
# The last line on stdout is `export NEURALCORE_TEST_PHOENIX_URL=...`, so
#   eval "$(scripts/phoenix.sh | tail -n1)"
# sets up the environment for the tracing tests.
set -euo pipefail

CACHE="${NEURALCORE_CACHE:-/var/cache/neuralcore}"
PORT="${NEURALCORE_TEST_PHOENIX_PORT:-6016}"
# Phoenix also opens an OTLP/gRPC port; keep it off the default 4317.
GRPC_PORT="${NEURALCORE_TEST_PHOENIX_GRPC_PORT:-6017}"
HOST=127.0.0.1
VENV="$CACHE/phoenix-venv"
WORK="$CACHE/phoenix"
LOG="$CACHE/phoenix.log"
PIDFILE="$CACHE/phoenix.pid"
SPEC="arize-phoenix==${NEURALCORE_PHOENIX_VERSION:-20.26.1}"
WAIT_SECS="${NEURALCORE_PHOENIX_WAIT_SECS:-180}"
URL="http://$HOST:$PORT"

log() { echo "phoenix: $*" >&2; }
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

answers() { http_answers "$URL/v1/projects" 3; }

stop_server() { stop_pidfile "$PIDFILE"; }

ensure_venv() {
    pip_pinned "$VENV" "$SPEC"
}

start_server() {
    if answers; then
        log "something already answers on $URL"
        return
    fi
    ensure_venv
    mkdir -p "$WORK"
    log "starting phoenix on $HOST:$PORT (log: $LOG)"
    PHOENIX_WORKING_DIR="$WORK" PHOENIX_HOST="$HOST" PHOENIX_PORT="$PORT" \
        PHOENIX_GRPC_PORT="$GRPC_PORT" PHOENIX_TELEMETRY_ENABLED=false \
        setsid nohup "$VENV/bin/phoenix" serve >"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    wait_started "$PIDFILE" "$LOG" "$WAIT_SECS"
}

case "${1:-start}" in
start)
    start_server
    echo "export NEURALCORE_TEST_PHOENIX_URL=$URL"
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
