// torch.optim.SGD: without momentum _foreach_add_(params, grads, alpha=-lr) in place and no state;
// with momentum a momentum_buffer per parameter, torch.clone(grad).detach() at its first step.
#include "../optimizer.h"

#include "headroom/error.h"

namespace headroom::sim {

namespace {
StateLayout state(const ParamShape &p, const TrainingConfig &c)
{
    StateLayout l;
    if (c.optimizer == Optimizer::SGDMomentum)
        l.add(checkedMul(p.numel, p.elem)); // momentum_buffer
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

const SimOptimizer &optimizer_sgd()
{
    static const SimOptimizer o{{Optimizer::SGD, Optimizer::SGDMomentum}, &step, &state, &noStepTemporaries};
    return o;
}

} // namespace headroom::sim
