// One GPU, no wrapper: the optimizer steps every trainable parameter, nothing else is allocated.
#include "../parallel.h"

namespace headroom::sim {

namespace {
class Single final : public ParallelStrategy
{
public:
    std::vector<T *> wrap(ParallelModel &model) override { return model.trainable; }
    bool ownGradients() const override { return true; }
};
} // namespace

const ParallelKind &parallel_single()
{
    static const ParallelKind k{
        "single", [](const TrainingConfig &c) { return c.zeroStage == 0 && c.worldSize <= 1; },
        [](const ParallelContext &) -> std::unique_ptr<ParallelStrategy> { return std::make_unique<Single>(); }};
    return k;
}

} // namespace headroom::sim
