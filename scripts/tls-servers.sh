#!/usr/bin/env bash
# PostgreSQL and Redis with TLS turned on, on loopback, for the connection tests
# (crates/pg/tests/tls.rs, crates/redis/tests/tls.rs and the CLI's TLS test).
#
#   scripts/tls-servers.sh          make the certificates if needed, configure and start
#                                   the servers unless running, print the environment
#   scripts/tls-servers.sh stop     stop them
#
# Certificates (openssl, under ${NEURALCORE_CACHE:-/var/cache/neuralcore}/tls): a test CA;
# a server certificate it signs for localhost and 127.0.0.1; a client certificate for
# the PostgreSQL role nc_cert (certificate authentication); and a second CA that signed
# nothing the servers present, to check that a wrong CA is refused.
#
# PostgreSQL: Debian's (the newest installed under /usr/lib/postgresql, else apt-get's
# `postgresql`; the pgserver build the other tests use has no OpenSSL), its own data
# folder and port (NEURALCORE_TEST_PG_TLS_PORT, 5441), run as the postgres user when
# this runs as root. pg_hba.conf: TLS only over TCP (a plain TCP connection is
# rejected), SCRAM password for everyone but nc_cert, who authenticates with the client
# certificate. Its TLS settings, certificates, pg_hba.conf and roles are applied on every
# start, so a run cut short or certificates made again leave nothing stale. The password
# is random, made with the certificates, and kept in tls/pg-password and tls/pgpass (a
# libpq password file, 0600).
# Redis: the Debian redis-server (built with TLS), TLS only, a random password in
# tls/redis-password; on NEURALCORE_TEST_REDIS_TLS_PORT (6391) a client certificate is
# optional, on the next port it is required.
#
# The last line on stdout exports NEURALCORE_TEST_TLS_DIR, NEURALCORE_TEST_PG_TLS_URL
# (no password: tests take it from the password file) and NEURALCORE_TEST_REDIS_TLS_URL
# (no password either), so `eval "$(scripts/tls-servers.sh | tail -n1)"` sets them.
set -euo pipefail

CACHE="${NEURALCORE_CACHE:-/var/cache/neuralcore}"
DIR="$CACHE/tls"
PG_PORT="${NEURALCORE_TEST_PG_TLS_PORT:-5441}"
REDIS_PORT="${NEURALCORE_TEST_REDIS_TLS_PORT:-6391}"
REDIS_MTLS_PORT=$((REDIS_PORT + 1))
PG_DATA="$CACHE/pgdata-tls"
PG_LOG="$CACHE/postgres-tls.log"
HOST=127.0.0.1

log() { echo "tls-servers: $*" >&2; }
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

as_postgres() {
    if [[ "$(id -u)" == 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# Sets PG_BIN to the newest Debian PostgreSQL's binaries, when one is installed.
PG_BIN=""
find_pg_bin() {
    local b
    b="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)"
    if [[ -n "$b" && -x "$b/postgres" ]]; then
        PG_BIN="$b"
    fi
}

make_certs() {
    mkdir -p "$DIR"
    chmod 755 "$DIR"
    [[ -f "$DIR/ready" ]] && return
    command -v openssl >/dev/null || apt_install openssl
    log "making a test CA and certificates in $DIR"
    local days=3650
    (
        cd "$DIR"
        for ca in ca other-ca; do
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days $days \
                -keyout "$ca.key" -out "$ca.pem" -subj "/CN=neuralcore test $ca" \
                -addext "basicConstraints=critical,CA:TRUE" \
                -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
        done
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
            -keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
        printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" \
            "basicConstraints=CA:FALSE" "extendedKeyUsage=serverAuth" > server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
            -days $days -out server.pem -extfile server.ext 2>/dev/null
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
            -keyout client.key -out client.csr -subj "/CN=nc_cert" 2>/dev/null
        printf '%s\n' "basicConstraints=CA:FALSE" "extendedKeyUsage=clientAuth" > client.ext
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
            -days $days -out client.pem -extfile client.ext 2>/dev/null
        # PKCS#8, which every client reads.
        openssl pkcs8 -topk8 -nocrypt -in client.key -out client.key.pk8
        mv client.key.pk8 client.key
        chmod 600 ./*.key
        head -c 18 /dev/urandom | base64 | tr '+/' '-_' > pg-password
        head -c 18 /dev/urandom | base64 | tr '+/' '-_' > redis-password
        chmod 600 pg-password redis-password
        rm -f ./*.csr ./*.ext ./*.srl
    )
    touch "$DIR/ready"
}

pg_answers() {
    [[ -n "$PG_BIN" ]] && "$PG_BIN/pg_isready" -q -h "$HOST" -p "$PG_PORT" -t 2 2>/dev/null
}

# The TLS settings, certificates and pg_hba.conf: written on every start (cheap), so a
# run cut short or certificates made again leave nothing stale.
configure_pg() {
    cp "$DIR/server.pem" "$DIR/server.key" "$DIR/ca.pem" "$PG_DATA/"
    chmod 600 "$PG_DATA/server.key"
    cat > "$PG_DATA/neuralcore-tls.conf" <<EOF
ssl = on
ssl_cert_file = 'server.pem'
ssl_key_file = 'server.key'
ssl_ca_file = 'ca.pem'
password_encryption = 'scram-sha-256'
EOF
    if ! grep -q "^include_if_exists 'neuralcore-tls.conf'" "$PG_DATA/postgresql.conf"; then
        echo "include_if_exists 'neuralcore-tls.conf'" >> "$PG_DATA/postgresql.conf"
    fi
    cat > "$PG_DATA/pg_hba.conf" <<EOF
local   all  all                   trust
hostssl all  nc_cert  $HOST/32    cert
hostssl all  all      $HOST/32    scram-sha-256
host    all  all      $HOST/32    reject
EOF
    if [[ "$(id -u)" == 0 ]]; then
        chown postgres: "$PG_DATA"/server.* "$PG_DATA/ca.pem" "$PG_DATA/neuralcore-tls.conf" \
            "$PG_DATA/pg_hba.conf"
    fi
}

# The roles, over the Unix socket in the data folder: idempotent. Then the password
# file, for the port in use.
configure_roles() {
    # The password on stdin, not the command line (base64url: no quote to escape).
    as_postgres "$PG_BIN/psql" -q -h "$PG_DATA" -p "$PG_PORT" -U postgres -d postgres \
        -v ON_ERROR_STOP=1 >&2 <<EOF
ALTER ROLE postgres PASSWORD '$(cat "$DIR/pg-password")';
SELECT 'CREATE ROLE nc_cert LOGIN' WHERE NOT EXISTS
    (SELECT 1 FROM pg_roles WHERE rolname = 'nc_cert') \gexec
GRANT CREATE ON SCHEMA public TO nc_cert;
EOF
    printf '%s\n' "$HOST:$PG_PORT:*:postgres:$(cat "$DIR/pg-password")" > "$DIR/pgpass"
    chmod 600 "$DIR/pgpass"
}

start_pg() {
    find_pg_bin
    if [[ -z "$PG_BIN" ]]; then
        log "installing Debian's PostgreSQL (a build with OpenSSL)"
        apt_install postgresql
        find_pg_bin
        [[ -n "$PG_BIN" ]] || { log "no PostgreSQL under /usr/lib/postgresql"; exit 1; }
    fi
    if [[ "$(id -u)" == 0 ]] && ! getent passwd postgres >/dev/null; then
        useradd --system --home-dir "$PG_DATA" --shell /usr/sbin/nologin postgres
    fi
    mkdir -p "$PG_DATA"
    touch "$PG_LOG"
    if [[ "$(id -u)" == 0 ]]; then chown postgres: "$PG_DATA" "$PG_LOG"; fi
    chmod 700 "$PG_DATA"
    if [[ ! -f "$PG_DATA/PG_VERSION" ]]; then
        log "initdb $PG_DATA ($PG_BIN)"
        as_postgres "$PG_BIN/initdb" -D "$PG_DATA" -A trust -U postgres -E UTF8 --no-locale >&2
    fi
    configure_pg
    if as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; then
        as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" reload >&2
    elif pg_answers; then
        log "another server answers on $HOST:$PG_PORT; set NEURALCORE_TEST_PG_TLS_PORT"
        exit 1
    else
        log "starting PostgreSQL with TLS on $HOST:$PG_PORT (log: $PG_LOG)"
        if ! as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -t 60 \
            -o "-c listen_addresses=$HOST -p $PG_PORT -k $PG_DATA" -w start >&2; then
            tail -n 30 "$PG_LOG" >&2 || true
            exit 1
        fi
    fi
    configure_roles
}

redis_answers() {
    REDISCLI_AUTH="$(cat "$DIR/redis-password")" redis-cli --tls --cacert "$DIR/ca.pem" \
        --cert "$DIR/client.pem" --key "$DIR/client.key" \
        -h "$HOST" -p "$1" ping >/dev/null 2>&1
}

# start_redis PORT CLIENT-CERTIFICATES (optional | yes)
start_redis() {
    local port="$1" clients="$2"
    command -v redis-server >/dev/null || apt_install redis-server
    if redis_answers "$port"; then
        return
    fi
    local dir="$CACHE/redis-tls-$port"
    mkdir -p "$dir"
    log "starting Redis with TLS on $HOST:$port (client certificates: $clients)"
    # The password through the configuration on stdin, not the command line.
    printf '%s\n' "requirepass $(cat "$DIR/redis-password")" |
        redis-server - --bind "$HOST" --port 0 --tls-port "$port" \
            --tls-cert-file "$DIR/server.pem" --tls-key-file "$DIR/server.key" \
            --tls-ca-cert-file "$DIR/ca.pem" --tls-auth-clients "$clients" \
            --daemonize yes --dir "$dir" --save '' --appendonly no \
            --logfile "$dir/redis.log" >&2
    for _ in $(seq 50); do
        redis_answers "$port" && return
        sleep 0.1
    done
    log "Redis with TLS did not start; last lines of $dir/redis.log:"
    tail -n 20 "$dir/redis.log" >&2 || true
    exit 1
}

stop_redis() {
    if redis_answers "$1"; then
        REDISCLI_AUTH="$(cat "$DIR/redis-password")" redis-cli --tls --cacert "$DIR/ca.pem" \
            --cert "$DIR/client.pem" --key "$DIR/client.key" \
            -h "$HOST" -p "$1" shutdown nosave >&2 || true
    fi
}

case "${1:-start}" in
start)
    make_certs
    start_pg
    start_redis "$REDIS_PORT" optional
    start_redis "$REDIS_MTLS_PORT" yes
    printf 'export NEURALCORE_TEST_TLS_DIR=%q NEURALCORE_TEST_PG_TLS_URL=%q NEURALCORE_TEST_REDIS_TLS_URL=%q NEURALCORE_TEST_REDIS_MTLS_URL=%q\n' \
        "$DIR" "postgres://postgres@$HOST:$PG_PORT/postgres" \
        "rediss://$HOST:$REDIS_PORT/" "rediss://$HOST:$REDIS_MTLS_PORT/"
    ;;
stop)
    find_pg_bin
    if [[ -n "$PG_BIN" && -f "$PG_DATA/postmaster.pid" ]]; then
        as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w stop >&2
    fi
    stop_redis "$REDIS_PORT"
    stop_redis "$REDIS_MTLS_PORT"
    ;;
*)
    echo "usage: $0 [start|stop]" >&2
    exit 2
    ;;
esac
