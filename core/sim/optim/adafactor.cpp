// transformers.optimization.Adafactor (Trainer's kwargs: no first moment), one parameter at a
// time: grad.float(), p.float(), (grad**2)+eps, factored row/column means, the update from them,
// and p_data_fp32.add_(-update). Its state: the factored second moment (rows and columns of a
// matrix), or a whole one for a vector, in fp32.
#include "../optimizer.h"

#include "headroom/error.h"

namespace headroom::sim {

namespace {
// exp_avg_sq_row and exp_avg_sq_col for a matrix, exp_avg_sq for a vector: made from the
// gradient after grad.float(), so fp32 whatever the parameter's dtype.
StateLayout state(const ParamShape &p, const TrainingConfig &)
{
    StateLayout l;
    if (p.cols > 1) {
        l.add(checkedMul(p.rows, 4));
        l.add(checkedMul(p.cols, 4));
    } else {
        l.add(checkedMul(p.numel, 4));
    }
    return l;
}

void step(OptimizerStep &o)
{
    Sim &S = o.S;
    int prevUpdate = -1;
    for (T *p : o.params) {
        const PartScope part = paramPart(S, *p);
        const int64_t n = p->numel();
        const bool low = p->elem != 4;
        const int gf = low ? S.allocate(n * 4, Category::Temporaries) : -1;
        S.unref(prevUpdate); // the last parameter's `update` goes when the name is rebound
        prevUpdate = -1;
        // factored for matrices: rows and columns of the gradient's last two dimensions
        const bool factored = p->cols > 1;
        const int64_t cols = p->cols;
        const int64_t rows = p->rows;
        if (o.first)
            allocateState(o, state(shapeOf(*p), o.config));
        const int pf = low ? S.allocate(n * 4, Category::Temporaries) : -1;
        const int sq = S.allocate(n * 4, Category::Temporaries);  // grad ** 2
        const int upd = S.allocate(n * 4, Category::Temporaries); // + eps
        S.unref(sq);
        int update = upd;
        if (factored) {
            const int rm = S.allocate(rows * 4, Category::Temporaries); // update.mean(-1)
            S.unref(rm);
            const int cm = S.allocate(cols * 4, Category::Temporaries); // update.mean(-2)
            S.unref(cm);
            const int rf = S.allocate(rows * 4, Category::Temporaries); // r_factor
            const int cf = S.allocate(cols * 4, Category::Temporaries); // c_factor
            const int approx = S.allocate(n * 4, Category::Temporaries);
            S.unref(rf);
            S.unref(cf);
            S.unref(upd);
            update = approx;
        } else {
            const int rs = S.allocate(n * 4, Category::Temporaries); // exp_avg_sq.rsqrt()
            S.unref(upd);
            update = rs;
        }
        const int neg = S.allocate(n * 4, Category::Temporaries); // -update
        S.unref(neg);
        S.unref(pf);
        S.unref(gf);
        prevUpdate = update;
    }
    S.unref(prevUpdate);
}
} // namespace

const SimOptimizer &optimizer_adafactor()
{
    static const SimOptimizer o{{Optimizer::Adafactor}, &step, &state, &parameterSizedStepTemporaries};
    return o;
}

} // namespace headroom::sim
