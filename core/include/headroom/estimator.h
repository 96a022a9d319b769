#pragma once

#include "headroom/allocator.h"
#include "headroom/model.h"
#include "headroom/timeline.h"
#include "headroom/types.h"

namespace headroom {

struct Breakdown
{
    std::array<int64_t, kCategoryCount> bytes{};

    int64_t &operator[](Category c) { return bytes[static_cast<size_t>(c)]; }
    int64_t operator[](Category c) const { return bytes[static_cast<size_t>(c)]; }
    int64_t total() const;
    // What PyTorch's caching allocator hands out: all but slack and the CUDA context.
    int64_t allocated() const;
};

struct PhaseEstimate
{
    Phase phase = Phase::AfterLoad;
    int64_t peakAllocatedBytes = 0;
    // What the caching allocator holds at most during the phase (its peak since the phase began,
    // as torch.cuda.max_memory_reserved after reset_peak_memory_stats); 0 from the ledger path.
    int64_t peakReservedBytes = 0;
    Breakdown atPeak; // allocated categories at this phase's peak
};

struct ParamSummary
{
    int64_t total = 0;
    int64_t trainable = 0;
    int64_t weightBytes = 0;
    int64_t gradientBytes = 0;
    int64_t optimizerStateBytes = 0;
    int64_t largestTrainableBytes = 0;
    int64_t hostOptimizerStateBytes = 0; // offloaded to the CPU (per rank), not on the GPU
    // bitsandbytes paged optimizers: state in CUDA managed memory (cudaMallocManaged), outside
    // PyTorch's allocator; resident on the GPU while there is room, paged to host RAM under
    // pressure. Not in optimizerStateBytes, allocated or reserved.
    int64_t pagedOptimizerStateBytes = 0;
};

// Constants that come from measurement rather than from an op. Defaults: H200, CUDA 13.0,
// driver 580, PyTorch 2.11 (tests/data/hf_reference_h200.json).
struct EstimatorOptions
{
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
    // NCCL's communicator outside PyTorch's allocator: device used - reserved, probe with c10d's
    // NCCL at world size 1 minus the same run in one plain process, H200, NCCL 2.28.9
    // (tests/data/h200/nccl-ws1/). Its per-peer buffers at N > 1 are not measured yet.
    int64_t ncclCommunicatorBytes = 585105408; // 558 MiB
    double allocatorSlackFraction = 0.0;     // <= 0: use the measured default (see estimator.cpp)
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

// Whether estimate() simulates this configuration op by op (one GPU, DDP, ZeRO-1, FSDP2), or
// uses the per-op ledger (optimizer offload, QLoRA under FSDP).
bool isSimulated(const TrainingConfig &config);

struct Estimate
{
    ParamSummary params;
    std::array<PhaseEstimate, 4> phases;
    Phase peakPhase = Phase::Forward;
    Breakdown peak;                 // at the overall peak, slack and context included
    int64_t peakAllocatedBytes = 0; // torch.cuda.max_memory_allocated
    int64_t peakReservedBytes = 0;  // torch.cuda.max_memory_reserved
    // What nvidia-smi shows as Used: peak reserved + the CUDA context (+ NCCL's communicator).
    int64_t deviceTotalBytes = 0;
    // What the driver keeps of the card (nvidia-smi's Reserved): the verdict's capacity is the
    // card's total less this, PyTorch's "total capacity" in its OOM message.
    int64_t driverReservedBytes = 0;
    int64_t tokens = 0;
    std::vector<std::string> notes; // mechanisms in play worth telling the user

    const PhaseEstimate &phase(Phase p) const { return phases[static_cast<size_t>(p)]; }
};

// Per-GPU estimate of one steady-state training step (after the first optimizer step).
// Throws InputError for an invalid model or configuration.
Estimate estimate(const ModelArch &model, const TrainingConfig &config, const EstimatorOptions &options = {});

// The run the estimate is made from: every allocation and free of loading the model, the warm-up
// step and `steadySteps` steady steps (1..8), in order (for the Timeline view and the allocator
// replay; the estimate replays a second steady step as repeatLastStep copies it).
Timeline estimateTimeline(const ModelArch &model, const TrainingConfig &config, const EstimatorOptions &options = {},
                          int steadySteps = 1);

// Rows per chunk of a fused linear cross-entropy, as Liger sizes them
// (liger_kernel/ops/fused_linear_cross_entropy.py): next_pow2(ceil(tokens / ceil(vocab / hidden))),
// at most tokens; about tokens x hidden logits at a time.
int64_t fusedLossChunkRows(int64_t tokens, int64_t hidden, int64_t vocab);

} // namespace headroom
