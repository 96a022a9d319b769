#pragma once
// A small autograd simulator: tensors that take bytes, Python references that keep them alive,
// graph nodes that save tensors for backward, and PyTorch's engine order for backward (the
// ready node with the highest sequence number first; AccumulateGrad as soon as it is ready).
// Every allocation and free is emitted in order into a Timeline. The estimator describes a
// training step with it, op by op (ops.h); what the step keeps alive, and when, follows.
//
// Internal to core: not a public header.

#include "headroom/timeline.h"

#include <array>
#include <functional>
#include <string_view>
#include <vector>

namespace headroom::sim {

// A tensor as Python sees it: a storage, the node that made it (its grad_fn) or a parameter.
struct T
{
    int sto = -1;          // storage index; -1: no tensor
    int node = -1;         // producing graph node (grad_fn); -1 for leaves and no-grad tensors
    int out = 0;           // which output of the node
    int param = -1;        // the parameter it is (a leaf that requires grad), else -1
    bool requiresGrad = false;
    int64_t bytes = 0;     // bytes of this tensor's data (views: what the view covers)
    int elem = 2;          // bytes per element (its dtype)
    int64_t rows = 0;      // parameters: a matrix's rows and columns (columns 1 for a vector)
    int64_t cols = 0;
    bool nf4 = false;      // a bitsandbytes Params4bit (rows x cols packed two per byte)
    int64_t numel() const { return elem ? bytes / elem : 0; }
    bool valid() const { return sto >= 0; }
};

class Sim;

// A node's backward: given the storages holding the gradients of its outputs (-1 where none
// arrived), it allocates what the ATen backward allocates and returns one gradient storage per
// input (-1 where the input needs none or gets none). Inputs it must compute: `needs`.
using BackwardFn = std::function<std::vector<int>(Sim &, const std::vector<int> &grads, const std::vector<bool> &needs)>;

class Sim
{
public:
    explicit Sim(Timeline &out);

    // Context stamped on every event.
    void setLayer(int layer) { m_layer = static_cast<int16_t>(layer); }
    // The model part new storages and nodes belong to (a node's backward allocates as its part).
    void setPart(ModelPart part) { m_part = part; }
    ModelPart part() const { return m_part; }
    ModelPart partOf(int sto) const { return m_sto[static_cast<size_t>(sto)].part; }
    void setOp(std::string_view op);
    // The code flattens the tokens before its Linears (a MoE block's hidden_states.view(-1, h)):
    // mm takes the 2-D input as it is, so the input's gradient is a plain tensor, not the view
    // F.linear makes of a 3-D one, and the backward engine may add the next gradient into it in
    // place (Note [Flat Linear inputs]).
    void setFlatInputs(bool on) { m_flatInputs = on; }
    bool flatInputs() const { return m_flatInputs; }
    // The op stamped now, to stamp again after a nested one (no name looked up or copied).
    uint16_t opIndex() const { return m_op; }
    void setOpIndex(uint16_t op) { m_op = op; }
    void setPhase(int step, Phase phase, int micro = 0);
    bool gradEnabled() const { return m_gradEnabled; }
    void setGradEnabled(bool on) { m_gradEnabled = on; }

    // The CUDA stream new allocations are made on (0: the default one). The caching allocator
    // caches blocks per stream (FSDP2's all-gather and reduce-scatter streams).
    void setStream(int stream) { m_stream = static_cast<uint8_t>(stream); }
    // While on, new storages live on the host: nothing is allocated on the device until
    // restore() moves them (a model built on the CPU, as accelerate hands FSDP2 a Trainer's).
    void setOnHost(bool on) { m_onHost = on; }

    // Storages.
    int allocate(int64_t bytes, Category category);
    // FSDP2's resharding: storage().resize_(0) frees the bytes while every tensor (and autograd's
    // saved copy) keeps the storage; restore() allocates them again (the all-gather's copy-out).
    // resize() changes the size of a released storage (the unsharded parameter in the
    // mixed-precision policy's dtype).
    void release(int sto);
    void restore(int sto);
    void resize(int sto, int64_t bytes);
    bool isLive(int sto) const { return sto >= 0 && m_sto[static_cast<size_t>(sto)].live; }
    void ref(int sto);
    void unref(int sto);
    void recategorize(int sto, Category c);
    void markSaved(int sto);
    // A gradient handed on as a view of a larger base (reshape after mm): the InputBuffer cannot
    // add into it in place (storage shared), so a second gradient makes an out-of-place sum.
    void markViewed(int sto);
    int64_t bytesOf(int sto) const;
    Category categoryOf(int sto) const { return m_sto[static_cast<size_t>(sto)].cat; }

    // A new tensor owning a fresh storage, with one Python reference.
    T make(int64_t bytes, int elem, Category category = Category::Temporaries);
    // Another Python reference to the same tensor (a view, or the same object bound twice).
    T view(const T &t, int64_t bytes = -1);
    // A view of the same storage with no producer yet: the output of a node recorded next (a
    // view op's own node, an in-place op's new version), not yet requiring grad.
    T detachedView(const T &t, int64_t bytes = -1);
    // Drops one Python reference.
    void drop(T &t);

    // Parameters (leaves): weights are stored once; gradients are accumulated into .grad.
    T parameter(int64_t bytes, int elem, bool requiresGrad, Category category = Category::Weights);
    // x.requires_grad_(True) on a tensor no node made (Note [Input require grads]): a leaf whose
    // AccumulateGrad keeps it, and the .grad backward gives it, until the graph is freed.
    T inputLeaf(const T &x);
    int gradOf(int param) const;
    void zeroGrad(); // optimizer.zero_grad(set_to_none=True)
    // Takes a parameter's .grad away (the caller holds its reference): FSDP2 frees the unsharded
    // gradient once the reduce-scatter has its copy.
    int takeGrad(int param);
    int paramCount() const { return static_cast<int>(m_params.size()); }
    // The parameters in the order their AccumulateGrad ran in the backward passes since the log
    // was cleared (DDP's Reducer records this order in its first iteration to rebuild buckets).
    const std::vector<int> &gradReadyOrder() const { return m_ready; }
    void clearGradReadyOrder() { m_ready.clear(); }
    int paramStorage(int param) const;

    // Graph nodes. Call after the op's outputs exist; `inputs` are the op's differentiable
    // inputs (tensors that do not require grad get no edge), `saved` the storages it keeps.
    // Returns the node index, and marks `outputs` as its results (they then require grad).
    int record(std::vector<T *> outputs, const std::vector<const T *> &inputs, const std::vector<int> &saved,
               BackwardFn fn);
    bool anyRequiresGrad(const std::vector<const T *> &inputs) const;

    // loss.backward(): runs the graph from `root` (a scalar), seeding its gradient.
    void backward(const T &root, int64_t seedBytes = 4);

    // Checkpointing (torch.utils.checkpoint, non-reentrant): nodes recorded inside a region keep
    // nothing; the region's `inputs` stay alive (the checkpoint frame holds them) until its last
    // node has run. When backward first reaches one of its nodes, `recompute` runs the region's
    // forward again, and what each op saves goes to the matching original node; recomputation
    // stops once every node has its tensors (early stop).
    void beginRegion(std::function<void()> recompute, const std::vector<const T *> &inputs);
    // The region being recorded (or the last one), and a Python object its checkpoint frame keeps
    // alive besides the inputs (Gemma 4's shared_kv_states dict): `release` runs when the frame
    // goes, once its last node has run (or with the graph, or at once if it holds nothing).
    int currentRegion() const { return m_region >= 0 ? m_region : static_cast<int>(m_regions.size()) - 1; }
    void onRegionRelease(int region, std::function<void()> release);

    // torch.autograd.graph.save_on_cpu: while on, a node recorded outside a checkpointed region
    // keeps no device memory for what it saves (pack_to_cpu copies each saved tensor to pinned
    // host memory); its backward first brings each back (unpack_from_cpu: tensor.to(device), a
    // new allocation of the saved tensor's size, parameters included) and frees them when it
    // returns. Checkpointed regions install their own hooks, which win.
    // See Note [Activation offload] (docs/estimator.md).
    void setSavedToHost(bool on) { m_toHost = on; }
    // Under save_on_cpu, saving a tensor that is not contiguous (weight.t(), attention's
    // transposed q, k, v and output): pack_to_cpu's `packed.copy_(tensor)` to pinned host memory
    // first makes a contiguous copy on the device, freed once copied. Ops call this at the point
    // the autograd kernel saves the tensor (inputs before the op runs, outputs after).
    void packCopy(int64_t bytes);

    // torch.cuda.empty_cache(): marks the stream; the allocator model releases its free segments.
    void emptyCache();
    void endRegion();

    // cuBLAS allocates its workspace through the caching allocator at the first matmul on a
    // thread's handle, and keeps it: once for the forward (main thread), once for backward (the
    // autograd engine's thread).
    void blasWorkspace(int thread);
    void setBlasWorkspaceBytes(int64_t bytes) { m_blasBytes = bytes; }
    // cuBLASLt's workspace: taken by the first addmm with a bias epilogue on a thread's handle,
    // kept: the forward's, and the autograd thread's when a checkpointed layer's recomputation
    // runs one (H200: Qwen2.5's biased q/k/v under checkpointing, a second 1 MiB).
    void blasLtWorkspace();
    void setBlasLtWorkspaceBytes(int64_t bytes) { m_blasLtBytes = bytes; }

    int64_t liveBytes() const { return m_live; }
    // Room for about `events` events up front: the stream and the storages (growing them was
    // half of an estimate's simulation: copies and fresh pages).
    void reserve(size_t events);

    Timeline &timeline() { return m_out; }

private:
    struct Storage
    {
        int64_t bytes = 0;
        uint32_t id = 0;
        int refs = 0;
        Category cat = Category::Temporaries;
        ModelPart part = ModelPart::Language;
        bool live = false;
        bool viewed = false;
        int pyRefs = 0; // references held by Python variables (make/view minus drop)
        size_t allocEvent = 0; // index of its Alloc event in the timeline
    };
    struct Edge
    {
        int node = -1;  // producer node, or -1 for a parameter leaf
        int out = 0;
        int param = -1;
    };
    struct Node
    {
        uint64_t seq = 0;
        std::vector<Edge> inputs;
        std::vector<int> saved;
        std::vector<int64_t> packed; // bytes of saved tensors that went to the host (save_on_cpu)
        std::vector<int64_t> outBytes;
        BackwardFn fn;
        std::vector<int> buffer; // gradient per output, accumulated
        int pending = 0;
        bool done = false;
        int region = -1;
        ModelPart part = ModelPart::Language;
        bool wantsSaved = false; // recorded in a region with tensors to save: filled on recompute
        bool reached = false;    // reachable from the running backward's root (Note [Dead nodes])
    };
    struct Region
    {
        std::function<void()> recompute;
        std::vector<int> nodes;  // in creation order
        std::vector<int> inputs; // storages the checkpoint frame holds
        std::vector<int> hostInputs; // ... on the host (save_on_cpu packed _NoopSaveInputs' saves)
        size_t remaining = 0;    // nodes not run yet
        bool recomputed = false;
        int16_t layer = -1;      // the decoder layer it checkpoints: its recomputation's tensors are that layer's
        ModelPart part = ModelPart::Language; // ... and the part of the model it is in
        std::function<void()> release; // onRegionRelease's, run when the frame goes
        bool released = false;
    };
    void releaseRegion(Region &r);
    struct Param
    {
        int sto = -1;
        int grad = -1;
        bool requiresGrad = false;
        bool graphLeaf = false; // an input leaf (inputLeaf): it and its .grad go with the graph
    };

    void emit(MemEvent::Kind kind, const Storage &s);
    void deliver(const Edge &e, int gradSto, std::vector<int> &ready);

    void recompute(int region);
    // Once backward knows what the loss reaches (Node::reached): the saves of the nodes it does not
    // reach go, and each checkpoint frame waits for its reached nodes only (Note [Dead nodes]).
    void forgetDeadNodes();
    // The graph freed after backward: input leaves and their .grad, then what unreached nodes and
    // regions still hold.
    void releaseGraph();

    Timeline &m_out;
    std::vector<Region> m_regions;
    int m_region = -1;          // recording the original forward of this region
    int m_recompute = -1;       // recomputing this region
    size_t m_cursor = 0;        // next node of the region to receive saved tensors
    std::vector<int> m_recomputeMade; // storages made during a recompute (Python refs to drop on stop)
    std::vector<int> m_recomputeRaw;  // raw allocations during a recompute (an op's C++ locals; Note [Checkpoint stop])
    bool m_inMake = false;
    std::vector<Storage> m_sto;
    std::vector<Node> m_nodes;
    std::vector<Param> m_params;
    std::vector<int> m_ready; // AccumulateGrad order (gradReadyOrder)
    uint32_t m_nextId = 0;
    uint64_t m_seq = 0;
    int16_t m_layer = -1;
    ModelPart m_part = ModelPart::Language;
    bool m_flatInputs = false;
    uint16_t m_op = 0;
    uint8_t m_stream = 0;
    bool m_onHost = false;
    bool m_gradEnabled = true;
    bool m_toHost = false;
    int64_t m_live = 0;
    int64_t m_blasBytes = 33554432;
    std::array<bool, 2> m_blas{};
    int64_t m_blasLtBytes = 1048576;
    std::array<bool, 2> m_blasLt{};
};

// The model part new storages and nodes belong to for a scope (Sim::setPart), restored at its end.
class PartScope
{
public:
    PartScope(Sim &s, ModelPart part)
        : m_s(s)
        , m_was(s.part())
    {
        s.setPart(part);
    }
    ~PartScope() { m_s.setPart(m_was); }
    PartScope(const PartScope &) = delete;
    PartScope &operator=(const PartScope &) = delete;

private:
    Sim &m_s;
    ModelPart m_was;
};

} // namespace headroom::sim
