#pragma once
// DistributedDataParallel (sim/parallel/ddp.cpp), which ZeRO-1 (zero1.cpp) runs under.
#include "../parallel.h"

namespace headroom::sim {

// See Note [DDP buckets] (docs/estimator.md).
// DistributedDataParallel (torch/nn/parallel/distributed.py, reducer.cpp), one flat bucket tensor
// per bucket in the gradients' dtype, kept for the run; the gradients are copied in, all-reduced
// and copied back in place (gradient_as_bucket_view False). Without find_unused_parameters the
// first iteration runs with one bucket per dtype (bucket_size_limits = [sys.maxsize] in
// _ddp_init_helper); at the next forward the Reducer rebuilds them in the order the gradients
// became ready (rebuildBuckets). Measured: two ranks sharing the H200, a 4.6 GiB bucket for
// Llama-3.2-1B amp freed at step 1's forward.
class DataParallel : public ParallelStrategy
{
public:
    explicit DataParallel(const ParallelContext &ctx) : S(ctx.S), c(ctx.config), opt(ctx.options) {}
    std::vector<T *> wrap(ParallelModel &model) override;
    void afterZeroGrad(int step) override;

protected:
    // What this rank's optimizer steps: every trainable parameter under plain DDP.
    virtual std::vector<T *> optimizerShare(const std::vector<T *> &trainable) { return trainable; }

    Sim &S;
    const TrainingConfig &c;
    const EstimatorOptions &opt;

private:
    void rebuildBuckets();
    std::vector<T *> trainable;
    std::vector<int> buckets; // the bucket storages
};

} // namespace headroom::sim
