// torch.optim.SGD: without momentum _foreach_add_(params, grads, alpha=-lr) in place and no state;
// with momentum a momentum_buffer per parameter, torch.clone(grad).detach() at its first step.
#include "../optimizer.h"

namespace headroom::sim {

namespace {
void step(OptimizerStep &o)
{
    if (o.config.optimizer != Optimizer::SGDMomentum || !o.first)
        return;
    for (T *p : o.params)
        o.state.push_back(o.S.allocate(p->bytes, Category::OptimizerState));
}
} // namespace

const SimOptimizer &optimizer_sgd()
{
    static const SimOptimizer o{{Optimizer::SGD, Optimizer::SGDMomentum}, &step};
    return o;
}

} // namespace headroom::sim
