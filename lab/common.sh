# Shared by the lab plans (lab/*.sh) and lab/run (source it).
# The machine and the stack a result came from: date, the GPU and its driver, Python, torch,
# Transformers and PEFT versions.
gpu_header() {
    date -u
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
    python3 -c "import sys, torch, transformers, peft; print(sys.version.split()[0], torch.__version__, transformers.__version__, peft.__version__)"
}

# bitsandbytes from the carried build-bnb/ source tree (lab/bnb.sh says how it is laid out), built
# for the H200 (sm_90) and put first on PYTHONPATH; the build's output in $1. Returns non-zero if
# the build fails.
build_bnb() {
    (cd build-bnb && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOMPUTE_BACKEND=cuda \
        -DCOMPUTE_CAPABILITY=90 -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc && cmake --build build -j16) >"$1" 2>&1 ||
        return 1
    export PYTHONPATH="$PWD/build-bnb${PYTHONPATH:+:$PYTHONPATH}"
}
