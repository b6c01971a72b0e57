#!/usr/bin/env bash
# The GPU check (docs/performance.md#the-gpu-check): on a CUDA machine, install what is missing, run the CUDA-relevant
# tests, measure (a) LoCoMo dense GPU vs CPU, (b) cross-encoder cascade / full pool, (c) exact top-10 at 1M (faiss-gpu
# or torch.topk vs torch), (d) mpnet fp32 vs fp16 encode, and print one table. Budget: under 8 minutes. Without CUDA
# (or with --cpu-fallback) it runs the same checks at small sizes on the CPU and says so.
#
#   scripts/gpu_check.sh                 # on the GPU machine, from the repository root
#   scripts/gpu_check.sh --cpu-fallback  # what the test suite runs here
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1} TQDM_DISABLE=1
FALLBACK=0
for arg in "$@"; do [ "$arg" = "--cpu-fallback" ] && FALLBACK=1; done
start=$(date +%s)

if [ "$FALLBACK" = 0 ] && "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "== CUDA: $("$PY" -c 'import torch; print(torch.cuda.get_device_name(0), "torch", torch.__version__)')"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
    if ! "$PY" -c "import faiss, sys; sys.exit(0 if faiss.get_num_gpus() > 0 else 1)" 2>/dev/null; then
        echo "== faiss has no GPU support: trying faiss-gpu-cu12 (offline machines keep faiss-cpu: (c) then uses torch.topk)"
        timeout 120 "$PY" -m pip install -q faiss-gpu-cu12 2>&1 | tail -2 || true
    fi
    echo "== tests on the device (search backends)"
    timeout 240 "$PY" -m pytest -q -x -m "not slow" tests/test_search.py tests/test_search_backends.py 2>&1 | tail -3
    timeout $((480 - ($(date +%s) - start))) "$PY" scripts/gpu_check.py
    status=$?
else
    echo "== no CUDA here: CPU fallback (small sizes; every GPU column is n/a)"
    timeout 420 "$PY" scripts/gpu_check.py --cpu-fallback
    status=$?
fi
echo "== gpu_check finished in $(( $(date +%s) - start )) s (status $status)"
exit $status
