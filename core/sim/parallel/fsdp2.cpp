// See Note [FSDP2 streams] (docs/estimator.md).
// FSDP2 (fully_shard on each decoder layer, then on the model: torch/distributed/fsdp/
// _fully_shard, PyTorch 2.11), as the transformers engine wraps a run for ZeRO-2/3. Measured per
// CUDA stream with two ranks sharing the H200 (tests/data/h200/streams-2026-12-02).
#include "../parallel.h"

#include "headroom/error.h"

#include <map>

namespace headroom::sim {

namespace {

// CUDA streams as the allocator keys its blocks: the all-gathers run on one side stream, the
// reduce-scatters on another, and Gloo makes its own temporaries on a third.
constexpr int kAllGatherStream = 1, kGlooStream = 2, kReduceScatterStream = 3;

// An identity autograd node whose backward runs `hook` first (FSDP2's pre-backward hook on a
// unit's output, and RegisterPostBackwardFunction on its input); no-op where no grad flows.
T backwardHook(Sim &S, T &x, std::function<void()> hook)
{
    T y = S.view(x);
    S.record({&y}, {&x}, {}, [hook](Sim &sim, const std::vector<int> &g, const std::vector<bool> &) {
        hook();
        sim.ref(g.empty() ? -1 : g[0]);
        return std::vector<int>{g.empty() ? -1 : g[0]};
    });
    S.drop(x);
    return y;
}

class FullyShard final : public ParallelStrategy
{
public:
    explicit FullyShard(const ParallelContext &ctx)
        : S(ctx.S)
        , c(ctx.config)
        , opt(ctx.options)
        , mixedPolicy(isAmp(ctx.config.precision))
    {
    }

    bool buildsOnHost() const override { return true; }
    // With MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) the fp32 model is sharded
    // in fp32, each unit gathered in bf16 and its inputs cast to bf16 (cast_forward_inputs): the
    // step runs as pure bf16, autocast finds nothing to cast. The gradients are reduce-scattered
    // in fp32; the sharded state stays fp32.
    bool replacesAutocast(bool amp) const override { return amp; }
    std::vector<T *> wrap(ParallelModel &model) override;

    void rootForward() override { preForward(0); }
    void layerInput(size_t unit, T &x) override
    {
        preForward(unit);
        x = backwardHook(S, x, [this, unit] { postBackward(unit, false); });
    }
    void layerOutput(size_t unit, T &y) override
    {
        if (c.zeroStage >= 3) // post_forward: reshard_after_forward
            reshard(units[unit]);
        y = backwardHook(S, y, [this, unit] { preBackward(unit); });
    }
    void forwardDone() override
    {
        if (c.zeroStage >= 3) // the root's post_forward reshards it too
            reshard(units[0]);
    }
    void beforeBackward(bool sync) override;
    void afterBackward() override;
    void afterZeroGrad(int) override
    {
        for (int g : shardedGrads) // the reduce-scatter outputs are the sharded .grad
            S.unref(g);
        shardedGrads.clear();
    }

private:
    struct Unit
    {
        std::vector<T *> params;  // model.parameters() order within the unit
        std::vector<T> shards;    // this rank's padded Shard(0) of each (what its optimizer steps)
        int64_t gatherBytes = 0;  // the all-gather output: world size x the padded shards
        int64_t reduceBytes = 0;  // the reduce-scatter input: the same over parameters with grads
        int agOut = -1;           // an all-gather output not copied out yet (a prefetch)
        bool unsharded = false;
        bool postBackwardDone = false;
    };

    int64_t ranks() const { return std::max<int64_t>(1, c.worldSize); } // N, the shards per parameter
    void shardUnit(Unit &u, int layer, std::vector<T> *buffers);
    void unshard(Unit &u);
    void copyOut(Unit &u);
    void reshard(Unit &u);
    void releaseGlooTemps();
    void preForward(size_t k);
    void preBackward(size_t k);
    void postBackward(size_t k, bool finalCallback);

    Sim &S;
    const TrainingConfig &c;
    const EstimatorOptions &opt;
    const bool mixedPolicy;
    std::vector<Unit> units; // [0] the root (embeddings, final norm, lm_head), then the layers
    int agState = -1;        // comm_ctx.all_gather_state: the forward's last all-gather output
    int rsState = -1;        // comm_ctx.reduce_scatter_state: the last reduce-scatter input
    std::vector<int> glooTemps; // Gloo's reduce-scatter temporaries not yet released
    std::vector<int> shardedGrads;
    bool syncGrads = true; // the micro-batch that reduce-scatters (no_sync before it)
};

// fully_shard(layer) for every decoder layer, then fully_shard(model) (accelerate's and the
// engine's order) on a model built on the CPU: each call moves its unit's parameters to the GPU,
// then each becomes a Shard(0) DTensor whose local tensor is padded to ceil(rows / N) rows
// (_fsdp_param.py _init_sharded_param), then the whole ones are freed (measured, unit by unit,
// tests/data/h200/fsdp-2026-12-02). Under the mixed-precision policy the shards stay fp32 and the
// parameters are gathered in bf16.
std::vector<T *> FullyShard::wrap(ParallelModel &model)
{
    units.resize(model.units.size());
    for (size_t k = 0; k < units.size(); ++k)
        units[k].params = model.units[k];
    for (size_t k = 1; k < units.size(); ++k)
        shardUnit(units[k], static_cast<int>(k - 1), nullptr);
    shardUnit(units[0], -1, model.buffers);
    S.setLayer(-1);
    std::map<const T *, T *> shardOf;
    for (Unit &u : units)
        for (size_t i = 0; i < u.params.size(); ++i)
            shardOf[u.params[i]] = &u.shards[i];
    std::vector<T *> stepped;
    for (T *t : model.trainable)
        stepped.push_back(shardOf.at(t));
    return stepped;
}

void FullyShard::shardUnit(Unit &u, int layer, std::vector<T> *buffers)
{
    const int64_t N = ranks();
    S.setLayer(layer);
    S.setOp("fully_shard");
    // _move_states_to_device: the unit's parameters (and, for the root, the model's buffers) to
    // the GPU whole; then a shard of each; then the whole ones go.
    for (T *p : u.params)
        S.restore(p->sto);
    if (buffers)
        for (T &b : *buffers)
            S.restore(b.sto);
    u.shards.reserve(u.params.size());
    for (T *p : u.params) {
        const int64_t rows = p->rows > 0 ? p->rows : p->numel(), cols = p->cols > 0 ? p->cols : 1;
        const int64_t chunk = (rows + N - 1) / N, numel = checkedMul(chunk, cols);
        T sh = S.make(checkedMul(numel, p->elem), p->elem, Category::Weights);
        sh.rows = chunk;
        sh.cols = cols;
        sh.requiresGrad = p->requiresGrad;
        u.shards.push_back(sh);
        const int gatherElem = mixedPolicy ? 2 : p->elem;
        u.gatherBytes = checkedAdd(u.gatherBytes, checkedMul(checkedMul(numel, gatherElem), N));
        if (p->requiresGrad)
            u.reduceBytes = checkedAdd(u.reduceBytes, checkedMul(checkedMul(numel, mixedPolicy ? 4 : p->elem), N));
    }
    for (T *p : u.params)
        S.release(p->sto);
    if (mixedPolicy)
        for (T *p : u.params) { // the unsharded parameter is param_dtype (bf16)
            p->bytes = checkedMul(p->numel(), 2);
            p->elem = 2;
            S.resize(p->sto, p->bytes);
        }
}

// FSDPParamGroup.unshard: the all-gather into one flat output on the all-gather stream
// (_fsdp_collectives.py foreach_all_gather; Gloo adds a temporary of its size on its own).
void FullyShard::unshard(Unit &u)
{
    if (u.unsharded || u.agOut >= 0)
        return;
    // At one rank there is nothing to gather: the copy-out reads the shard (measured over NCCL at
    // world size 1, tests/data/h200/fsdp-ws1-2026-12-02: no all-gather buffer).
    if (c.worldSize <= 1)
        return;
    S.setOp("fsdp_all_gather");
    S.setStream(kAllGatherStream);
    // Under the mixed-precision policy each shard is first cast to bf16 into one flat input
    // (_fsdp_collectives.py _get_param_all_gather_inputs), freed once the all-gather is out.
    const int64_t N = ranks();
    const int cast = mixedPolicy ? S.allocate(u.gatherBytes / N, Category::Communication) : -1;
    u.agOut = S.allocate(u.gatherBytes, Category::Communication);
    if (opt.glooCollectives) {
        S.setStream(kGlooStream);
        S.unref(S.allocate(u.gatherBytes, Category::Communication));
    }
    S.unref(cast);
    S.setStream(0);
    releaseGlooTemps(); // Gloo lets its last reduce-scatter temporary go at the next collective
}

// wait_for_unshard's copy-out: each parameter's unsharded storage, in order (alloc_storage).
void FullyShard::copyOut(Unit &u)
{
    if (u.unsharded)
        return;
    S.setOp("fsdp_copy_out");
    for (T *p : u.params)
        S.restore(p->sto);
    u.unsharded = true;
}

// FSDPParamGroup.reshard: storage().resize_(0) of every unsharded parameter.
void FullyShard::reshard(Unit &u)
{
    if (!u.unsharded)
        return;
    S.setOp("fsdp_reshard");
    for (T *p : u.params)
        S.release(p->sto);
    u.unsharded = false;
}

void FullyShard::releaseGlooTemps()
{
    for (auto it = glooTemps.rbegin(); it != glooTemps.rend(); ++it)
        S.unref(*it);
    glooTemps.clear();
}

// pre_forward: unshard and copy out; the previous unit's all-gather output goes once this unit's
// copy-out is done (the forward keeps one in comm_ctx.all_gather_state).
void FullyShard::preForward(size_t k)
{
    Unit &u = units[k];
    unshard(u);
    copyOut(u);
    if (agState >= 0)
        S.unref(agState);
    agState = u.agOut;
    u.agOut = -1;
}

// The root's pre-backward (a hook on the loss): the forward's last all-gather output goes, the
// root is gathered again (ZeRO-3), the last layer prefetched, then the root's output freed.
void FullyShard::beforeBackward(bool sync)
{
    syncGrads = sync;
    for (Unit &u : units)
        u.postBackwardDone = false;
    S.setLayer(-1);
    if (agState >= 0)
        S.unref(agState);
    agState = -1;
    Unit &root = units[0];
    unshard(root);
    copyOut(root);
    if (units.size() > 1)
        unshard(units.back());
    if (root.agOut >= 0)
        S.unref(root.agOut);
    root.agOut = -1;
}

// A layer's pre-backward (a hook on its output): copy out the prefetched all-gather, free it,
// prefetch the next layer in backward order.
void FullyShard::preBackward(size_t k)
{
    Unit &u = units[k];
    unshard(u);
    copyOut(u);
    if (u.agOut >= 0)
        S.unref(u.agOut);
    u.agOut = -1;
    if (k > 1)
        unshard(units[k - 1]);
    S.setOp("backward");
}

// post_backward (RegisterPostBackwardFunction on the unit's inputs, or the final callback):
// reshard; then, where gradients sync, the previous reduce-scatter input goes, the new one (N x
// the shards, in reduce_dtype) is made on the default stream from the unsharded gradients, which
// are freed, and the reduce-scatter output, the sharded .grad, is made on the reduce-scatter
// stream and kept until zero_grad (_fsdp_collectives.py foreach_reduce).
void FullyShard::postBackward(size_t k, bool finalCallback)
{
    Unit &u = units[k];
    if (u.postBackwardDone)
        return;
    u.postBackwardDone = true;
    reshard(u);
    bool any = false;
    for (T *p : u.params)
        any = any || (p->param >= 0 && S.gradOf(p->param) >= 0);
    if (!syncGrads || !any) {
        S.setOp("backward");
        return;
    }
    const int64_t N = ranks();
    S.setOp("fsdp_reduce_scatter");
    if (rsState >= 0)
        S.unref(rsState);
    rsState = S.allocate(u.reduceBytes, Category::Communication);
    for (T *p : u.params)
        if (p->param >= 0)
            S.unref(S.takeGrad(p->param));
    S.setStream(kReduceScatterStream);
    shardedGrads.push_back(S.allocate(u.reduceBytes / N, Category::Gradients));
    if (opt.glooCollectives) {
        if (!finalCallback)
            releaseGlooTemps();
        glooTemps.push_back(S.allocate(u.reduceBytes, Category::Communication));
    }
    S.setStream(0);
    S.setOp("backward");
}

// _root_post_backward_final_callback: every unit whose post-backward did not run (the root; a
// layer whose input needs no gradient, as the first under LoRA), root first; then it waits for the
// last reduce-scatter, whose input goes.
void FullyShard::afterBackward()
{
    S.setLayer(-1);
    for (size_t k = 0; k < units.size(); ++k)
        postBackward(k, true);
    if (rsState >= 0)
        S.unref(rsState);
    rsState = -1;
    releaseGlooTemps();
}

} // namespace

const ParallelKind &parallel_fsdp2()
{
    static const ParallelKind k{
        "fsdp2", [](const TrainingConfig &c) { return c.zeroStage >= 2; },
        [](const ParallelContext &ctx) -> std::unique_ptr<ParallelStrategy> { return std::make_unique<FullyShard>(ctx); }};
    return k;
}

} // namespace headroom::sim
