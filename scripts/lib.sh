# shellcheck shell=bash
# Shared by the scripts that install and run the test servers (test.sh, searxng.sh,
# llm-server.sh, postgres.sh) and by fuzz.sh and audit.sh. Source it after defining `log`.

# The build folder shared by every clone on this machine (so CI reuses a build), or the
# clone's own target/ when that cannot be made.
use_shared_target() {
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/neuralcore-target}"
    mkdir -p "$CARGO_TARGET_DIR" 2>/dev/null || export CARGO_TARGET_DIR="$PWD/target"
    # Every build of changed code links new test binaries (hundreds of MB each) next to
    # the old ones; a shared folder used for weeks filled a 90 GB disk. Those not
    # rebuilt for two days go (cargo links them again when needed), and the incremental
    # caches, which only the same checkout reuses.
    # Workspace crates bake their checkout's path into what they build (env!
    # ("CARGO_MANIFEST_DIR") in tests' fixture paths), yet cargo calls them fresh for a
    # clone elsewhere with older files (its dep-info paths are relative): a clone at
    # another path would run test binaries reading another clone's fixtures, or none.
    # So when the folder was last used by another checkout, the workspace's own crates
    # are cleaned (third-party builds stay); one checkout per path keeps its builds.
    local mark="$CARGO_TARGET_DIR/.neuralcore-checkout"
    if [[ -f "$mark" && "$(cat "$mark")" != "$PWD" ]]; then
        log "the shared target folder was last used by $(cat "$mark"): rebuilding the workspace's crates"
        local members
        members="$(cargo metadata --no-deps --format-version 1 2>/dev/null | python3 -c '
import json, sys
print(" ".join("-p " + p["name"] for p in json.load(sys.stdin)["packages"]))' || true)"
        if [[ -n "$members" ]]; then
            # shellcheck disable=SC2086
            cargo clean --quiet $members 2>/dev/null || true
            cargo clean --quiet --release $members 2>/dev/null || true
        fi
    fi
    echo "$PWD" >"$mark" 2>/dev/null || true
    local deps="$CARGO_TARGET_DIR/debug/deps"
    if [[ -d "$deps" ]]; then
        find "$deps" -maxdepth 1 -type f ! -name 'lib*' ! -name '*.d' -mtime +2 -delete 2>/dev/null || true
        find "$CARGO_TARGET_DIR/debug/incremental" -mindepth 1 -maxdepth 1 -mtime +2 \
            -exec rm -rf {} + 2>/dev/null || true
    fi
}

# Install Debian packages with apt-get (through sudo unless root), updating the package
# lists first only when the install fails without.
apt_install() {
    local sudo=""
    if [[ "$(id -u)" -ne 0 ]]; then sudo="sudo"; fi
    $sudo apt-get install -y "$@" >/dev/null || {
        $sudo apt-get update >/dev/null && $sudo apt-get install -y "$@" >/dev/null
    }
}

# True when GET $1 answers with a 2xx within $2 seconds (curl, else Python).
http_answers() {
    local url="$1" secs="${2:-2}"
    if command -v curl >/dev/null 2>&1; then
        curl -fsS --max-time "$secs" "$url" >/dev/null 2>&1
    else
        python3 - "$url" "$secs" <<'PY' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])).read()
PY
    fi
}

# Create the venv $1 when missing.
make_venv() {
    local venv="$1"
    if [[ ! -x "$venv/bin/python" ]]; then
        log "creating venv at $venv"
        mkdir -p "$(dirname "$venv")"
        if ! python3 -m venv "$venv" 2>/dev/null; then
            # Debian's own python3 keeps venv (and its pip) in a separate package.
            log "python3 cannot make a venv: installing python3-venv with apt-get"
            rm -rf "$venv"
            apt_install python3-venv
            python3 -m venv "$venv"
        fi
    fi
}

# Install the pinned PyPI packages $2… (name==version) into the venv $1 (made when
# missing) unless each is there at exactly that version.
pip_pinned() {
    local venv="$1"
    shift
    make_venv "$venv"
    if ! "$venv/bin/python" - "$@" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    assert version(name) == want, spec
PY
    then
        log "installing $* from PyPI"
        "$venv/bin/pip" install --quiet "$@" >&2
    fi
}

# Stop the process whose pid is in the file $1 (TERM, then KILL after 5 s), and
# remove the file.
stop_pidfile() {
    local pidfile="$1"
    if [[ -f "$pidfile" ]]; then
        local pid
        pid="$(cat "$pidfile")"
        if kill -0 "$pid" 2>/dev/null; then
            log "stopping pid $pid"
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            if kill -0 "$pid" 2>/dev/null; then
                log "pid $pid still alive, sending SIGKILL"
                kill -9 "$pid" 2>/dev/null || true
            fi
        else
            log "pid $pid is not running"
        fi
        rm -f "$pidfile"
    else
        log "no pid file at $pidfile (nothing started by this script)"
    fi
}

# After a server was started in the background with its pid written to the file $1:
# wait until the caller's `answers` succeeds. Fails the script, with the last lines of
# the log $2, when the process exits first or nothing answers within $3 seconds.
wait_started() {
    local pidfile="$1" logfile="$2" wait="$3"
    local pid start=$SECONDS
    pid="$(cat "$pidfile")"
    until answers; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "server exited during startup; last lines of $logfile:"
            tail -n 30 "$logfile" >&2 || true
            rm -f "$pidfile"
            exit 1
        fi
        if ((SECONDS - start >= wait)); then
            log "no answer after ${wait} s; last lines of $logfile:"
            tail -n 30 "$logfile" >&2 || true
            exit 1
        fi
        sleep 0.5
    done
    log "ready after $((SECONDS - start)) s (pid $pid)"
}

# Start a Redis on $1:$2 (no persistence; data in the folder $3, log in $4, pid in $5
# when given) unless one answers there already; install redis-server with apt-get when
# missing. Fails the script when it does not answer within 5 s.
ensure_redis() {
    local host="$1" port="$2" dir="$3" logfile="$4" pidfile="${5:-}"
    if redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1; then
        return
    fi
    if ! command -v redis-server >/dev/null 2>&1; then
        log "redis-server not found: installing it with apt-get"
        apt_install redis-server
    fi
    mkdir -p "$dir"
    redis-server --bind "$host" --port "$port" --daemonize yes --dir "$dir" \
        --save '' --appendonly no --logfile "$logfile" ${pidfile:+--pidfile "$pidfile"} >&2
    for _ in $(seq 50); do
        redis-cli -h "$host" -p "$port" ping >/dev/null 2>&1 && return
        sleep 0.1
    done
    log "redis-server did not start on $host:$port: see $logfile"
    tail -n 5 "$logfile" >&2 2>/dev/null || true
    exit 1
}

