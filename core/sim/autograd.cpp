#include "autograd.h"

#include "headroom/error.h"

#include <algorithm>
#include <cstdint>
#include <queue>
#include <unordered_map>

namespace headroom::sim {

Sim::Sim(Timeline &out)
    : m_out(out)
{
    if (m_out.ops.empty())
        m_out.ops.emplace_back("");
}

void Sim::setOp(std::string_view op)
{
    // Few distinct names: a linear search over a short list stays fast.
    auto &ops = m_out.ops;
    for (size_t i = 0; i < ops.size(); ++i)
        if (ops[i] == op) {
            m_op = static_cast<uint16_t>(i);
            return;
        }
    ops.emplace_back(op);
    m_op = static_cast<uint16_t>(ops.size() - 1);
}

void Sim::setPhase(int step, Phase phase, int micro)
{
    m_out.marks.push_back({step, phase, micro, m_out.events.size()});
}

void Sim::emit(MemEvent::Kind kind, const Storage &s)
{
    MemEvent e;
    e.kind = kind;
    e.category = s.cat;
    e.layer = m_layer;
    e.op = m_op;
    e.part = s.part;
    e.id = s.id;
    e.bytes = s.bytes;
    if (kind == MemEvent::Alloc)
        e.stream = m_stream;
    m_out.events.push_back(e);
}

int Sim::allocate(int64_t bytes, Category category)
{
    Storage s;
    s.bytes = std::max<int64_t>(bytes, 0);
    s.id = m_nextId++;
    s.refs = 1;
    s.cat = category;
    s.part = m_part;
    if (m_onHost) { // on the host: the device sees it when restore() moves it
        s.allocEvent = SIZE_MAX; // no Alloc event yet (recategorize leaves the stream alone)
        m_sto.push_back(s);
        return static_cast<int>(m_sto.size() - 1);
    }
    s.live = true;
    s.allocEvent = m_out.events.size();
    m_sto.push_back(s);
    m_live = checkedAdd(m_live, s.bytes);
    emit(MemEvent::Alloc, s);
    if (m_recompute >= 0 && !m_inMake)
        m_recomputeRaw.push_back(static_cast<int>(m_sto.size() - 1));
    return static_cast<int>(m_sto.size() - 1);
}

void Sim::release(int sto)
{
    if (sto < 0)
        return;
    Storage &s = m_sto[static_cast<size_t>(sto)];
    if (!s.live)
        return;
    s.live = false;
    m_live -= s.bytes;
    emit(MemEvent::Free, s);
}

void Sim::restore(int sto)
{
    if (sto < 0)
        return;
    Storage &s = m_sto[static_cast<size_t>(sto)];
    if (s.live || s.refs <= 0)
        return;
    s.live = true;
    s.id = m_nextId++;
    s.allocEvent = m_out.events.size();
    m_live = checkedAdd(m_live, s.bytes);
    emit(MemEvent::Alloc, s);
}

void Sim::resize(int sto, int64_t bytes)
{
    if (sto >= 0 && !m_sto[static_cast<size_t>(sto)].live)
        m_sto[static_cast<size_t>(sto)].bytes = std::max<int64_t>(bytes, 0);
}

void Sim::emptyCache()
{
    MemEvent e;
    e.kind = MemEvent::EmptyCache;
    e.layer = m_layer;
    e.op = m_op;
    m_out.events.push_back(e);
}

void Sim::ref(int sto)
{
    if (sto >= 0)
        ++m_sto[static_cast<size_t>(sto)].refs;
}

void Sim::unref(int sto)
{
    if (sto < 0)
        return;
    Storage &s = m_sto[static_cast<size_t>(sto)];
    if (--s.refs == 0 && s.live) {
        s.live = false;
        m_live -= s.bytes;
        emit(MemEvent::Free, s);
    }
}

void Sim::recategorize(int sto, Category c)
{
    // The tensor is what it became for its whole life (a weight gradient from the matmul that
    // made it), so its Alloc event is relabelled too.
    if (sto < 0)
        return;
    Storage &s = m_sto[static_cast<size_t>(sto)];
    s.cat = c;
    if (s.allocEvent < m_out.events.size())
        m_out.events[s.allocEvent].category = c;
}

void Sim::markSaved(int sto)
{
    // A tensor autograd saves for backward is an activation (the breakdown's category) unless it
    // is already something else: a weight, the logits, a gradient.
    if (sto >= 0 && m_sto[static_cast<size_t>(sto)].cat == Category::Temporaries)
        recategorize(sto, Category::Activations);
}

void Sim::blasWorkspace(int thread)
{
    if (m_blas[static_cast<size_t>(thread)] || m_blasBytes <= 0)
        return;
    m_blas[static_cast<size_t>(thread)] = true;
    const PartScope process(*this, ModelPart::Language); // the handle's, whichever part first ran a GEMM
    allocate(m_blasBytes, Category::Temporaries);        // never freed
}

void Sim::blasLtWorkspace()
{
    const size_t thread = m_recompute >= 0 ? 1 : 0; // a recomputation runs on the autograd thread
    if (m_blasLt[thread] || m_blasLtBytes <= 0)
        return;
    m_blasLt[thread] = true;
    // never freed: the handle's, not the op's (an early-stopped recomputation's unwinding of its
    // op's locals leaves it)
    const bool inMake = m_inMake;
    m_inMake = true;
    const PartScope process(*this, ModelPart::Language); // as above
    allocate(m_blasLtBytes, Category::Temporaries);
    m_inMake = inMake;
}

void Sim::reserve(size_t events)
{
    m_out.events.reserve(events);
    m_sto.reserve(events / 2);
}

void Sim::packCopy(int64_t bytes)
{
    if (!m_toHost || m_region >= 0 || m_recompute >= 0 || !m_gradEnabled || bytes <= 0)
        return;
    unref(allocate(bytes, Category::Temporaries));
}

void Sim::markViewed(int sto)
{
    if (sto >= 0)
        m_sto[static_cast<size_t>(sto)].viewed = true;
}

int64_t Sim::bytesOf(int sto) const
{
    return sto >= 0 ? m_sto[static_cast<size_t>(sto)].bytes : 0;
}

T Sim::make(int64_t bytes, int elem, Category category)
{
    T t;
    m_inMake = true;
    t.sto = allocate(bytes, category);
    m_inMake = false;
    t.bytes = bytes;
    t.elem = elem;
    m_sto[static_cast<size_t>(t.sto)].pyRefs = 1;
    if (m_recompute >= 0)
        m_recomputeMade.push_back(t.sto);
    return t;
}

T Sim::view(const T &t, int64_t bytes)
{
    T v = t;
    ref(v.sto);
    if (v.sto >= 0)
        ++m_sto[static_cast<size_t>(v.sto)].pyRefs;
    if (bytes >= 0)
        v.bytes = bytes;
    return v;
}

T Sim::detachedView(const T &t, int64_t bytes)
{
    T v = view(t, bytes);
    v.node = -1;
    v.param = -1;
    v.requiresGrad = false;
    return v;
}

void Sim::drop(T &t)
{
    if (t.sto >= 0 && m_sto[static_cast<size_t>(t.sto)].pyRefs > 0)
        --m_sto[static_cast<size_t>(t.sto)].pyRefs;
    unref(t.sto);
    t.sto = -1;
}

namespace {
struct RecomputeDone
{
};
} // namespace

void Sim::beginRegion(std::function<void()> fn, const std::vector<const T *> &inputs)
{
    Region r;
    r.recompute = std::move(fn);
    r.layer = m_layer;
    r.part = m_part;
    // Non-reentrant checkpoint keeps its inputs through _NoopSaveInputs.save_for_backward, made
    // before its own hooks are pushed: under save_on_cpu they are packed to the host.
    for (const T *t : inputs)
        if (t && t->sto >= 0) {
            if (m_toHost) {
                r.hostInputs.push_back(t->sto);
                continue;
            }
            ref(t->sto);
            markSaved(t->sto);
            r.inputs.push_back(t->sto);
        }
    m_regions.push_back(std::move(r));
    m_region = static_cast<int>(m_regions.size() - 1);
}

void Sim::endRegion()
{
    if (m_region >= 0 && m_regions[static_cast<size_t>(m_region)].nodes.empty())
        releaseRegion(m_regions[static_cast<size_t>(m_region)]); // nothing needs a gradient: the frame holds nothing
    m_region = -1;
}

void Sim::releaseRegion(Region &r)
{
    for (int sto : r.inputs)
        unref(sto);
    r.inputs.clear();
    if (!r.released) {
        r.released = true;
        if (r.release) {
            auto fn = std::move(r.release);
            r.release = nullptr;
            fn();
        }
    }
}

void Sim::onRegionRelease(int region, std::function<void()> release)
{
    if (region < 0 || static_cast<size_t>(region) >= m_regions.size() || m_regions[static_cast<size_t>(region)].released) {
        release();
        return;
    }
    m_regions[static_cast<size_t>(region)].release = std::move(release);
}

void Sim::recompute(int region)
{
    Region &r = m_regions[static_cast<size_t>(region)];
    if (r.recomputed)
        return;
    r.recomputed = true;
    const bool grad = m_gradEnabled;
    // The recomputed forward's tensors are its layer's, made by its ops; backward's own after it
    // (See Note [Layer and op labels]).
    const int16_t layer = m_layer;
    const uint16_t op = m_op;
    const ModelPart part = m_part;
    m_layer = r.layer;
    m_part = r.part;
    m_gradEnabled = true;
    m_recompute = region;
    m_cursor = 0;
    m_recomputeMade.clear();
    // Inputs packed to the host come back for the recomputation (unpack_from_cpu: new device
    // tensors) and are held by its argument list until it ends; the recomputed forward's own
    // saves keep what they need longer.
    std::vector<int> copies;
    for (int sto : r.hostInputs) {
        Storage &st = m_sto[static_cast<size_t>(sto)];
        if (st.live) {
            copies.push_back(allocate(st.bytes, Category::Activations));
            continue;
        }
        st.live = true;
        st.refs = 1;
        st.id = m_nextId++;
        st.cat = Category::Activations;
        st.allocEvent = m_out.events.size();
        m_live = checkedAdd(m_live, st.bytes);
        emit(MemEvent::Alloc, st);
        copies.push_back(sto);
    }
    m_recomputeRaw.clear(); // the copies above are the recomputation's arguments, not an op's locals
    try {
        r.recompute();
    } catch (const RecomputeDone &) {
        // Early stop: what the recomputation still held in Python variables goes now.
        for (int sto : m_recomputeMade) {
            Storage &st = m_sto[static_cast<size_t>(sto)];
            while (st.pyRefs > 0) {
                --st.pyRefs;
                unref(sto);
            }
        }
        // Note [Checkpoint stop]: the op that stopped it unwinds too, its C++ locals with it.
        // What the region's nodes saved of each (counted once: a vision tower's block has a node
        // per attention window, thousands of them)
        std::unordered_map<int, int> saved;
        if (!m_recomputeRaw.empty())
            for (int idx : r.nodes)
                for (int sv : m_nodes[static_cast<size_t>(idx)].saved)
                    ++saved[sv];
        for (int sto : m_recomputeRaw) {
            const Storage &st = m_sto[static_cast<size_t>(sto)];
            if (!st.live)
                continue;
            const auto it = saved.find(sto);
            const int held = it == saved.end() ? 0 : it->second;
            while (m_sto[static_cast<size_t>(sto)].live && m_sto[static_cast<size_t>(sto)].refs > held)
                unref(sto);
        }
    }
    m_recomputeMade.clear();
    m_recomputeRaw.clear();
    for (int sto : copies)
        unref(sto);
    m_recompute = -1;
    m_gradEnabled = grad;
    m_layer = layer;
    m_part = part;
    m_op = op;
}

T Sim::parameter(int64_t bytes, int elem, bool requiresGrad, Category category)
{
    T t = make(bytes, elem, category);
    Param p;
    p.sto = t.sto;
    p.requiresGrad = requiresGrad;
    m_params.push_back(p);
    t.param = static_cast<int>(m_params.size() - 1);
    t.requiresGrad = requiresGrad;
    return t;
}

T Sim::inputLeaf(const T &x)
{
    if (x.sto < 0 || !m_gradEnabled)
        return x;
    T t = x;
    Param p;
    p.sto = x.sto;
    p.requiresGrad = true;
    p.graphLeaf = true;
    ref(x.sto); // the AccumulateGrad node's variable
    m_params.push_back(p);
    t.param = static_cast<int>(m_params.size() - 1);
    t.node = -1;
    t.requiresGrad = true;
    return t;
}

int Sim::gradOf(int param) const
{
    return param >= 0 ? m_params[static_cast<size_t>(param)].grad : -1;
}

void Sim::forgetDeadNodes()
{
    // A node the loss does not reach was freed with its last output in forward, and what it
    // saved with it: what live nodes save too goes when they have run.
    for (Node &n : m_nodes)
        if (!n.reached) {
            for (int sv : n.saved)
                unref(sv);
            n.saved.clear();
        }
    // A checkpoint frame's inputs stay until its last node the loss reaches has run (its
    // _NoopSaveInputs node runs after them); a dead node never runs.
    for (Region &r : m_regions) {
        size_t reached = 0;
        for (int idx : r.nodes)
            reached += m_nodes[static_cast<size_t>(idx)].reached && !m_nodes[static_cast<size_t>(idx)].done;
        if (reached > 0)
            r.remaining = reached;
    }
}

void Sim::releaseGraph()
{
    // Input leaves (Note [Input require grads]) go with the graph, their .grad first.
    for (Param &p : m_params)
        if (p.graphLeaf && p.sto >= 0) {
            unref(p.grad);
            unref(p.sto);
            p.grad = p.sto = -1;
            p.requiresGrad = false;
        }
    // Nodes that never ran (not reachable) keep nothing alive once the graph is freed.
    for (Region &r : m_regions)
        releaseRegion(r);
    m_regions.clear();
    for (Node &n : m_nodes) {
        for (int s : n.saved)
            unref(s);
        n.saved.clear();
        for (int &b : n.buffer) {
            unref(b);
            b = -1;
        }
    }
}

int Sim::paramStorage(int param) const
{
    return m_params[static_cast<size_t>(param)].sto;
}

void Sim::zeroGrad()
{
    for (auto &p : m_params) {
        unref(p.grad);
        p.grad = -1;
    }
}

int Sim::takeGrad(int param)
{
    if (param < 0)
        return -1;
    Param &p = m_params[static_cast<size_t>(param)];
    const int g = p.grad;
    p.grad = -1;
    return g;
}

bool Sim::anyRequiresGrad(const std::vector<const T *> &inputs) const
{
    if (!m_gradEnabled)
        return false;
    for (const T *t : inputs)
        if (t && t->requiresGrad)
            return true;
    return false;
}

int Sim::record(std::vector<T *> outputs, const std::vector<const T *> &inputs, const std::vector<int> &saved,
                BackwardFn fn)
{
    if (!anyRequiresGrad(inputs))
        return -1;
    if (m_recompute >= 0) {
        // Recomputing a checkpointed region: no new node; the saved tensors go to the original
        // node recorded at the same place, and the outputs stand for that node's outputs.
        Region &r = m_regions[static_cast<size_t>(m_recompute)];
        if (m_cursor >= r.nodes.size())
            throw RecomputeDone{};
        const int idx = r.nodes[m_cursor++];
        Node &n = m_nodes[static_cast<size_t>(idx)];
        if (n.reached) // Note [Dead nodes]: a node the loss does not reach is gone, its holder with it
            for (int sto : saved) {
                ref(sto);
                markSaved(sto);
                n.saved.push_back(sto);
            }
        for (size_t k = 0; k < outputs.size(); ++k)
            if (outputs[k]) {
                outputs[k]->node = idx;
                outputs[k]->out = static_cast<int>(k);
                outputs[k]->param = -1;
                outputs[k]->requiresGrad = true;
            }
        bool more = false;
        for (size_t i = m_cursor; i < r.nodes.size() && !more; ++i)
            more = m_nodes[static_cast<size_t>(r.nodes[i])].wantsSaved;
        if (!more)
            throw RecomputeDone{};
        return idx;
    }
    Node n;
    n.seq = ++m_seq;
    n.part = m_part;
    for (const T *t : inputs) {
        Edge e;
        if (t && t->requiresGrad) {
            e.node = t->node;
            e.out = t->out;
            e.param = t->node < 0 ? t->param : -1;
        }
        n.inputs.push_back(e);
    }
    if (m_region >= 0) {
        n.region = m_region;
        n.wantsSaved = !saved.empty();
    } else if (m_toHost) {
        for (int s : saved) // a tensor with no storage here (Gemma 3's embed_scale buffer) packs nothing
            if (s >= 0)
                n.packed.push_back(m_sto[static_cast<size_t>(s)].bytes);
    } else {
        for (int s : saved) {
            ref(s);
            markSaved(s);
            n.saved.push_back(s);
        }
    }
    n.fn = std::move(fn);
    for (T *o : outputs)
        n.outBytes.push_back(o ? o->bytes : 0);
    n.buffer.assign(n.outBytes.size(), -1);
    m_nodes.push_back(std::move(n));
    const int idx = static_cast<int>(m_nodes.size() - 1);
    if (m_region >= 0) {
        m_regions[static_cast<size_t>(m_region)].nodes.push_back(idx);
        ++m_regions[static_cast<size_t>(m_region)].remaining;
    }
    for (size_t k = 0; k < outputs.size(); ++k)
        if (outputs[k]) {
            outputs[k]->node = idx;
            outputs[k]->out = static_cast<int>(k);
            outputs[k]->param = -1;
            outputs[k]->requiresGrad = true;
        }
    return idx;
}

void Sim::backward(const T &root, int64_t seedBytes)
{
    if (root.node < 0)
        return;
    // Dependencies: how many edges from reachable nodes lead into each node and parameter.
    std::vector<int> reach;
    std::vector<char> seen(m_nodes.size(), 0);
    std::vector<int> paramPending(m_params.size(), 0);
    std::vector<int> stack = {root.node};
    seen[static_cast<size_t>(root.node)] = 1;
    for (Node &n : m_nodes) {
        n.pending = 0;
        n.reached = false;
    }
    while (!stack.empty()) {
        const int i = stack.back();
        stack.pop_back();
        reach.push_back(i);
        m_nodes[static_cast<size_t>(i)].reached = true;
        for (const Edge &e : m_nodes[static_cast<size_t>(i)].inputs) {
            if (e.node >= 0) {
                ++m_nodes[static_cast<size_t>(e.node)].pending;
                if (!seen[static_cast<size_t>(e.node)]) {
                    seen[static_cast<size_t>(e.node)] = 1;
                    stack.push_back(e.node);
                }
            } else if (e.param >= 0) {
                ++paramPending[static_cast<size_t>(e.param)];
            }
        }
    }
    forgetDeadNodes();
    std::vector<int> paramBuffer(m_params.size(), -1);
    // Ready nodes, highest sequence number first (PyTorch's ReadyQueue).
    auto cmp = [this](int a, int b) { return m_nodes[static_cast<size_t>(a)].seq < m_nodes[static_cast<size_t>(b)].seq; };
    std::priority_queue<int, std::vector<int>, decltype(cmp)> ready(cmp);

    auto accumulate = [this](int &buffer, int g) {
        if (g < 0)
            return;
        if (buffer < 0) {
            buffer = g;
            return;
        }
        // InputBuffer::accumulate: the first gradient is moved in; a later one is added in place
        // when the buffer holds the last reference to a plain tensor (can_accumulate_inplace),
        // else summed into a new tensor.
        const Storage &b = m_sto[static_cast<size_t>(buffer)];
        if (b.refs == 1 && !b.viewed) {
            unref(g);
            return;
        }
        const int sum = allocate(bytesOf(buffer), Category::Temporaries);
        unref(buffer);
        unref(g);
        buffer = sum;
    };
    std::function<void(const Edge &, int)> deliver = [&](const Edge &e, int g) {
        if (e.node >= 0) {
            Node &n = m_nodes[static_cast<size_t>(e.node)];
            accumulate(n.buffer[static_cast<size_t>(e.out)], g);
            if (--n.pending == 0)
                ready.push(e.node);
        } else if (e.param >= 0) {
            int &buf = paramBuffer[static_cast<size_t>(e.param)];
            accumulate(buf, g);
            if (--paramPending[static_cast<size_t>(e.param)] == 0 && buf >= 0) {
                // AccumulateGrad runs at once: the first gradient becomes .grad (stolen, no copy),
                // later ones are added in place and freed.
                Param &p = m_params[static_cast<size_t>(e.param)];
                if (!p.graphLeaf)
                    m_ready.push_back(e.param);
                if (p.grad < 0) {
                    p.grad = buf;
                    recategorize(buf, p.graphLeaf ? Category::Temporaries : Category::Gradients);
                } else {
                    unref(buf);
                }
                buf = -1;
            }
        } else {
            unref(g);
        }
    };

    // loss.backward()'s gradient of the loss (ones_like), held by torch.autograd.backward's
    // grad_tensors_ until the engine returns: alive through the whole backward (every H200
    // stream: the step's one 512-byte block that outlives the root node).
    const ModelPart part = m_part;
    const int seed = allocate(seedBytes, Category::Temporaries);
    ref(seed);
    Node &r = m_nodes[static_cast<size_t>(root.node)];
    accumulate(r.buffer[static_cast<size_t>(root.out)], seed);
    ready.push(root.node);
    while (!ready.empty()) {
        const int i = ready.top();
        ready.pop();
        if (m_nodes[static_cast<size_t>(i)].done)
            continue;
        // Checkpoint recomputes when a node unpacks a saved tensor (the saved-tensor hooks of
        // torch.utils.checkpoint); nodes of the region that saved nothing run before that.
        if (m_nodes[static_cast<size_t>(i)].region >= 0 && m_nodes[static_cast<size_t>(i)].wantsSaved)
            recompute(m_nodes[static_cast<size_t>(i)].region);
        Node &n = m_nodes[static_cast<size_t>(i)];
        n.done = true;
        m_part = n.part; // what it allocates, and what it hands on, is its part's
        std::vector<bool> needs;
        for (const Edge &e : n.inputs)
            needs.push_back(e.node >= 0 || e.param >= 0);
        std::vector<int> unpacked; // the node's saved tensors, back from the host
        for (int64_t bytes : n.packed)
            unpacked.push_back(allocate(bytes, Category::Activations));
        std::vector<int> grads = n.fn(*this, n.buffer, needs);
        for (auto it = unpacked.rbegin(); it != unpacked.rend(); ++it)
            unref(*it);
        n.packed.clear();
        // The node's incoming gradients go first, then what it saved.
        for (int &b : n.buffer) {
            unref(b);
            b = -1;
        }
        for (int s : n.saved)
            unref(s);
        n.saved.clear();
        if (n.region >= 0) {
            Region &r = m_regions[static_cast<size_t>(n.region)];
            if (--r.remaining == 0)
                releaseRegion(r);
        }
        grads.resize(n.inputs.size(), -1);
        for (size_t k = 0; k < n.inputs.size(); ++k) {
            const Edge &e = n.inputs[k];
            if (e.node < 0 && e.param < 0) {
                unref(grads[k]);
                continue;
            }
            deliver(e, grads[k]);
        }
        n.fn = nullptr;
    }
    m_part = part;
    releaseGraph();
    m_nodes.clear();
    unref(seed);
}

} // namespace headroom::sim
