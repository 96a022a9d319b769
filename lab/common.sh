# Shared by the lab plans (lab/*.sh) and lab/run (source it).
# The machine and the stack a result came from: date, the GPU and its driver, Python, torch,
# Transformers and PEFT versions.
gpu_header() {
    date -u
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
    python3 -c "import sys, torch, transformers, peft; print(sys.version.split()[0], torch.__version__, transformers.__version__, peft.__version__)"
}
