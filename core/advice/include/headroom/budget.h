#pragma once

#include "headroom/catalog.h"
#include "headroom/estimator.h"
#include "headroom/support.h"

#include <functional>

namespace headroom {

enum class Fit { Fits, Tight, OOM };
std::string_view toString(Fit);

struct Verdict
{
    Fit fit = Fit::Fits;
    int64_t capacityBytes = 0; // the card less the driver's reservation (what processes can get)
    int64_t colocatedBytes = 0; // ... and less a colocated vLLM's share (GRPO), also out of capacity
    int64_t usableBytes = 0;   // that minus the reserve
    int64_t neededBytes = 0;   // device total (what nvidia-smi would show as Used)
    double reserve = 0.10;
    // The step's unbounded peak reserved passes the budget, yet it runs: at a failed cudaMalloc
    // the caching allocator frees its cached blocks and retries. This many retries per run.
    int64_t cacheFlushes = 0;
    int64_t unboundedBytes = 0; // then: the device total the cache would reach without the limit
    int64_t headroomBytes() const { return capacityBytes - neededBytes; }
    double headroomFraction() const
    {
        return capacityBytes > 0 ? static_cast<double>(headroomBytes()) / static_cast<double>(capacityBytes) : 0.0;
    }
};

// fits: needed <= usable; tight: within the reserve band; OOM: over the card.
// What processes can get of a card: its total (the catalog's, totalGlobalMem, nvidia-smi's Total)
// less what its driver keeps (nvidia-smi's Reserved); cudaMemGetInfo's total, the "total
// capacity" of PyTorch's OOM message.
int64_t processCapacityBytes(const GpuSpec &gpu, int64_t driverReservedBytes = EstimatorOptions{}.driverReservedBytes);

Verdict judge(const Estimate &e, const GpuSpec &gpu, double reserve = 0.10);
// The same, and where the peak reserved passes a limit, whether the run still completes: the
// simulated step is replayed through the allocator model with the limit as the device's memory,
// so the allocator frees its cache and retries as PyTorch's does before it raises an OOM.
Verdict judge(const ModelArch &m, const TrainingConfig &c, const Estimate &e, const GpuSpec &gpu,
              double reserve = 0.10, const EstimatorOptions &opt = {});

// "peak reserved would pass the budget; ..." for a verdict with cacheFlushes > 0 ("" otherwise).
std::string cacheFlushNote(const Verdict &v);

// Increase: the run fits, and this is how much more it can take (its savingBytes is negative:
// what it uses of the headroom).
enum class RecommendationGroup { Dynamic, Static, Sharding, Increase };
std::string_view toString(RecommendationGroup);

struct Recommendation
{
    RecommendationGroup group = RecommendationGroup::Dynamic;
    std::string id;          // micro-batch, checkpointing, shorter-seq, sdpa, lora, qlora, adamw-8bit, zero
    std::string title;       // "Micro-batch 2 x accumulation 4"
    std::string cost;        // "+20-40% step time"
    int64_t savingBytes = 0; // on the device total, per GPU
    bool fitsAfter = false;
    TrainingConfig config;   // the configuration with the change applied
};

// How far a configuration can grow on a card: its largest micro-batch and sequence length that
// fit (maxMicroBatch, maxSeqLen at multiples of 128), each searched at its first ask and kept, so
// that the card's notes, the micro-batch lever and the increases share one search. It refers to
// its arguments, which must outlive it.
class Room
{
public:
    Room(const ModelArch &m, const TrainingConfig &c, const GpuSpec &gpu, double reserve, const EstimatorOptions &opt)
        : m_m(m)
        , m_c(c)
        , m_gpu(gpu)
        , m_reserve(reserve)
        , m_opt(opt)
    {
    }
    int64_t microBatch() const;
    int64_t seqLen() const; // GRPO: 0 (each generated token is simulated: left to max-seq)

private:
    const ModelArch &m_m;
    const TrainingConfig &m_c;
    const GpuSpec &m_gpu;
    double m_reserve;
    const EstimatorOptions &m_opt;
    mutable int64_t m_microBatch = -1, m_seqLen = -1;
};

// Ordered as docs/seeds.md says: cut the dynamic peak first, then the static base, then shard.
// `room`: the configuration's Room on this card where the caller shares one (else one of its own).
std::vector<Recommendation> recommend(const ModelArch &m, const TrainingConfig &c, const GpuSpec &gpu,
                                      double reserve = 0.10, const EstimatorOptions &opt = {},
                                      const Room *room = nullptr);

// What to tell the user about this card and this run besides the verdict: bf16 on a card
// without it; when it fits, how far the micro-batch and the sequence can grow.
// `e` is the configuration's estimate with `opt`, as the caller already has it.
std::vector<std::string> cardNotes(const ModelArch &m, const TrainingConfig &c, const Estimate &e, const GpuSpec &gpu,
                                   double reserve = 0.10, const EstimatorOptions &opt = {}, const Room *room = nullptr);

// Largest micro-batch / sequence length that fits the usable memory (judge(m, c, ...) says Fits);
// 0 if none. The sequence length is a multiple of `multiple` (1: any).
int64_t maxMicroBatch(const ModelArch &m, const TrainingConfig &c, const GpuSpec &gpu, double reserve = 0.10,
                      const EstimatorOptions &opt = {});
int64_t maxSeqLen(const ModelArch &m, const TrainingConfig &c, const GpuSpec &gpu, double reserve = 0.10,
                  const EstimatorOptions &opt = {}, int64_t multiple = 1);

struct SweepRow
{
    TrainingConfig config;
    std::string grows; // what changed against the first row: "seq x2", "batch x4, checkpointing"
    Estimate estimate;
    Verdict verdict;
};

// Every combination of the given lists (empty list: the base value). `progress(done, total)`
// returning false cancels and returns the rows so far.
std::vector<SweepRow> sweep(const ModelArch &m, const TrainingConfig &base, const GpuSpec &gpu,
                            const std::vector<int64_t> &seqs, const std::vector<int64_t> &batches,
                            const std::vector<bool> &checkpointing, double reserve = 0.10,
                            const std::function<bool(size_t, size_t)> &progress = {},
                            const EstimatorOptions &opt = {});
std::string sweepMarkdown(const std::vector<SweepRow> &rows);
std::string sweepCsv(const std::vector<SweepRow> &rows);

// "12.5% headroom", "36.5% over the card", and past twice the card "4,589× the card".
std::string headroomPhrase(const Verdict &v);

// A parameter count as people say it, with the exact number: "8.03 B (8,030,261,248)",
// "124.4 M (124,439,808)", "12,345".
std::string formatParameterCount(int64_t n);
// A setting's number as a person writes it: "0.1", "32", "1e-05" (the shortest of six digits).
std::string formatSetting(double v);
// "12.34 GiB"; "1,000.00 GiB"; from 1,024 GiB on "1.50 TiB" (thousands grouped with commas).
std::string formatGiB(int64_t bytes, int decimals = 2);
// `bytes` in `base`-byte units, in the next unit up from `step` of them (GiB/TiB: 2^30, 1,024;
// GB/TB: 10^9, 1,000), thousands grouped with commas.
std::string formatScaled(int64_t bytes, int decimals, double base, double step, const char *unit, const char *bigUnit);

} // namespace headroom
