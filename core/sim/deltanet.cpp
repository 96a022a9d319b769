// The gated DeltaNet mixer (deltanet.h) and the ATen ops only it uses. See Note [Gated DeltaNet]
// (docs/estimator.md): the op sequence follows modeling_qwen3_5.py of Transformers 5.17 and was
// matched, allocation by allocation, to the H200 streams of its real steps
// (tests/data/h200/traced-2026-12-04/run1.tar.xz, qwen3_5-*).

#include "deltanet.h"

#include "headroom/error.h"

#include <algorithm>

namespace headroom::sim {

namespace {
constexpr int64_t kChunk = 64; // torch_chunk_gated_delta_rule's chunk_size

// x.sum(-1, keepdim=True): SumBackward0 expands the gradient (a view, nothing allocated).
T sumLastDim(Ops &O, const T &x, int64_t outBytes)
{
    T out = O.s.make(outBytes, x.elem);
    O.s.record({&out}, {&x}, {}, [](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        return std::vector<int>{needs[0] && g[0] >= 0 ? pass(s, g[0]) : -1};
    });
    return out;
}
} // namespace

T Ops::exp(const T &x)
{
    return unary(x, x.bytes, x.elem, Keeps::Output);
}

T Ops::softplus(const T &x)
{
    return unary(x, x.bytes, x.elem, Keeps::Input);
}

T Ops::addBroadcast(const T &a, const T &b, int64_t outBytes, int elem, bool subtract)
{
    T out = s.make(outBytes, elem);
    const int64_t aBytes = a.bytes, bBytes = b.bytes;
    s.record({&out}, {&a, &b}, {}, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        std::vector<int> r(2, -1);
        if (g[0] < 0)
            return r;
        if (needs[0])
            r[0] = pass(s, g[0]);
        if (needs[1])
            r[1] = subtract ? s.allocate(outBytes, Category::Temporaries) : pass(s, g[0]);
        // validate_outputs: sum_to the broadcast operands' shapes
        for (int i : {0, 1}) {
            const int64_t want = i == 0 ? aBytes : bBytes;
            int &k = r[static_cast<size_t>(i)];
            if (k >= 0 && want != outBytes) {
                const int small = s.allocate(want, Category::Temporaries);
                s.unref(k);
                k = small;
            }
        }
        return r;
    });
    return out;
}

T Ops::conv1dDepthwise(const T &x, const T &w, int64_t outBytes)
{
    const int contiguous = s.allocate(x.bytes, Category::Temporaries);
    T out = s.make(outBytes, x.elem);
    s.unref(contiguous);
    std::vector<int> saved;
    if (s.gradEnabled() && (x.requiresGrad || w.requiresGrad))
        saved = {x.sto, w.sto};
    const int64_t xBytes = x.bytes, wBytes = w.bytes;
    s.record({&out}, {&x, &w}, saved, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // ConvolutionBackward0: the input's gradient, then the weight's, from the strided input
        // made contiguous again.
        std::vector<int> r(2, -1);
        if (g[0] < 0)
            return r;
        const int c = s.allocate(xBytes, Category::Temporaries);
        if (needs[0])
            r[0] = s.allocate(xBytes, Category::Temporaries);
        if (needs[1])
            r[1] = s.allocate(wBytes, Category::Temporaries);
        s.unref(c);
        return r;
    });
    return out;
}

T Ops::cumsum(const T &x)
{
    T out = s.make(x.bytes, x.elem);
    s.unref(s.allocate(x.bytes, Category::Temporaries)); // the scan's temporary
    const int64_t back = x.bytes;
    s.record({&out}, {&x}, {}, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // cumsum_backward: grad.flip(dim).cumsum(dim).flip(dim)
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        const int f = s.allocate(back, Category::Temporaries);
        const int c = s.allocate(back, Category::Temporaries);
        s.unref(s.allocate(back, Category::Temporaries));
        s.unref(f);
        const int r = s.allocate(back, Category::Temporaries);
        s.unref(c);
        return std::vector<int>{r};
    });
    return out;
}

T Ops::pad(const T &x, int64_t outBytes)
{
    return unary(x, outBytes, x.elem, Keeps::Nothing);
}

T Ops::solveTriangular(const T &a, const T &b)
{
    T out = s.make(b.bytes, b.elem);
    const int64_t aBytes = a.bytes, bBytes = b.bytes;
    const int64_t infos = std::max<int64_t>(8, aBytes / (kChunk * kChunk * a.elem) * 8);
    s.unref(s.allocate(infos, Category::Temporaries));
    s.unref(s.allocate(infos, Category::Temporaries));
    std::vector<int> saved;
    if (s.gradEnabled() && (a.requiresGrad || b.requiresGrad))
        saved = {a.sto, out.sto};
    s.record({&out}, {&a, &b}, saved, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // linalg_solve_triangular_backward: G_B = solve_triangular(A^H, grad), then
        // G_A = -(G_B @ X^H), tril(-1).
        std::vector<int> r(2, -1);
        if (g[0] < 0)
            return r;
        const int gb = s.allocate(bBytes, Category::Temporaries);
        s.unref(s.allocate(infos, Category::Temporaries));
        s.unref(s.allocate(infos, Category::Temporaries));
        if (needs[0]) {
            const int mm = s.allocate(aBytes, Category::Temporaries);
            const int neg = s.allocate(aBytes, Category::Temporaries);
            s.unref(mm);
            r[0] = s.allocate(aBytes, Category::Temporaries);
            s.unref(neg);
        }
        if (needs[1])
            r[1] = gb;
        else
            s.unref(gb);
        return r;
    });
    return out;
}

T Ops::copyIntoSlice(const T &base, const T &src)
{
    const int64_t baseBytes = base.bytes, srcBytes = src.bytes;
    return inPlaceVersion(base, {&base, &src}, {}, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // CopySlices: result = grad copied into a new tensor of base's strides; the slice's
        // gradient cloned for CopyBackwards, which hands src that clone and base zeros (copied
        // into the slice of result).
        std::vector<int> r(2, -1);
        if (g[0] < 0)
            return r;
        const int result = s.allocate(baseBytes, Category::Temporaries);
        const int slice = s.allocate(srcBytes, Category::Temporaries);
        s.unref(s.allocate(srcBytes, Category::Temporaries)); // zeros_like(grad), copied in
        if (needs[0])
            r[0] = result;
        else
            s.unref(result);
        if (needs[1])
            r[1] = slice;
        else
            s.unref(slice);
        return r;
    });
}

namespace {
// torch_chunk_gated_delta_rule (query and key already repeated to the value heads, g and beta per
// value head): its output (b, s, value heads, d) back in the model's dtype. Its locals go when it
// returns; what autograd saved stays.
T chunkGatedDeltaRule(Ops &O, const DeltaNetShape &d, const T &query, const T &key, const T &value, const T &g,
                      const T &beta)
{
    Sim &S = O.s;
    const int e = d.elem;
    const int64_t b = d.b, s = d.s, tok = checkedMul(b, s);
    const int64_t Hv = d.valueHeads, dk = d.keyDim, dv = d.valueDim, valW = Hv * dv;
    const int64_t pad = (kChunk - s % kChunk) % kChunk, sp = s + pad, nc = sp / kChunk;
    const int64_t bh = b * Hv;
    S.setOp("linear_attn.delta_rule");
    const int64_t qkN = checkedMul(tok, Hv * dk), vN = checkedMul(tok, valW);
    T q32 = O.to(query, 4), k32 = O.to(key, 4), v32 = O.to(value, 4), beta32 = O.to(beta, 4);
    T decay = S.view(g); // already fp32: .to() returns it as it is
    auto l2norm = [&](const T &v) {
        T sq = O.mul(v, v, qkN, 4, true, true, 0);
        T sum = sumLastDim(O, sq, checkedMul(tok, Hv) * 4);
        S.drop(sq);
        T eps = O.addScalar(sum);
        S.drop(sum);
        T inv = O.rsqrt(eps);
        S.drop(eps);
        T out = O.mul(v, inv, qkN, 4, true, false, 0);
        S.drop(inv);
        return out;
    };
    T ql = l2norm(q32);
    S.drop(q32);
    T kl = l2norm(k32);
    S.drop(k32);
    T qs = O.scale(ql);
    S.drop(ql);
    const int64_t qkP = checkedMul(checkedMul(bh, sp), dk), vP = checkedMul(checkedMul(bh, sp), dv), gP = checkedMul(bh, sp);
    T qp = O.pad(qs, qkP * 4), kp = O.pad(kl, qkP * 4), vp = O.pad(v32, vP * 4);
    S.drop(qs);
    S.drop(kl);
    S.drop(v32);
    T bp = O.pad(beta32, gP * 4), dp = O.pad(decay, gP * 4);
    S.drop(beta32);
    S.drop(decay);
    T vBeta = O.mul(vp, bp, vP, 4, true, false, 0);
    T kBeta = O.mul(kp, bp, qkP, 4, true, false, 0);
    T ones = S.make(kChunk * kChunk, 1);
    T mask = S.make(kChunk * kChunk, 1); // .triu(1)
    S.drop(ones);
    T cum = O.cumsum(dp);
    const int64_t pairN = checkedMul(checkedMul(bh, nc), kChunk * kChunk);
    T pw = O.addBroadcast(cum, cum, pairN * 4, 4, true);
    T pm = O.maskedFill(pw, mask);
    S.drop(pw);
    T pd = O.exp(pm);
    S.drop(pm);
    T m1 = O.bmm(kBeta, kp, pairN * 4, 4, true);
    T ut = O.mul(m1, pd, pairN, 4, true, true, 0);
    S.drop(m1);
    T m2 = O.bmm(qp, kp, pairN * 4, 4, true);
    T intra = O.mul(m2, pd, pairN, 4, true, true, 0);
    S.drop(m2);
    T ce = O.exp(cum);
    T dkb = O.mul(kBeta, ce, qkP, 4, true, false, 0);
    S.drop(ce);
    T newValues = O.solveTriangular(ut, vBeta);
    T kCum = O.solveTriangular(ut, dkb);
    T state = S.make(checkedMul(bh, dk * dv) * 4, 4);
    T out = S.make(newValues.bytes, 4); // zeros_like(new_values): its column-major layout
    T ce2 = O.exp(cum);
    T q2 = O.mul(qp, ce2, qkP, 4, true, false, 0);
    S.drop(ce2);
    S.drop(qp);
    T lastCol = O.slice(cum, bh * nc);
    T dsub = O.addBroadcast(lastCol, cum, gP * 4, 4, true);
    S.drop(lastCol);
    T de = O.exp(dsub);
    S.drop(dsub);
    T k2 = O.mul(kp, de, qkP, 4, true, false, 0);
    S.drop(de);
    S.drop(kp);
    T lastSel = O.slice(cum, bh * nc);
    T chunkDecay = O.exp(lastSel);
    S.drop(lastSel);
    const int64_t qkC = checkedMul(bh, kChunk * dk), vC = checkedMul(bh, kChunk * dv), stN = checkedMul(bh, dk * dv);
    T vNew, inter;
    for (int64_t i = 0; i < nc; ++i) {
        // v_new = new_values[:, :, i] - k_cumdecay[:, :, i] @ state: Python makes the left
        // operand's view first (autograd's order in backward follows).
        T nvi = O.slice(newValues, vC);
        T kci = O.slice(kCum, qkC);
        T m = O.bmm(kci, state, vC * 4, 4, true);
        S.drop(kci);
        T vn = O.sub(nvi, m);
        S.drop(m);
        S.drop(nvi);
        if (vNew.valid())
            S.drop(vNew);
        vNew = vn;
        T qi = O.slice(q2, qkC);
        T it = O.bmm(qi, state, vC * 4, 4, true);
        S.drop(qi);
        if (inter.valid())
            S.drop(inter);
        inter = it;
        T ii = O.slice(intra, checkedMul(bh, kChunk * kChunk));
        T mm = O.bmm(ii, vNew, vC * 4, 4, true);
        S.drop(ii);
        T sum = O.add(inter, mm);
        T outNext = O.copyIntoSlice(out, sum);
        S.drop(out);
        out = outNext;
        S.drop(mm);
        S.drop(sum);
        T cdi = O.slice(chunkDecay, bh);
        T sd = O.mul(state, cdi, stN, 4, true, false, 0);
        S.drop(cdi);
        T ki = O.slice(k2, qkC);
        T up = O.bmm(ki, vNew, stN * 4, 4, true);
        S.drop(ki);
        T ns = O.add(sd, up);
        S.drop(sd);
        S.drop(up);
        S.drop(state);
        state = ns;
    }
    S.drop(state); // output_final_state=False: the last state goes
    T flat = O.copy(out); // core_attn_out.reshape(...): its layout is not the shape's
    S.drop(out);
    T cutOut = O.slice(flat, vN);
    S.drop(flat);
    T attn = O.to(cutOut, e); // .transpose(1, 2).to(initial_dtype, contiguous)
    S.drop(cutOut);
    // The function's locals go when it returns, in the order Python made them.
    for (T *t : {&q2, &k2, &vp, &bp, &dp, &vBeta, &kBeta, &mask, &cum, &pd, &ut, &intra, &dkb, &newValues, &kCum,
                 &chunkDecay, &vNew, &inter})
        if (t->valid())
            S.drop(*t);
    return attn;
}

// Qwen3_5RMSNormGated(core_attn_out, z), per value head: the norm in fp32, the weight's product in
// the model's dtype, times silu(z.float()), cast back.
T gatedRmsNorm(Ops &O, const DeltaNetShape &d, const T &attn, const T &z, const T &weight)
{
    Sim &S = O.s;
    const int e = d.elem;
    const int64_t tok = checkedMul(d.b, d.s), Hv = d.valueHeads, vN = checkedMul(tok, Hv * d.valueDim);
    S.setOp("linear_attn.norm");
    const int64_t rows = checkedMul(tok, Hv);
    T h32 = O.to(attn, 4);
    T var; // `variance`, a local until the norm returns
    T hn = O.rmsNormalize(h32, rows, false, var);
    S.drop(h32);
    // Temporaries go as their expression finishes, the rebound name after (the no-grad pass of a
    // checkpointed layer shows the order).
    T hb = O.to(hn, e);
    T hw = O.mul(weight, hb, vN, std::max(e, weight.elem), false, true, rows);
    S.drop(hb);
    S.drop(hn);
    T gz = O.to(z, 4);
    T sg = O.activation(gz, "silu");
    S.drop(gz);
    T hm = O.mul(hw, sg, vN, 4, true, true, 0);
    S.drop(sg);
    S.drop(hw);
    T normed = O.to(hm, e);
    S.drop(hm);
    S.drop(var);
    return normed;
}
} // namespace

T gatedDeltaNet(Ops &O, const DeltaNetShape &d, const DeltaNetWeights &w, const T &x, const DeltaNetLinear &linear)
{
    Sim &S = O.s;
    const int e = d.elem;
    const int64_t b = d.b, s = d.s, tok = checkedMul(b, s);
    const int64_t Hk = d.keyHeads, Hv = d.valueHeads, dk = d.keyDim, dv = d.valueDim;
    const int64_t keyW = Hk * dk, valW = Hv * dv, C = 2 * keyW + valW, rep = Hv / Hk;

    S.setOp("linear_attn");
    T qkv = linear(x, DeltaNetProjection::Qkv); // mixed_qkv, then .transpose(1, 2)
    T z = linear(x, DeltaNetProjection::Z);
    T bproj = linear(x, DeltaNetProjection::B);
    T aproj = linear(x, DeltaNetProjection::A);

    // causal_conv1d_fn's torch fallback: conv1d(...)[:, :, :seq_len], silu.
    S.setOp("linear_attn.conv1d");
    T conv = O.conv1dDepthwise(qkv, *w.conv, checkedMul(checkedMul(b, C), s + d.kernel - 1) * e);
    T cut = O.slice(conv, checkedMul(tok, C));
    S.drop(conv);
    T mixed = O.activation(cut, "silu");
    S.drop(cut);
    S.drop(qkv); // mixed_qkv rebinds as the function returns; the convolution keeps it for backward
    S.setOp("linear_attn");
    // mixed_qkv.transpose(1, 2), torch.split into query, key, value; reshapes are views.
    std::vector<T> qkvParts = O.split(mixed, {tok * keyW, tok * keyW, tok * valW});
    T beta = O.sigmoid(bproj);
    // g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
    T af = O.to(*w.aLog, 4);
    T ae = O.exp(af);
    S.drop(af);
    T an = O.neg(ae);
    S.drop(ae);
    T a32 = O.to(aproj, 4);
    T ad = O.addBroadcast(a32, *w.dtBias, checkedMul(tok, Hv) * 4, 4, false);
    S.drop(a32);
    T sft = O.softplus(ad);
    S.drop(ad);
    T g = O.mul(an, sft, checkedMul(tok, Hv), 4, false, true, 0);
    S.drop(an);
    S.drop(sft);
    T query = rep > 1 ? O.repeatKv(qkvParts[0], qkvParts[0].bytes * rep) : S.view(qkvParts[0]);
    T key = rep > 1 ? O.repeatKv(qkvParts[1], qkvParts[1].bytes * rep) : S.view(qkvParts[1]);
    S.drop(qkvParts[0]); // query and key rebind to the repeated heads
    S.drop(qkvParts[1]);

    T attn = chunkGatedDeltaRule(O, d, query, key, qkvParts[2], g, beta);
    T normed = gatedRmsNorm(O, d, attn, z, *w.norm);
    S.drop(attn); // core_attn_out rebinds to the norm's output
    S.setOp("linear_attn");
    T y = linear(normed, DeltaNetProjection::Out);
    // Qwen3_5GatedDeltaNet.forward's locals, in the order Python made them (core_attn_out, the
    // norm's output, last)
    for (T *t : {&mixed, &z, &bproj, &aproj, &query, &key, &qkvParts[2], &beta, &g, &normed})
        S.drop(*t);
    return y;
}

} // namespace headroom::sim
