#!/usr/bin/env bash
# A local PostgreSQL 16 (+ pgvector) for neuralcore-memory-pg's real-server test tier.
#
#   scripts/postgres.sh          install if needed, init if needed, start unless running,
#                                wait, print the URL
#   scripts/postgres.sh stop     stop the server in the data folder
#   scripts/postgres.sh status   say whether something answers on the port
#   scripts/postgres.sh bin      install if needed, print the folder of the binaries
#
# PostgreSQL comes from PyPI: the `pgserver` package ships native PostgreSQL 16 binaries
# with pgvector under `pgserver/pginstall/bin`; no Python runs at serve time. It is
# installed into a venv; initdb refuses to run as root, so when this script runs as root
# the data folder belongs to the `postgres` user (created if missing) and initdb and
# pg_ctl run as that user. Authentication is `trust` and the server listens on 127.0.0.1
# only, with its Unix socket inside the data folder.
# Everything lives under ${NEURALCORE_CACHE:-/var/cache/neuralcore}: pg-venv/, pgdata/,
# postgres.log. The port is ${NEURALCORE_TEST_PG_PORT:-5439}.
# The last line on stdout is `export NEURALCORE_TEST_PG_URL=...`, so
#   eval "$(scripts/postgres.sh | tail -n1)"
# sets up the environment for `cargo test -p neuralcore-memory-pg`.
set -euo pipefail

CACHE="${NEURALCORE_CACHE:-/var/cache/neuralcore}"
PORT="${NEURALCORE_TEST_PG_PORT:-5439}"
HOST=127.0.0.1
VENV="$CACHE/pg-venv"
DATA="$CACHE/pgdata"
LOG="$CACHE/postgres.log"
PG_USER=postgres
WAIT_SECS="${NEURALCORE_PG_WAIT_SECS:-60}"
URL="postgres://postgres@$HOST:$PORT/postgres"

log() { echo "postgres: $*" >&2; }
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

# Sets PG_BIN to the pginstall/bin folder of the venv's pgserver (empty when not
# installed). Asks Python only until it is found: the wait loop calls this often.
PG_BIN=""
find_pg_bin() {
    local py="$VENV/bin/python"
    [[ -z "$PG_BIN" && -x "$py" ]] || return 0
    PG_BIN="$("$py" - <<'EOF' 2>/dev/null || true
import pathlib, pgserver
p = pathlib.Path(pgserver.__file__).parent / "pginstall" / "bin"
print(p if (p / "pg_ctl").exists() else "")
EOF
)"
}

# Run a command as the data folder's owner: `postgres` when we are root, else ourselves.
as_owner() {
    if [[ "$(id -u)" == 0 ]]; then
        runuser -u "$PG_USER" -- "$@"
    else
        "$@"
    fi
}

# True when a PostgreSQL server (or, without pg_isready, anything) answers on the port.
answers() {
    find_pg_bin
    if [[ -n "$PG_BIN" && -x "$PG_BIN/pg_isready" ]]; then
        "$PG_BIN/pg_isready" -q -h "$HOST" -p "$PORT" -t 2
    elif command -v pg_isready >/dev/null 2>&1; then
        pg_isready -q -h "$HOST" -p "$PORT" -t 2
    else
        timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$PORT" 2>/dev/null
    fi
}

ensure_venv() {
    make_venv "$VENV"
    find_pg_bin
    if [[ -z "$PG_BIN" ]]; then
        log "installing pgserver (PostgreSQL 16 + pgvector binaries)"
        local start=$SECONDS
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check pgserver >&2
        log "installed in $((SECONDS - start)) s"
        find_pg_bin
    fi
    if [[ -z "$PG_BIN" ]]; then
        log "pgserver installed but pginstall/bin/pg_ctl is missing"
        exit 1
    fi
}

ensure_owner() {
    [[ "$(id -u)" == 0 ]] || return 0
    if ! getent passwd "$PG_USER" >/dev/null; then
        log "creating user $PG_USER"
        useradd --system --home-dir "$DATA" --shell /usr/sbin/nologin "$PG_USER"
    fi
    # The binaries must be reachable by the owner (the venv is root's).
    chmod o+rx "$CACHE"
    chmod -R o+rX "$VENV"
}

ensure_data() {
    mkdir -p "$DATA"
    touch "$LOG"
    if [[ "$(id -u)" == 0 ]]; then
        chown "$PG_USER:" "$DATA" "$LOG"
    fi
    chmod 700 "$DATA"
    if [[ ! -f "$DATA/PG_VERSION" ]]; then
        log "initdb $DATA"
        local start=$SECONDS
        as_owner "$1/initdb" -D "$DATA" -A trust -U postgres -E UTF8 --no-locale >&2
        log "initdb took $((SECONDS - start)) s"
    fi
}

start_server() {
    if answers; then
        log "something already answers on $HOST:$PORT"
        return
    fi
    ensure_venv
    ensure_owner
    local bin="$PG_BIN"
    ensure_data "$bin"
    log "starting PostgreSQL on $HOST:$PORT (log: $LOG)"
    local start=$SECONDS
    # pg_ctl detaches the server (its own session), so it outlives this shell.
    if ! as_owner "$bin/pg_ctl" -D "$DATA" -l "$LOG" -t "$WAIT_SECS" \
        -o "-c listen_addresses=$HOST -p $PORT -k $DATA" -w start >&2; then
        log "pg_ctl start failed; last lines of $LOG:"
        tail -n 30 "$LOG" >&2 || true
        exit 1
    fi
    until answers; do
        if ((SECONDS - start >= WAIT_SECS)); then
            log "no answer after ${WAIT_SECS} s; last lines of $LOG:"
            tail -n 30 "$LOG" >&2 || true
            exit 1
        fi
        sleep 0.2
    done
    log "ready after $((SECONDS - start)) s"
}

stop_server() {
    find_pg_bin
    local bin="$PG_BIN"
    if [[ -z "$bin" || ! -f "$DATA/postmaster.pid" ]]; then
        log "no server running from $DATA"
        return
    fi
    as_owner "$bin/pg_ctl" -D "$DATA" -m fast -w stop >&2
}

case "${1:-start}" in
start)
    start_server
    echo "export NEURALCORE_TEST_PG_URL=$URL"
    ;;
stop)
    stop_server
    ;;
bin)
    # The folder of initdb, postgres and pg_ctl (installed if needed), for tests that
    # run a private server of their own (crates/memory-pg/tests/restart.rs).
    ensure_venv
    ensure_owner
    echo "$PG_BIN"
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
    echo "usage: $0 [start|stop|status|bin]" >&2
    exit 2
    ;;
esac
