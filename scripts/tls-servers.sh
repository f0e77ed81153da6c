#!/usr/bin/env bash
# PostgreSQL and Redis with TLS turned on, on loopback, for the connection tests
# (crates/pg/tests/tls.rs, crates/redis/tests/tls.rs and the stores' TLS tests).
#
#   scripts/tls-servers.sh          make the certificates if needed, start both servers
#                                   unless running, print the environment
#   scripts/tls-servers.sh stop     stop both
#
# Certificates (openssl, under ${NEURALCORE_CACHE:-/var/cache/neuralcore}/tls): a test CA;
# a server certificate it signs for localhost and 127.0.0.1; a client certificate for
# the PostgreSQL role nc_cert (certificate authentication); and a second CA that signed
# nothing the servers present, to check that a wrong CA is refused.
#
# PostgreSQL: Debian's postgresql-15 (apt-get when missing; the pgserver build the other
# tests use has no OpenSSL), its own data folder and port (NEURALCORE_TEST_PG_TLS_PORT,
# 5441), run as the postgres user when this runs as root. pg_hba.conf: TLS only over TCP
# (a plain TCP connection is rejected), SCRAM password for everyone but nc_cert, who
# authenticates with the client certificate. The password is random, made once, and
# kept in tls/pgpass (a libpq password file, 0600) and tls/pg-password.
# Redis: the Debian redis-server (built with TLS), TLS only on NEURALCORE_TEST_REDIS_TLS_PORT
# (6391), a random password in tls/redis-password.
#
# The last line on stdout exports NEURALCORE_TEST_TLS_DIR, NEURALCORE_TEST_PG_TLS_URL
# (no password: tests take it from the password file) and NEURALCORE_TEST_REDIS_TLS_URL
# (no password either), so `eval "$(scripts/tls-servers.sh | tail -n1)"` sets them.
set -euo pipefail

CACHE="${NEURALCORE_CACHE:-/var/cache/neuralcore}"
DIR="$CACHE/tls"
PG_PORT="${NEURALCORE_TEST_PG_TLS_PORT:-5441}"
REDIS_PORT="${NEURALCORE_TEST_REDIS_TLS_PORT:-6391}"
PG_DATA="$CACHE/pgdata-tls"
PG_LOG="$CACHE/postgres-tls.log"
PG_BIN=/usr/lib/postgresql/15/bin
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
        printf '%s\n' "$HOST:$PG_PORT:*:postgres:$(cat pg-password)" > pgpass
        chmod 600 pg-password redis-password pgpass
        rm -f ./*.csr ./*.ext ./*.srl
    )
    touch "$DIR/ready"
}

pg_answers() {
    "$PG_BIN/pg_isready" -q -h "$HOST" -p "$PG_PORT" -t 2 2>/dev/null
}

start_pg() {
    if [[ ! -x "$PG_BIN/postgres" ]]; then
        log "installing Debian's postgresql-15 (a build with OpenSSL)"
        apt_install postgresql-15
    fi
    if pg_answers; then
        log "something already answers on $HOST:$PG_PORT"
        return
    fi
    if [[ "$(id -u)" == 0 ]] && ! getent passwd postgres >/dev/null; then
        useradd --system --home-dir "$PG_DATA" --shell /usr/sbin/nologin postgres
    fi
    mkdir -p "$PG_DATA"
    touch "$PG_LOG"
    if [[ "$(id -u)" == 0 ]]; then chown postgres: "$PG_DATA" "$PG_LOG"; fi
    chmod 700 "$PG_DATA"
    if [[ ! -f "$PG_DATA/PG_VERSION" ]]; then
        log "initdb $PG_DATA"
        as_postgres "$PG_BIN/initdb" -D "$PG_DATA" -A trust -U postgres -E UTF8 --no-locale >&2
        # The server's own copies, owned by it (PostgreSQL refuses a key others can read).
        cp "$DIR/server.pem" "$DIR/server.key" "$DIR/ca.pem" "$PG_DATA/"
        if [[ "$(id -u)" == 0 ]]; then chown postgres: "$PG_DATA"/server.* "$PG_DATA/ca.pem"; fi
        chmod 600 "$PG_DATA/server.key"
        cat >> "$PG_DATA/postgresql.conf" <<EOF
ssl = on
ssl_cert_file = 'server.pem'
ssl_key_file = 'server.key'
ssl_ca_file = 'ca.pem'
password_encryption = 'scram-sha-256'
EOF
        cat > "$PG_DATA/pg_hba.conf" <<EOF
local   all  all                   trust
hostssl all  nc_cert  $HOST/32    cert
hostssl all  all      $HOST/32    scram-sha-256
host    all  all      $HOST/32    reject
EOF
        NEW_CLUSTER=1
    fi
    log "starting PostgreSQL 15 with TLS on $HOST:$PG_PORT (log: $PG_LOG)"
    if ! as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -t 60 \
        -o "-c listen_addresses=$HOST -p $PG_PORT -k $PG_DATA" -w start >&2; then
        tail -n 30 "$PG_LOG" >&2 || true
        exit 1
    fi
    if [[ -n "${NEW_CLUSTER:-}" ]]; then
        as_postgres "$PG_BIN/psql" -q -h "$PG_DATA" -p "$PG_PORT" -U postgres -d postgres \
            -v ON_ERROR_STOP=1 >&2 <<EOF
ALTER ROLE postgres PASSWORD '$(cat "$DIR/pg-password")';
CREATE ROLE nc_cert LOGIN;
GRANT CREATE ON SCHEMA public TO nc_cert;
EOF
    fi
}

redis_answers() {
    redis-cli --tls --cacert "$DIR/ca.pem" -h "$HOST" -p "$REDIS_PORT" \
        --no-auth-warning -a "$(cat "$DIR/redis-password")" ping >/dev/null 2>&1
}

start_redis() {
    command -v redis-server >/dev/null || apt_install redis-server
    if redis_answers; then
        log "Redis with TLS already answers on $HOST:$REDIS_PORT"
        return
    fi
    local dir="$CACHE/redis-tls"
    mkdir -p "$dir"
    log "starting Redis with TLS on $HOST:$REDIS_PORT"
    # The password through the configuration on stdin, not the command line.
    printf '%s\n' "requirepass $(cat "$DIR/redis-password")" |
        redis-server - --bind "$HOST" --port 0 --tls-port "$REDIS_PORT" \
            --tls-cert-file "$DIR/server.pem" --tls-key-file "$DIR/server.key" \
            --tls-ca-cert-file "$DIR/ca.pem" --tls-auth-clients optional \
            --daemonize yes --dir "$dir" --save '' --appendonly no \
            --logfile "$dir/redis.log" >&2
    for _ in $(seq 50); do
        redis_answers && return
        sleep 0.1
    done
    log "Redis with TLS did not start; last lines of $dir/redis.log:"
    tail -n 20 "$dir/redis.log" >&2 || true
    exit 1
}

case "${1:-start}" in
start)
    make_certs
    start_pg
    start_redis
    echo "export NEURALCORE_TEST_TLS_DIR=$DIR NEURALCORE_TEST_PG_TLS_URL=postgres://postgres@$HOST:$PG_PORT/postgres NEURALCORE_TEST_REDIS_TLS_URL=rediss://$HOST:$REDIS_PORT/"
    ;;
stop)
    if [[ -f "$PG_DATA/postmaster.pid" ]]; then
        as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w stop >&2
    fi
    if redis_answers; then
        redis-cli --tls --cacert "$DIR/ca.pem" -h "$HOST" -p "$REDIS_PORT" \
            --no-auth-warning -a "$(cat "$DIR/redis-password")" shutdown nosave >&2 || true
    fi
    ;;
*)
    echo "usage: $0 [start|stop]" >&2
    exit 2
    ;;
esac
