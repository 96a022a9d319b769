// bitsandbytes AdamW8bit and PagedAdamW8bit (Optimizer2State.init_state at the parameter's first
// step): uint8 moments and fp32 absmax per 256 values (fp32 moments under min_8bit_size = 4096).
// Paged, the moments of tensors of 1e5 values or more are CUDA managed memory (F.get_paged), not
// the allocator's: only their absmax are allocated here. Each is its own tensor: state1, state2,
// then absmax1, absmax2. The first 8-bit parameter moves the two 256-entry fp32 quantization maps
// to the device (name2qmap). The update kernel runs in place.
#include "../optimizer.h"

#include "headroom/error.h"

namespace headroom::sim {

namespace {
StateLayout state(const ParamShape &p, const TrainingConfig &c)
{
    StateLayout l;
    const int64_t n = p.numel, absmax = ((n + 255) / 256) * 4;
    if (n < 4096) {
        l.add(checkedMul(n, 4));
        l.add(checkedMul(n, 4));
        return l;
    }
    if (c.optimizer == Optimizer::PagedAdamW8bit && n >= 100000) {
        l.pagedBytes = checkedMul(n, 2);
    } else {
        l.add(n);
        l.add(n);
    }
    l.add(absmax);
    l.add(absmax);
    return l;
}

void step(OptimizerStep &o)
{
    if (!o.first)
        return;
    bool maps = false;
    for (T *p : o.params) {
        const PartScope part = paramPart(o.S, *p);
        if (p->numel() >= 4096 && !maps) {
            o.state.push_back(o.S.allocate(256 * 4, Category::OptimizerState));
            o.state.push_back(o.S.allocate(256 * 4, Category::OptimizerState));
            maps = true;
        }
        allocateState(o, state(shapeOf(*p), o.config));
    }
}
} // namespace

const SimOptimizer &optimizer_adamw_8bit()
{
    static const SimOptimizer o{{Optimizer::AdamW8bit, Optimizer::PagedAdamW8bit}, &step, &state, &noStepTemporaries};
    return o;
}

} // namespace headroom::sim
