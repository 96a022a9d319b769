// DistributedDataParallel over every rank (ddp.h): its gradient buckets, made at wrap and rebuilt
// once in the order the gradients became ready.
#include "ddp.h"

#include "headroom/error.h"

#include <algorithm>
#include <map>

namespace headroom::sim {

namespace {
// compute_bucket_assignment_by_size (reducer.cpp) over `order`: per dtype, tensors join the open
// bucket until it reaches the current limit (the first limit for a dtype's first bucket, the last
// one after); buckets sorted by their first tensor; one allocation each, in order.
std::vector<int> allocateBuckets(Sim &S, const std::vector<T *> &order, const std::vector<int64_t> &limits)
{
    struct Open
    {
        int64_t bytes = 0;
        size_t limit = 0;
        size_t first = 0;
    };
    std::map<int, Open> open;
    std::vector<std::pair<size_t, int64_t>> done; // (first tensor, bytes)
    for (size_t i = 0; i < order.size(); ++i) {
        Open &b = open[order[i]->elem];
        if (b.bytes == 0)
            b.first = i;
        b.bytes = checkedAdd(b.bytes, order[i]->bytes);
        if (b.bytes >= limits[std::min(b.limit, limits.size() - 1)]) {
            done.emplace_back(b.first, b.bytes);
            b.bytes = 0;
            ++b.limit;
        }
    }
    for (const auto &kv : open)
        if (kv.second.bytes > 0)
            done.emplace_back(kv.second.first, kv.second.bytes);
    std::sort(done.begin(), done.end());
    std::vector<int> out;
    for (const auto &d : done)
        out.push_back(S.allocate(d.second, Category::Communication));
    return out;
}
} // namespace

std::vector<T *> DataParallel::wrap(ParallelModel &model)
{
    trainable = model.trainable;
    S.setOp("ddp_buckets");
    buckets = allocateBuckets(S, trainable, {INT64_MAX});
    return optimizerShare(trainable);
}

// Reducer::rebuild_buckets, at the first forward after the first synchronized backward: the
// buckets again, with the 1 MiB first cap and bucket_cap_mb, over the parameters in the order
// their gradients became ready (the autograd engine's AccumulateGrad order); the old ones are
// freed first (initialize_buckets). Emitted at the end of step 0, just before step 1's forward
// mark, so that every steady step is the same program.
void DataParallel::afterZeroGrad(int step)
{
    if (step == 0 && !buckets.empty())
        rebuildBuckets();
}

void DataParallel::rebuildBuckets()
{
    // Each trainable parameter once, where its gradient first became ready; then the ones that
    // never did (unused), last first.
    std::vector<T *> pending(static_cast<size_t>(S.paramCount()), nullptr);
    for (T *p : trainable)
        pending[static_cast<size_t>(p->param)] = p;
    std::vector<T *> order;
    for (int pi : S.gradReadyOrder())
        if (T *&p = pending[static_cast<size_t>(pi)]) {
            order.push_back(p);
            p = nullptr;
        }
    for (auto it = trainable.rbegin(); it != trainable.rend(); ++it)
        if (pending[static_cast<size_t>((*it)->param)])
            order.push_back(*it);
    S.setOp("ddp_rebuild_buckets");
    S.setLayer(-1);
    for (int b : buckets)
        S.unref(b);
    buckets = allocateBuckets(S, order, {int64_t(1) << 20, opt.ddpBucketBytes});
}

const ParallelKind &parallel_ddp()
{
    static const ParallelKind k{
        "ddp", [](const TrainingConfig &c) { return c.zeroStage == 0 && c.worldSize > 1; },
        [](const ParallelContext &ctx) -> std::unique_ptr<ParallelStrategy> { return std::make_unique<DataParallel>(ctx); }};
    return k;
}

} // namespace headroom::sim
