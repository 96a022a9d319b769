// Issue 30: the Qwen towers as autograd nodes (Note [Vision step]): Qwen2.5-VL's where it trains or
// where gradient checkpointing's input hook reaches patch_embed, Qwen3-VL's where it trains; the
// order of the H100 allocator timelines of tests/data/h200/vl-2026-12-05.
#include "vision.h"

#include "headroom/error.h"

#include <algorithm>

namespace headroom::sim {

namespace {

// Qwen2_5_VLRMSNorm as nodes: x.float(), the normalisation (the variance a local to the end), the
// cast back, the weight's product (MulBackward0 keeps the weight and the cast).
T rmsNormGraph(Ops &O, const T &x, const T &w, int64_t rows, int64_t width)
{
    T x32 = O.to(x, 4);
    T var;
    T xn = O.rmsNormalize(x32, rows, false, var);
    O.s.drop(x32);
    T xb = O.to(xn, x.elem);
    T out = O.mul(w, xb, rows * width, x.elem, false, true, rows);
    O.s.drop(xb);
    O.s.drop(xn);
    if (var.valid())
        O.s.drop(var);
    return out;
}

// apply_rotary_pos_emb_vision's half for one of q and k as nodes (x32 the fp32 copy): x * cos,
// rotate_half (the halves, the negated second, their cat), times sin, the sum.
T rotateGraph(Ops &O, const T &x32, const T &cos, const T &sin)
{
    const int64_t n = x32.numel();
    T xc = O.mul(x32, cos, n, 4, true, false, 0);
    T x1 = O.slice(x32, n / 2), x2 = O.slice(x32, n / 2);
    T neg = O.neg(x2);
    T cat = O.cat({&neg, &x1}, n, 4);
    for (T *u : {&neg, &x1, &x2})
        O.s.drop(*u);
    T xs = O.mul(cat, sin, n, 4, true, false, 0);
    O.s.drop(cat);
    T sum = O.add(xc, xs);
    O.s.drop(xc);
    O.s.drop(xs);
    return sum;
}

// One Qwen2_5_VLVisionBlock or Qwen3VLVisionBlock as nodes over `x` [N, H] (`w` its 12
// parameters); SDPA a chunk at a time over split views of q, k, v.
// A tower Linear, with its LoRA adapter where `on` (Note [Vision LoRA]): PEFT's lora.Linear as
// the decoder's runs it without autocast. `ad` walks the adapters (lora_A, lora_B of each adapted
// Linear in module order).
T towerLinear(Ops &O, const T &x, const T &w, const T *bias, int64_t rows, int64_t in, int64_t out, int elem,
              const TowerLora *lora, bool on, const T *&ad)
{
    T y = O.linear(x, w, bias, rows, in, out, elem);
    if (!lora || !on)
        return y;
    const uint16_t module = O.s.opIndex();
    O.s.setOp("visual.lora");
    const Ops::LoraCall call{rows, in, out, lora->rank, lora->dropout, true, false, elem};
    T r = O.loraAdd(y, x, ad[0], ad[1], call, [&O](const T &t) { return O.s.view(t); });
    ad += 2;
    O.s.setOpIndex(module);
    return r;
}

T blockGraph(Sim &S, const ModelArch::VisionSide &v, const T &x, const T *w, const std::vector<int64_t> &chunks,
             const T &cos, const T &sin, int elem, const TowerLora *lora = nullptr, const T *ad = nullptr)
{
    Ops O(S);
    const auto on = [&](size_t i) { return lora && lora->on.block[i]; };
    const auto &t = v.tower;
    const int64_t H = t.hidden, N = x.bytes / (H * elem), I = t.inter;
    // Qwen2.5-VL's 12 parameters: norm1, norm2 (RMSNorm weights), qkv, proj, gate, up, down (weight
    // and bias each); Qwen3-VL's: norm1, norm2 (LayerNorm weight and bias each), qkv, proj, fc1, fc2
    const bool q3 = qwen3(v);
    const int at = q3 ? 2 : 0; // where qkv's weight sits, less 2
    const auto norm = [&](const T &in, int k) {
        return q3 ? O.layerNorm(in, w[2 * k], w[2 * k + 1], N, H, elem) : rmsNormGraph(O, in, w[k], N, H);
    };
    S.setOp("visual.norm1");
    T n1 = norm(x, 0);
    S.setOp("visual.attn");
    T qkv = towerLinear(O, n1, w[at + 2], &w[at + 3], N, H, 3 * H, elem, lora, on(0), ad);
    std::vector<T> parts = O.split(qkv, {N * H, N * H, N * H}); // reshape, permute, unbind
    T q32 = O.to(parts[0], 4), k32 = O.to(parts[1], 4);
    T qr = rotateGraph(O, q32, cos, sin), kr = rotateGraph(O, k32, cos, sin);
    T q = O.to(qr, elem);
    S.drop(qr);
    T k = O.to(kr, elem);
    S.drop(kr);
    S.drop(q32);
    S.drop(k32);
    // SDPA a chunk at a time over split views of q, k and v, then the outputs' cat: one node for
    // all the chunks (a window is about 64 patches, so thousands of nodes a block otherwise). Each
    // chunk's output is made and kept (flash keeps it, the cat needs it), the logsumexps beside them
    // (the Philox seed and offset and a 256-byte buffer a chunk, a few hundred bytes, left out).
    // Backward: each chunk's dq, dk and dv (all held until SplitBackward0 cats them), the largest
    // chunk's fp32 workspace, then the three cats.
    std::vector<T> outs;
    outs.reserve(chunks.size());
    int64_t largest = 0;
    for (int64_t c : chunks) {
        outs.push_back(S.make(c * H * elem, elem));
        largest = std::max(largest, c);
    }
    const int lse = S.allocate(N * t.heads * 4, Category::Activations);
    T cat = S.make(N * H * elem, elem);
    std::vector<int> saved{q.sto, k.sto, parts[2].sto, lse};
    for (const T &o : outs)
        saved.push_back(o.sto);
    const int64_t bytes = N * H * elem, workspace = largest * H * 4 + largest * t.heads * 4 + 256;
    S.record({&cat}, {&q, &k, &parts[2]}, saved, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        std::vector<int> r(3, -1);
        if (g[0] < 0)
            return r;
        std::array<int, 3> chunkGrads{};
        for (int &c : chunkGrads)
            c = s.allocate(bytes, Category::Temporaries);
        s.unref(s.allocate(workspace, Category::Temporaries));
        for (size_t i = 0; i < 3; ++i) {
            if (needs[i])
                r[i] = s.allocate(bytes, Category::Temporaries);
            s.unref(chunkGrads[i]);
        }
        return r;
    });
    S.unref(lse);
    T proj = towerLinear(O, cat, w[at + 4], &w[at + 5], N, H, H, elem, lora, on(1), ad);
    S.drop(cat);
    for (T &o : outs)
        S.drop(o);
    for (T *u : {&parts[0], &parts[1], &parts[2], &q, &k, &qkv, &n1})
        S.drop(*u);
    T h1 = O.add(x, proj);
    S.drop(proj);
    S.setOp("visual.norm2");
    T n2 = norm(h1, 1);
    S.setOp("visual.mlp");
    T down;
    if (q3) { // linear_fc2(GELU(linear_fc1(x)))
        T fc1 = O.linear(n2, w[8], &w[9], N, H, I, elem);
        T act = O.activation(fc1, "gelu");
        S.drop(fc1);
        down = O.linear(act, w[10], &w[11], N, I, H, elem);
        S.drop(act);
    } else {
        T gate = towerLinear(O, n2, w[6], &w[7], N, H, I, elem, lora, on(2), ad);
        T act = O.activation(gate, "silu");
        S.drop(gate);
        T up = towerLinear(O, n2, w[8], &w[9], N, H, I, elem, lora, on(3), ad);
        T prod = O.mul(act, up, N * I, elem);
        S.drop(act);
        S.drop(up);
        down = towerLinear(O, prod, w[10], &w[11], N, I, H, elem, lora, on(4), ad);
        S.drop(prod);
    }
    S.drop(n2);
    T h2 = O.add(h1, down);
    S.drop(down);
    S.drop(h1);
    return h2;
}

// A merger's Linear(M, M), GELU, Linear(M, out) as nodes over its norm's output `normed` (`lin`:
// the two Linears' weight and bias); returns the last Linear's output.
T mergerLinears(Ops &O, const T &normed, const T *lin, int64_t merged, int64_t M, int64_t out, int elem,
                const TowerLora *lora = nullptr, const T *ad = nullptr)
{
    const auto on = [&](size_t i) { return lora && lora->on.merger[i]; };
    T l1 = towerLinear(O, normed, lin[0], &lin[1], merged, M, M, elem, lora, on(0), ad);
    T gelu = O.activation(l1, "gelu");
    O.s.drop(l1);
    T l2 = towerLinear(O, gelu, lin[2], &lin[3], merged, M, out, elem, lora, on(1), ad);
    O.s.drop(gelu);
    return l2;
}

} // namespace

T qwen25TowerGraph(Sim &S, const ModelArch::VisionSide &v, const std::vector<T> &w, const TowerCall &call, int elem,
                   const TowerMode &mode, const TowerLora *lora)
{
    if (lora && !lora->any())
        lora = nullptr;
    // each block's adapters, then the merger's (Note [Vision LoRA])
    const size_t perBlock = lora ? 2 * static_cast<size_t>(std::count(lora->on.block.begin(), lora->on.block.end(), true)) : 0;
    if (lora && lora->adapters.size() != 2 * static_cast<size_t>(lora->on.adapters()))
        throw std::logic_error("qwen2.5-vl tower: " + std::to_string(lora->adapters.size()) + " adapters");
    const bool checkpointed = mode.checkpointed;
    Ops O(S);
    const auto &t = v.tower;
    const int64_t N = call.patches(), H = t.hidden, unit = v.merge * v.merge, merged = N / unit;
    const int64_t hd = H / t.heads;
    if (N <= 0 || N % unit != 0)
        throw InputError("vision", std::to_string(N), "patches do not merge into whole tokens");
    const size_t mergerAt = 3 + 12 * static_cast<size_t>(t.depth);
    if (w.size() != mergerAt + 5)
        throw std::logic_error("qwen2.5-vl tower: " + std::to_string(w.size()) + " weights");
    S.setOp("visual.inputs");
    T pixels = S.make(N * t.inputWidth * elem, elem);
    T positions = S.make(N * 2 * 8, 8);
    S.setOp("visual.patch_embed");
    T conv = S.make(N * H * elem, elem);
    if (mode.towerTrained)
        convolutionNode(S, conv, pixels, w[0], nullptr);
    T patches = mode.hooked && !mode.towerTrained ? S.inputLeaf(conv) : conv;
    T index = S.make(merged * 8, 8); // the window index, which IndexBackward0 keeps
    T hidden = O.gather(patches, index, N, H);
    S.drop(index);
    S.drop(conv);
    std::array<T, 2> permuted = windowedRotaryTables(S, N, hd, merged);
    std::vector<int64_t> windows, frames;
    attentionChunks(v, call, windows, frames);
    const T &cos = permuted[0], &sin = permuted[1];
    for (int64_t l = 0; l < t.depth; ++l) {
        S.setLayer(-1);
        const bool full = std::find(t.fullAttention.begin(), t.fullAttention.end(), l) != t.fullAttention.end();
        const std::vector<int64_t> &chunks = full ? frames : windows;
        const T *bw = &w[3 + 12 * static_cast<size_t>(l)];
        const T *ad = lora ? lora->adapters.data() + perBlock * static_cast<size_t>(l) : nullptr;
        T next;
        if (checkpointed) {
            const T in = hidden;
            S.beginRegion([&S, &v, bw, in, chunks, cos, sin, elem, lora, ad]() { // runs in backward: copies
                T o = blockGraph(S, v, in, bw, chunks, cos, sin, elem, lora, ad);
                S.drop(o);
            }, {&hidden, &cos, &sin}); // the block's arguments: the rotary tables held too
            next = blockGraph(S, v, hidden, bw, chunks, cos, sin, elem, lora, ad);
            S.endRegion();
        } else
            next = blockGraph(S, v, hidden, bw, chunks, cos, sin, elem, lora, ad);
        S.drop(hidden);
        hidden = next;
    }
    // the merger as nodes: ln_q, Linear(M, M), GELU, Linear(M, out), then the rows back in patch
    // order (IndexBackward0 keeps the reverse index)
    S.setOp("visual.merger");
    const T *mw = &w[mergerAt];
    const int64_t M = H * unit;
    T ln = rmsNormGraph(O, hidden, mw[0], N, H);
    T l2 = mergerLinears(O, ln, &mw[1], merged, M, t.outHidden, elem, lora,
                         lora ? lora->adapters.data() + perBlock * static_cast<size_t>(t.depth) : nullptr);
    S.drop(ln);
    T reverse = S.make(merged * 8, 8);
    T ordered = O.gather(l2, reverse, merged, t.outHidden);
    S.drop(reverse);
    S.drop(l2);
    S.drop(positions);
    for (T &p : permuted)
        S.drop(p);
    splitSizes(S, call);
    S.drop(pixels);
    S.drop(hidden);
    S.setOp("visual.features");
    T features = O.cat({&ordered}, ordered.numel(), elem);
    S.drop(ordered);
    return features;
}

TowerOutput qwen3TowerGraph(Sim &S, const ModelArch::VisionSide &v, const std::vector<T> &w, const TowerCall &call,
                            int elem)
{
    Ops O(S);
    const auto &t = v.tower;
    const int64_t N = call.patches(), H = t.hidden, unit = v.merge * v.merge, merged = N / unit, M = H * unit;
    if (N <= 0 || N % unit != 0)
        throw InputError("vision", std::to_string(N), "patches do not merge into whole tokens");
    const size_t mergerAt = 5 + 12 * static_cast<size_t>(t.depth);
    if (w.size() != mergerAt + 6 + 6 * t.deepstack.size())
        throw std::logic_error("qwen3-vl tower: " + std::to_string(w.size()) + " weights");
    S.setOp("visual.inputs");
    T pixels = S.make(N * t.inputWidth * elem, elem);
    T taps = S.make(N * 4 * 8, 8), weights = S.make(N * 4 * 4, 4);
    T positions = S.make(N * 2 * 8, 8);
    S.setOp("visual.patch_embed");
    T conv = S.make(N * H * elem, elem);
    convolutionNode(S, conv, pixels, w[0], &w[1]);
    // pos_embed(taps) * weights (fp32), summed over the taps, cast, added
    S.setOp("visual.pos_embed");
    T rows = O.embedding(w[2], taps, N * 4, t.positionEmbeddings, H);
    T weighted = O.mul(rows, weights, N * 4 * H, 4, true, false, 0);
    S.drop(rows);
    T posEmbeds = O.sumGroups(weighted, N * H);
    S.drop(weighted);
    T cast = O.to(posEmbeds, elem);
    T hidden = O.add(conv, cast);
    S.drop(cast);
    S.drop(conv);
    std::array<T, 2> tables = rotaryTables(S, N, H / t.heads);
    const std::vector<int64_t> frames = frameChunks(call);
    // a merger as nodes: its LayerNorm (over the patches, or the merged rows after the shuffle),
    // Linear(M, M), GELU, Linear(M, out); `mw` its 6 parameters (norm weight, norm bias, then the
    // Linears' weight and bias; the last merger's norm bias is kept last)
    const auto mergerGraph = [&](const T &x, const T &nw, const T &nb, const T *lin, bool postShuffle) {
        T n = postShuffle ? O.layerNorm(x, nw, nb, merged, M, elem) : O.layerNorm(x, nw, nb, N, H, elem);
        T l2 = mergerLinears(O, n, lin, merged, M, t.outHidden, elem);
        S.drop(n);
        return l2;
    };
    TowerOutput out;
    for (int64_t l = 0; l < t.depth; ++l) {
        S.setLayer(-1);
        T next = blockGraph(S, v, hidden, &w[5 + 12 * static_cast<size_t>(l)], frames, tables[0], tables[1], elem);
        S.drop(hidden);
        hidden = next;
        const auto d = std::find(t.deepstack.begin(), t.deepstack.end(), l);
        if (d != t.deepstack.end()) {
            S.setOp("visual.deepstack_merger");
            const size_t at = mergerAt + 6 + 6 * static_cast<size_t>(d - t.deepstack.begin());
            out.deepstack.push_back(mergerGraph(hidden, w[at], w[at + 1], &w[at + 2], true));
        }
    }
    S.setOp("visual.merger");
    T mergedOut = mergerGraph(hidden, w[mergerAt], w[mergerAt + 5], &w[mergerAt + 1], false);
    for (T *x : {&taps, &weights, &positions, &posEmbeds, &tables[1], &tables[0]})
        S.drop(*x);
    splitSizes(S, call);
    S.drop(pixels);
    S.setOp("visual.features");
    out.features = O.cat({&mergedOut}, mergedOut.numel(), elem);
    out.locals = {hidden, mergedOut};
    return out;
}

} // namespace headroom::sim
