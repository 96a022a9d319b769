// bitsandbytes AdamW8bit and PagedAdamW8bit (Optimizer2State.init_state at the parameter's first
// step): uint8 moments and fp32 absmax per 256 values (fp32 moments under min_8bit_size = 4096).
// Paged, the moments of tensors of 1e5 values or more are CUDA managed memory (F.get_paged), not
// the allocator's: only their absmax are allocated here. Each is its own tensor: state1, state2,
// then absmax1, absmax2. The first 8-bit parameter moves the two 256-entry fp32 quantization maps
// to the device (name2qmap). The update kernel runs in place.
#include "../optimizer.h"

namespace headroom::sim {

namespace {
void step(OptimizerStep &o)
{
    if (!o.first)
        return;
    Sim &S = o.S;
    bool maps = false;
    for (T *p : o.params) {
        const int64_t n = p->numel(), absmax = ((n + 255) / 256) * 4;
        if (n >= 4096 && !maps) {
            o.state.push_back(S.allocate(256 * 4, Category::OptimizerState));
            o.state.push_back(S.allocate(256 * 4, Category::OptimizerState));
            maps = true;
        }
        const bool paged = o.config.optimizer == Optimizer::PagedAdamW8bit && n >= 100000;
        if (n < 4096) {
            o.state.push_back(S.allocate(n * 4, Category::OptimizerState));
            o.state.push_back(S.allocate(n * 4, Category::OptimizerState));
            continue;
        }
        if (!paged) {
            o.state.push_back(S.allocate(n, Category::OptimizerState));
            o.state.push_back(S.allocate(n, Category::OptimizerState));
        }
        o.state.push_back(S.allocate(absmax, Category::OptimizerState));
        o.state.push_back(S.allocate(absmax, Category::OptimizerState));
    }
}
} // namespace

const SimOptimizer &optimizer_adamw_8bit()
{
    static const SimOptimizer o{{Optimizer::AdamW8bit, Optimizer::PagedAdamW8bit}, &step};
    return o;
}

} // namespace headroom::sim
