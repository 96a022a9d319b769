// bitsandbytes Lion (Optimizer1State, 32-bit): state1 in fp32 for every parameter
// (get_state_buffer(p, dtype=torch.float32)), made at its first step; the update kernel runs in
// place.
#include "../optimizer.h"

#include "headroom/error.h"

namespace headroom::sim {

namespace {
StateLayout state(const ParamShape &p, const TrainingConfig &)
{
    StateLayout l;
    l.add(checkedMul(p.numel, 4));
    return l;
}

void step(OptimizerStep &o)
{
    if (o.first)
        for (T *p : o.params) {
            const PartScope part = paramPart(o.S, *p);
            allocateState(o, state(shapeOf(*p), o.config));
        }
}
} // namespace

const SimOptimizer &optimizer_lion()
{
    static const SimOptimizer o{{Optimizer::Lion}, &step, &state, &noStepTemporaries};
    return o;
}

} // namespace headroom::sim
