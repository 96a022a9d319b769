// torch.optim.AdamW: exp_avg and exp_avg_sq per parameter in its dtype, made by _init_group at the
// first step (the fused implementation adds a device step counter). The foreach implementation
// (_multi_tensor_adam, the default on CUDA) makes one parameter-sized temporary per parameter
// (torch._foreach_sqrt(exp_avg_sqs)); the for-loop one two per parameter, one parameter at a time
// (denom = (exp_avg_sq.sqrt() / bc2).add_(eps)); the fused one works in place.
#include "../optimizer.h"

#include "headroom/error.h"

namespace headroom::sim {

namespace {
// exp_avg and exp_avg_sq, in the parameter's dtype.
StateLayout state(const ParamShape &p, const TrainingConfig &)
{
    StateLayout l;
    l.add(checkedMul(p.numel, p.elem));
    l.add(checkedMul(p.numel, p.elem));
    return l;
}

void step(OptimizerStep &o)
{
    Sim &S = o.S;
    const bool forLoop = o.config.optimizerImpl == OptimizerImpl::ForLoop;
    const bool fused = o.config.optimizerImpl == OptimizerImpl::Fused;
    if (o.first)
        for (T *p : o.params) {
            const PartScope part = paramPart(S, *p);
            if (fused)
                o.state.push_back(S.allocate(4, Category::OptimizerState)); // device step
            allocateState(o, state(shapeOf(*p), o.config));
        }
    if (fused)
        return; // _fused_adamw_: in place
    if (forLoop) {
        for (T *p : o.params) {
            const PartScope part = paramPart(S, *p);
            const int a = S.allocate(p->bytes, Category::Temporaries);
            const int d = S.allocate(p->bytes, Category::Temporaries);
            S.unref(a);
            S.unref(d);
        }
        return;
    }
    std::vector<int> tmp;
    for (T *p : o.params) {
        const PartScope part = paramPart(S, *p);
        tmp.push_back(S.allocate(p->bytes, Category::Temporaries));
    }
    // A Python list lets its items go from the last to the first.
    for (auto it = tmp.rbegin(); it != tmp.rend(); ++it)
        S.unref(*it);
}
} // namespace

const SimOptimizer &optimizer_adamw()
{
    static const SimOptimizer o{{Optimizer::AdamW}, &step, &state, &parameterSizedStepTemporaries};
    return o;
}

} // namespace headroom::sim
