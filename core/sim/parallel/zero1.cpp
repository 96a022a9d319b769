// ZeRO-1 as PyTorch runs it: DDP (ddp.h) with ZeroRedundancyOptimizer, at any world size
// (measured at one NCCL rank: DDP's buckets and all the state, tests/data/h200/fsdp-ws1-2026-12-02).
// The optimizer steps this rank's share only, parameters assigned largest first to the
// least-loaded rank (_partition_parameters); the estimate takes the rank with the most, and the
// updated parameters are broadcast in place.
// See Note [DDP buckets] (docs/estimator.md).
#include "ddp.h"

#include <algorithm>

namespace headroom::sim {

namespace {
class ZeroRedundancy final : public DataParallel
{
public:
    using DataParallel::DataParallel;

private:
    std::vector<T *> optimizerShare(const std::vector<T *> &trainable) override
    {
        std::vector<T *> bySize = trainable;
        std::stable_sort(bySize.begin(), bySize.end(), [](const T *a, const T *b) { return a->numel() > b->numel(); });
        const size_t ranks = static_cast<size_t>(std::max(1, c.worldSize));
        std::vector<int64_t> load(ranks, 0);
        std::vector<std::vector<T *>> share(ranks);
        for (T *p : bySize) {
            const size_t r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
            load[r] += p->numel();
            share[r].push_back(p);
        }
        const size_t most = static_cast<size_t>(std::max_element(load.begin(), load.end()) - load.begin());
        // The local optimizer is built over the rank's partition as it was filled: largest first
        // (measured: its AdamW state is allocated in that order, the MLP weights before the rest).
        return share[most];
    }
};
} // namespace

const ParallelKind &parallel_zero1()
{
    static const ParallelKind k{
        "zero1", [](const TrainingConfig &c) { return c.zeroStage == 1; },
        [](const ParallelContext &ctx) -> std::unique_ptr<ParallelStrategy> { return std::make_unique<ZeroRedundancy>(ctx); }};
    return k;
}

} // namespace headroom::sim
