#!/usr/bin/env bash
# Sourced by the GPU scripts: builds headroom-probe in build-gpu against PyTorch's CUDA LibTorch,
# with c10d's NCCL (nccl.h from PyTorch's nvidia-nccl wheel), logging to $1. Returns non-zero
# (and prints the log's tail) when the build fails.
gpu_nccl_root() {
    python3 - <<'PY'
import glob, os, site
hits = [p for d in site.getsitepackages() for p in glob.glob(d + "/nvidia/**/include/nccl.h", recursive=True)]
print(os.path.dirname(os.path.dirname(hits[0])) if hits else "")
PY
}
gpu_build_probe() {
    local log=$1 t0
    t0=$(date +%s.%N)
    export HEADROOM_GPU_CMAKE_ARGS="${HEADROOM_GPU_CMAKE_ARGS:--DHEADROOM_NCCL_ROOT=$(gpu_nccl_root)}"
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEADROOM_BUILD_GUI=OFF -DHEADROOM_BUILD_TESTS=OFF \
          -DHEADROOM_BUILD_BENCH=OFF -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')" \
          ${HEADROOM_GPU_CMAKE_ARGS:-} \
          > "$log" 2>&1 && cmake --build build-gpu --target headroom-probe >> "$log" 2>&1
    local rc=$?
    echo "build rc=$rc in $(python3 -c "import time;print(round(time.time()-$t0,1))") s"
    [ $rc -eq 0 ] || tail -40 "$log"
    return $rc
}
