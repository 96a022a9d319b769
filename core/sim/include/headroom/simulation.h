#pragma once
// A training run as Hugging Face Trainer runs it, written against the autograd simulator: the
// model built on the GPU, then for each step every micro-batch's forward and backward, the
// optimizer step and zero_grad. The result is the run's allocation timeline.

#include "headroom/allocator.h"
#include "headroom/model.h"
#include "headroom/timeline.h"
#include "headroom/types.h"

namespace headroom {

// Constants that come from measurement rather than from an op. Defaults: H200, CUDA 13.0,
// driver 580, PyTorch 2.11 (tests/data/hf_reference_h200.json).
struct EstimatorOptions
{
    // See Note [Outside the allocator] (docs/estimator.md).
    // What the device holds outside PyTorch's allocator, in two measured terms:
    // - the CUDA context and what the process loads lazily (kernel modules, cuBLAS/cuBLASLt
    //   handles), device-wide: device used (cudaMemGetInfo) - reserved. On the corpus runs
    //   (tests/data/corpus, NVML's process table): 742 MiB with eager attention or fp32, 758 MiB
    //   once bf16 SDPA's fused kernels load, 760 MiB with MoE's grouped GEMM too; the driver
    //   keeps 8.8 MiB more device-wide (the one corpus run alone on the GPU; the LibTorch
    //   probe's 767 MiB in tests/data/h200/nccl-ws1/*plain* is 758 + 8.8). The largest: 760 + 8.8.
    int64_t cudaContextBytes = 806158336;
    // - what the driver keeps of the card for itself: the catalog's memory is the card's total
    //   (cudaDeviceProp::totalGlobalMem, nvidia-smi's Total), cudaMemGetInfo's total is 615 MiB
    //   less on the H200 with driver 580 (every phase of every corpus run; nvidia-smi's Reserved,
    //   616 MiB, tests/data/h200/smi-2026-12-02). No process gets it.
    int64_t driverReservedBytes = 644939776;
    // cuBLAS's workspace on Hopper (CUBLAS_WORKSPACE_CONFIG :4096:8), per handle: one for the
    // forward thread, one for autograd's backward thread; allocated at each's first matmul, kept.
    int64_t cublasWorkspaceBytes = 33554432;
    // cuBLASLt's workspace (CUBLASLT_WORKSPACE_SIZE, 1 MiB by default): addmm with a 1-D bias runs
    // as cublasLt's gemm with a bias epilogue, which takes it at the forward's first biased Linear
    // and keeps it (H200 streams: Qwen2, StarCoder2, GPT-2, Phi; the bias gradients are row sums,
    // so backward never asks for one).
    int64_t cublasLtWorkspaceBytes = 1048576;
    // NCCL's communicator outside PyTorch's allocator: device used - reserved, probe with c10d's
    // NCCL at world size 1 minus the same run in one plain process, H200, NCCL 2.28.9
    // (tests/data/h200/nccl-ws1/). Its per-peer buffers at N > 1 are not measured yet.
    int64_t ncclCommunicatorBytes = 585105408; // 558 MiB
    double allocatorSlackFraction = 0.0;     // <= 0: use the measured default (see estimate/estimator.cpp)
    int64_t ddpBucketBytes = 25 * 1048576;   // DDP bucket_cap_mb default
    AllocatorConfig allocator;               // PYTORCH_CUDA_ALLOC_CONF the run will use
    // Collectives over Gloo (ranks sharing one GPU, as the corpus measures several ranks on one
    // H200): Gloo's all_gather_into_tensor and reduce_scatter_tensor make a full-size temporary
    // per call on a stream of their own, which NCCL's in-place collectives do not.
    bool glooCollectives = false;
    // Use the per-op ledger even where the step is simulated: to compare a configuration that
    // only the ledger covers (FSDP, offload, QLoRA) with the same mechanism on both sides.
    bool ledgerOnly = false;
};

// Rows per chunk of a fused linear cross-entropy, as Liger sizes them
// (liger_kernel/ops/fused_linear_cross_entropy.py): next_pow2(ceil(tokens / ceil(vocab / hidden))),
// at most tokens; about tokens x hidden logits at a time.
int64_t fusedLossChunkRows(int64_t tokens, int64_t hidden, int64_t vocab);

// What an optimizer keeps for one parameter tensor of [rows, cols] (cols 1 for a vector) stored in
// `elem` bytes per value, as its file in core/sim/optim/ lays the state out (the simulated step
// allocates the same tensors): on the device through the allocator, and in CUDA managed memory
// (bitsandbytes' paged optimizers).
struct OptimizerStateBytes
{
    int64_t device = 0;
    int64_t paged = 0;
};
OptimizerStateBytes optimizerStateBytes(const TrainingConfig &config, int64_t rows, int64_t cols, int elem);
// The optimizer step's largest live temporaries over the trainable tensors (the per-op ledger).
int64_t optimizerStepTemporaryBytes(const TrainingConfig &config, int64_t largestTrainableBytes, int64_t trainableBytes);

// Simulates warm-up step 0 and `measuredSteps` steps after it (the probe's default is 2).
Timeline simulateRun(const ModelArch &model, const TrainingConfig &config, const EstimatorOptions &options,
                     int measuredSteps = 2);

// The run as the engine measures it (a warm-up and two steady steps) for the allocator replay:
// one simulated steady step and a copy of it (repeatLastStep) when it is closed; otherwise both
// steps simulated.
Timeline simulateMeasuredRun(const ModelArch &model, const TrainingConfig &config, const EstimatorOptions &options);

} // namespace headroom
