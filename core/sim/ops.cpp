// Op recipes: forward allocations, saved tensors and backward allocations, in the order the
// CUDA allocator sees them (each checked against H200 traces of PyTorch 2.11; see ops.h).

#include "ops.h"

#include "headroom/simulation.h"

#include "headroom/error.h"

#include <algorithm>

namespace headroom::sim {

void Ops::reduceRows(int64_t rows, int64_t cols, int elem)
{
    (void)elem;
    // See Note [Outer-dimension reduction buffer] (docs/estimator.md): ATen's reduction over the
    // rows of a contiguous [rows, cols] tensor (a bias's or a norm weight's gradient), configured
    // as Reduce.cuh's setReduceConfig does on the H200 (132 SMs, 2048 threads each). When it splits
    // the rows over several blocks per output, the partial sums go through a global fp32 buffer and
    // 4 bytes of semaphore per output block.
    if (rows <= 0 || cols <= 0)
        return;
    int64_t vec = 4; // get_output_vec_size: the widest of 4, 2, 1 that divides the row
    while (cols % vec != 0)
        vec /= 2;
    const int64_t dim0 = cols / vec, dim1 = rows, maxThreads = 512 / vec;
    auto lastPow2 = [](int64_t n) {
        int64_t p = 1;
        while (p * 2 <= n)
            p *= 2;
        return p;
    };
    const int64_t d0 = dim0 < maxThreads ? lastPow2(dim0) : maxThreads;
    const int64_t d1 = dim1 < maxThreads ? lastPow2(dim1) : maxThreads;
    int64_t bw = std::min<int64_t>(d0, 32);
    const int64_t bh = std::min<int64_t>(d1, maxThreads / bw);
    bw = std::min<int64_t>(d0, maxThreads / bh);
    int64_t stepOut = bw, stepIn = 1; // the outputs split over the block's x
    auto perThread = [&] { return (rows + stepIn - 1) / stepIn; };
    const bool acrossWarps = perThread() >= std::min<int64_t>(bh * 16, 256);
    if (acrossWarps)
        stepIn *= bh;
    else
        stepOut *= bh;
    const int64_t grid = (dim0 + stepOut - 1) / stepOut;
    const int64_t target = 132 * (2048 / (bw * bh));
    int64_t ctas = 1;
    if (acrossWarps && perThread() >= 256 && grid <= target) {
        const int64_t c1 = (target + grid - 1) / grid, c2 = (perThread() + 15) / 16, c3 = (perThread() + 255) / 256;
        ctas = std::max(std::min(c1, c2), c3);
    }
    if (ctas <= 1)
        return;
    const int ws = s.allocate(checkedMul(checkedMul(cols * 4, ctas), bw * vec), Category::Temporaries);
    const int sem = s.allocate(4 * grid, Category::Temporaries);
    s.unref(sem);
    s.unref(ws);
}

T Ops::to(const T &x, int elem)
{
    if (x.elem == elem)
        return s.view(x);
    T out = s.make(x.numel() * elem, elem);
    const int64_t back = x.bytes;
    s.record({&out}, {&x}, {}, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // ToCopyBackward0: grad.to(self's dtype)
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(back, Category::Temporaries)};
    });
    return out;
}

T Ops::mul(const T &a, const T &b, int64_t numel, int elem, bool aFull, bool bFull, int64_t reduceRowsCount)
{
    T out = s.make(numel * elem, elem);
    std::vector<int> saved;
    if (a.requiresGrad && s.gradEnabled())
        saved.push_back(b.sto); // the gradient of a needs b
    if (b.requiresGrad && s.gradEnabled())
        saved.push_back(a.sto);
    const int64_t full = numel * elem;
    const int64_t aBytes = a.bytes, bBytes = b.bytes;
    const int aElem = a.elem, bElem = b.elem;
    const int64_t rows = reduceRowsCount;
    s.record({&out}, {&a, &b}, saved,
             [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
                 // MulBackward0 computes `other` first, then `self`; a broadcast operand's gradient
                 // is summed down afterwards (validate_outputs), in input order.
                 std::vector<int> r(2, -1);
                 if (g[0] < 0)
                     return r;
                 if (needs[1]) {
                     r[1] = s.allocate(full, Category::Temporaries);
                     if (bElem != elem && bFull) {
                         const int c = s.allocate(bBytes, Category::Temporaries);
                         s.unref(r[1]);
                         r[1] = c;
                     }
                 }
                 if (needs[0]) {
                     r[0] = s.allocate(full, Category::Temporaries);
                     if (aElem != elem && aFull) {
                         const int c = s.allocate(aBytes, Category::Temporaries);
                         s.unref(r[0]);
                         r[0] = c;
                     }
                 }
                 Ops o(s);
                 if (needs[0] && !aFull) {
                     const int small = s.allocate(aBytes, Category::Temporaries);
                     o.reduceRows(rows, aElem ? aBytes / aElem : 0, aElem);
                     s.unref(r[0]);
                     r[0] = small;
                 }
                 if (needs[1] && !bFull) {
                     const int small = s.allocate(bBytes, Category::Temporaries);
                     o.reduceRows(rows, bElem ? bBytes / bElem : 0, bElem);
                     s.unref(r[1]);
                     r[1] = small;
                 }
                 return r;
             });
    return out;
}

T Ops::unary(const T &x, int64_t outBytes, int elem, Keeps keeps)
{
    T out = s.make(outBytes, elem);
    std::vector<int> saved;
    if (keeps == Keeps::Input)
        saved.push_back(x.sto);
    else if (keeps == Keeps::Output)
        saved.push_back(out.sto);
    const int64_t back = x.bytes;
    s.record({&out}, {&x}, saved, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(back, Category::Temporaries)};
    });
    return out;
}

T Ops::scale(const T &x, int elem)
{
    // MulBackward1: grad * scalar
    const int e = elem ? elem : x.elem;
    return unary(x, x.numel() * e, e, Keeps::Nothing);
}

T Ops::add(const T &a, const T &b, int elem)
{
    const int e = elem ? elem : std::max(a.elem, b.elem);
    T out = s.make(std::max(a.numel(), b.numel()) * e, e);
    const int64_t aBytes = a.bytes, bBytes = b.bytes, outBytes = out.bytes;
    s.record({&out}, {&a, &b}, {}, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // AddBackward0: the same gradient to both (cast where an input's dtype differs).
        std::vector<int> r(2, -1);
        if (g[0] < 0)
            return r;
        for (int i : {0, 1}) {
            if (!needs[static_cast<size_t>(i)])
                continue;
            const int64_t want = i == 0 ? aBytes : bBytes;
            r[static_cast<size_t>(i)] = want == outBytes ? pass(s, g[0]) : s.allocate(want, Category::Temporaries);
        }
        return r;
    });
    return out;
}

T Ops::sub(const T &a, const T &b, int elem)
{
    const int e = elem ? elem : std::max(a.elem, b.elem);
    T out = s.make(std::max(a.numel(), b.numel()) * e, e);
    const int64_t outBytes = out.bytes;
    s.record({&out}, {&a, &b}, {}, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        std::vector<int> r(2, -1);
        if (g[0] < 0)
            return r;
        if (needs[0])
            r[0] = pass(s, g[0]);
        if (needs[1])
            r[1] = s.allocate(outBytes, Category::Temporaries); // -grad
        return r;
    });
    return out;
}

T Ops::addScalar(const T &x)
{
    T out = s.make(x.bytes, x.elem);
    s.record({&out}, {&x}, {}, [](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        return std::vector<int>{needs[0] && g[0] >= 0 ? pass(s, g[0]) : -1};
    });
    return out;
}

T Ops::neg(const T &x)
{
    return unary(x, x.bytes, x.elem, Keeps::Nothing); // NegBackward0: -grad
}

T Ops::pow2(const T &x, int elem)
{
    const int e = elem ? elem : x.elem;
    T out = s.make(x.numel() * e, e);
    const int64_t back = x.bytes;
    s.record({&out}, {&x}, {x.sto}, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // pow_backward: grad * (2 * self.pow(1)): self.pow(1), * 2, * grad.
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        const int a = s.allocate(back, Category::Temporaries);
        const int b = s.allocate(back, Category::Temporaries);
        const int r = s.allocate(back, Category::Temporaries);
        s.unref(b);
        s.unref(a);
        return std::vector<int>{r};
    });
    return out;
}

T Ops::rsqrt(const T &x)
{
    T out = s.make(x.bytes, x.elem);
    const int64_t back = x.bytes;
    s.record({&out}, {&x}, {out.sto}, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // rsqrt_backward: -0.5 * grad * result.pow(3)
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        const int a = s.allocate(back, Category::Temporaries);
        const int b = s.allocate(back, Category::Temporaries);
        const int r = s.allocate(back, Category::Temporaries);
        s.unref(b);
        s.unref(a);
        return std::vector<int>{r};
    });
    return out;
}

T Ops::rmsNormalize(const T &x32, int64_t rows, bool meanInline, T &variance, bool powInverse)
{
    T p = pow2(x32);
    variance = mean(p, rows);
    s.drop(p);
    T ve = addScalar(variance);
    if (meanInline) {
        s.drop(variance);
        variance = T{};
    }
    // torch.pow(mean_squared, -0.5) (Gemma 4): PowBackward0 keeps its input, the sum; rsqrt keeps
    // its result.
    T r = powInverse ? unary(ve, ve.bytes, ve.elem, Keeps::Input) : rsqrt(ve);
    s.drop(ve);
    T xn = mul(x32, r, x32.numel(), 4, true, false, 0);
    s.drop(r);
    return xn;
}

T Ops::tanh(const T &x)
{
    return unary(x, x.bytes, x.elem, Keeps::Output); // tanh_backward
}

T Ops::mean(const T &x, int64_t outNumel)
{
    return unary(x, outNumel * x.elem, x.elem, Keeps::Nothing); // MeanBackward1: grad.expand(self.sizes()) / numel
}

T Ops::relu(const T &x)
{
    return unary(x, x.bytes, x.elem, Keeps::Output); // threshold_backward(grad, result)
}

T Ops::layerNorm(const T &x, const T &w, const T &bias, int64_t rows, int64_t cols, int outElem, bool strided)
{
    T xin = s.view(x);
    T copy = strided ? s.make(x.bytes, x.elem) : T{};
    T out = s.make(rows * cols * outElem, outElem);
    const int mean = s.allocate(rows * 4, Category::Activations);
    const int rstd = s.allocate(rows * 4, Category::Activations);
    if (copy.valid())
        s.drop(copy);
    const int64_t xb = x.bytes, wb = w.bytes;
    s.record({&out}, {&xin, &w, &bias}, {xin.sto, mean, rstd},
             [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &nd) {
                 // native_layer_norm_backward: grad_input, then grad_weight and grad_bias
                 // through per-block partial sums.
                 std::vector<int> r(3, -1);
                 if (g[0] < 0)
                     return r;
                 const int contiguous = strided ? s.allocate(xb, Category::Temporaries) : -1;
                 if (nd[0])
                     r[0] = s.allocate(xb, Category::Temporaries);
                 if (nd[1] || nd[2]) {
                     const int part = s.allocate(((rows + 31) / 32) * cols * 4 * 2, Category::Temporaries);
                     if (nd[1])
                         r[1] = s.allocate(wb, Category::Temporaries);
                     if (nd[2])
                         r[2] = s.allocate(wb, Category::Temporaries);
                     s.unref(part);
                 }
                 if (contiguous >= 0)
                     s.unref(contiguous);
                 return r;
             });
    s.unref(mean);
    s.unref(rstd);
    s.drop(xin);
    return out;
}

T Ops::activation(const T &x, const std::string &kind)
{
    (void)kind; // silu, gelu, gelu_pytorch_tanh: one ATen op that saves its input
    return unary(x, x.bytes, x.elem, Keeps::Input);
}

T Ops::dropout(const T &x, double p)
{
    if (p <= 0.0)
        return s.view(x);
    // native_dropout: a bool mask (saved), then the output (H200 streams: GPT-2's dropouts).
    const int mask = s.allocate(x.numel(), Category::Activations);
    T out = s.make(x.bytes, x.elem);
    const int64_t back = x.bytes;
    s.record({&out}, {&x}, {mask}, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(back, Category::Temporaries)}; // grad * mask * scale
    });
    s.unref(mask); // only the node holds it
    return out;
}

T Ops::copy(const T &x)
{
    T out = s.make(x.bytes, x.elem);
    s.record({&out}, {&x}, {}, [](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        return std::vector<int>{needs[0] && g[0] >= 0 ? pass(s, g[0]) : -1};
    });
    return out;
}

T Ops::viewOf(const T &x)
{
    T out = s.detachedView(x);
    const int id = s.record({&out}, {&x}, {}, [](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        return std::vector<int>{needs[0] && g[0] >= 0 ? pass(s, g[0]) : -1};
    });
    if (id < 0) {
        out.node = x.node;
        out.out = x.out;
        out.param = x.param;
        out.requiresGrad = x.requiresGrad && s.gradEnabled();
    }
    return out;
}

T Ops::headsView(const T &x, bool copyBack)
{
    if (!copyBack)
        return viewOf(x);
    T out = s.detachedView(x);
    const int64_t back = x.bytes;
    const int id = s.record({&out}, {&x}, {}, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // TransposeBackward0, then ViewBackward0: grad.reshape() of a non-contiguous tensor
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(back, Category::Temporaries)};
    });
    if (id < 0) {
        out.node = x.node;
        out.out = x.out;
        out.param = x.param;
        out.requiresGrad = x.requiresGrad && s.gradEnabled();
    }
    return out;
}

T Ops::cat(const std::vector<const T *> &parts, int64_t numel, int elem)
{
    T out = s.make(numel * elem, elem);
    const size_t n = parts.size();
    s.record({&out}, parts, {}, [n](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // CatBackward0: narrow() views of the gradient.
        std::vector<int> r(n, -1);
        for (size_t i = 0; i < n; ++i)
            if (needs[i] && g[0] >= 0)
                r[i] = pass(s, g[0]);
        return r;
    });
    return out;
}

T Ops::slice(const T &x, int64_t numel)
{
    T out = s.detachedView(x, numel * x.elem);
    const int64_t back = x.bytes;
    s.record({&out}, {&x}, {}, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // SliceBackward0: zeros of the input's size, the gradient copied into the slice.
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(back, Category::Temporaries)};
    });
    return out;
}

T Ops::linear(const T &x, const T &w, const T *bias, int64_t tokens, int64_t in, int64_t outF, int elem)
{
    // addmm allocates its output, then cuBLAS takes the handle's workspace at its first call
    // (measured on GPT-2, whose first matmul is c_attn: the 32 MiB come after the output).
    // MmBackward saves weight.t() (not contiguous) when the input needs a gradient, before mm
    // runs: under save_on_cpu that costs a device copy of the weight (H200, LoRA + offload).
    if (x.requiresGrad && s.gradEnabled())
        s.packCopy(w.bytes);
    T out = s.make(tokens * outF * elem, elem);
    s.blasWorkspace(0);
    if (bias)
        s.blasLtWorkspace();
    std::vector<int> saved;
    if (w.requiresGrad && s.gradEnabled())
        saved.push_back(x.sto); // mm saves its input for the weight's gradient
    if (x.requiresGrad && s.gradEnabled())
        saved.push_back(w.sto);
    const int64_t wBytes = w.bytes, xBytes = tokens * in * x.elem;
    const int bElem = bias ? bias->elem : elem;
    const bool hasBias = bias != nullptr;
    const bool flat = s.flatInputs();
    std::vector<const T *> inputs = {&x, &w};
    if (bias)
        inputs.push_back(bias);
    s.record({&out}, inputs, saved, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // As the traces show them: MmBackward0 makes the weight's gradient first (mat2), then the
        // input's (mat1, a view once reshaped); AddmmBackward0 (a biased Linear: at::linear's addmm
        // on the flattened input) the input's first, then the weight's, then the bias's (a row
        // sum). Measured: Qwen2.5-1.5B's and Qwen1.5-MoE's q, k and v against their o_proj.
        std::vector<int> r(hasBias ? 3 : 2, -1);
        if (g[0] < 0)
            return r;
        const auto weightGrad = [&] {
            if (needs[1]) {
                r[1] = s.allocate(wBytes, Category::Temporaries);
                s.markViewed(r[1]); // handed on through TBackward (weight.t()): a view
            }
        };
        const auto inputGrad = [&] {
            if (needs[0]) {
                r[0] = s.allocate(xBytes, Category::Temporaries);
                if (!flat) // reshaped back to the 3-D input: a view (Note [Flat Linear inputs])
                    s.markViewed(r[0]);
            }
        };
        if (hasBias) {
            inputGrad();
            s.blasWorkspace(1);
            weightGrad();
        } else {
            weightGrad();
            s.blasWorkspace(1);
            inputGrad();
        }
        if (hasBias && needs[2]) {
            r[2] = s.allocate(outF * bElem, Category::Temporaries);
            Ops(s).reduceRows(tokens, outF, bElem);
        }
        return r;
    });
    return out;
}

T Ops::linear4bit(const T &x, int64_t tokens, int64_t in, int64_t outF, int elem, bool nested, bool biased)
{
    // MatMul4Bit keeps the packed weight (a parameter) in ctx.tensors: no new memory.
    const int64_t numel = in * outF;
    const int64_t blocks = (numel + 63) / 64;
    // backends/cuda/ops.py _dequant_linear_fallback: absmax_dq = torch.empty_like(absmax_8bit,
    // dtype=float32), absmax = absmax_dq + absmax_offset, B_dq = torch.empty(shapeB, A.dtype),
    // then F.linear; its locals go as it returns (arguments first: absmax, then absmax_dq, B_dq).
    int absDq = -1, abs32 = -1;
    if (nested) {
        absDq = s.allocate(blocks * 4, Category::Temporaries);
        abs32 = s.allocate(blocks * 4, Category::Temporaries);
    }
    const int wdq = s.allocate(numel * elem, Category::Temporaries);
    T out = s.make(tokens * outF * elem, elem);
    s.blasWorkspace(0);
    if (biased) // F.linear(A, B_dq, bias): a biased GEMM takes cuBLASLt's workspace, as Ops::linear's
        s.blasLtWorkspace();
    if (nested) {
        s.unref(abs32);
        s.unref(absDq);
    }
    s.unref(wdq);
    const int64_t xBytes = tokens * in * elem, wBytes = numel * elem;
    s.record({&out}, {&x}, {}, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // MatMul4Bit.backward: grad_A = grad_output @ F.dequantize_4bit(B, state); dequantize_4bit
        // makes the fp32 absmax first (dequantize_blockwise) and frees it when it returns.
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        const int a = nested ? s.allocate(blocks * 4, Category::Temporaries) : -1;
        const int dq = s.allocate(wBytes, Category::Temporaries);
        if (a >= 0)
            s.unref(a);
        const int gradA = s.allocate(xBytes, Category::Temporaries);
        s.blasWorkspace(1);
        s.unref(dq);
        return std::vector<int>{gradA};
    });
    return out;
}

T Ops::embedding(const T &w, const T &ids, int64_t tokens, int64_t vocab, int64_t hidden)
{
    T out = s.make(tokens * hidden * w.elem, w.elem);
    const int64_t wBytes = w.bytes;
    const int elem = w.elem;
    s.record({&out}, {&w}, {ids.sto}, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // embedding_dense_backward (CUDA): sorts the indices (three index buffers and a small
        // scan buffer), allocates the weight's gradient, then sums rows per unique index in fp32.
        // Up to 3072 indices it skips the sort (Note [Embedding backward]).
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        if (tokens <= 3072)
            return std::vector<int>{s.allocate(wBytes, Category::Temporaries)};
        const int64_t idx = tokens * 8;
        const int a = s.allocate(idx, Category::Temporaries);
        const int b = s.allocate(idx, Category::Temporaries);
        const int c = s.allocate(idx, Category::Temporaries);
        const int d = s.allocate(idx / 2 + 1 + vocab / 2048 + 1000, Category::Temporaries);
        s.unref(d);
        s.unref(c);
        const int grad = s.allocate(wBytes, Category::Temporaries);
        const int e = s.allocate(idx, Category::Temporaries);
        const int f = s.allocate(8, Category::Temporaries);
        const int h = s.allocate(idx, Category::Temporaries);
        // fp32 partial sums, one row per partial segment: (tokens + tokens / 10) rows measured
        // for random ids (Llama-3.2-1B, Qwen2.5-0.5B, GPT-2 on the H200).
        const int acc = s.allocate((tokens + tokens / 10) * hidden * 4, Category::Temporaries);
        s.unref(acc);
        s.unref(f);
        s.unref(h);
        s.unref(e);
        s.unref(b);
        s.unref(a);
        (void)elem;
        return std::vector<int>{grad};
    });
    return out;
}

T Ops::loraAdd(T &y, const T &x, const T &wa0, const T &wb0, const LoraCall &k, const std::function<T(const T &)> &weight)
{
    T xa = k.castInput ? to(x, wa0.elem) : s.view(x); // rebinds `x`: it lives until forward returns
    T xd = dropout(xa, k.dropout);
    T wa = weight(wa0);
    T ain = k.amp ? to(xd, 2) : s.view(xd);
    const int le = k.amp ? 2 : wa0.elem;
    T a = linear(ain, wa, nullptr, k.rows, k.in, k.rank, le);
    s.drop(ain);
    s.drop(wa);
    s.drop(xd);
    T wb = weight(wb0);
    T bo = linear(a, wb, nullptr, k.rows, k.rank, k.out, le); // lora_B's in-features: the rank
    s.drop(a);
    s.drop(wb);
    T sc = scale(bo);
    s.drop(bo);
    T sum = add(y, sc, std::max(y.elem, sc.elem));
    s.drop(sc);
    s.drop(y);
    T res = k.resultElem == 0 ? s.view(sum) : to(sum, k.resultElem);
    s.drop(sum);
    s.drop(xa);
    return res;
}

T Ops::sdpaFlash(const T &q, const T &k, const T &v, const AttnShape &a, int elem)
{
    // aten::_scaled_dot_product_flash_attention: philox seed and offset, the output and the
    // logsumexp (fp32, b x heads x s); it saves q, k, v, the output, the logsumexp and the seed.
    // q, k and v are transposed views (b, heads, s, d over b, s, heads, d) and so is the output:
    // under save_on_cpu each is copied contiguous on the device to be packed (k, q, v before the
    // kernel, the output after; H200, Llama LoRA + offload).
    const bool saves = s.gradEnabled() && s.anyRequiresGrad({&q, &k, &v});
    if (saves) {
        s.packCopy(k.bytes);
        s.packCopy(q.bytes);
        s.packCopy(v.bytes);
    }
    const int seed = s.allocate(8, Category::Activations);
    const int offset = s.allocate(8, Category::Activations);
    T out = s.make(a.b * a.s * a.heads * a.dv * elem, elem, Category::Temporaries);
    const int lse = s.allocate(a.b * a.heads * a.s * 4, Category::Activations);
    const int tmp = s.allocate(256, Category::Temporaries);
    s.unref(tmp);
    if (saves)
        s.packCopy(out.bytes);
    const int64_t qb = q.bytes, kb = k.bytes, vb = v.bytes;
    // The backward's one workspace: fp32 dq accumulators; under grouped-query attention, dk and
    // dv at every query head too (in the inputs' dtype, summed back to the kv heads after); the
    // softmax row sums (fp32); 256 bytes. Measured on the H200 (corpus timelines): 64.5 MiB + 256
    // for Llama-2-7B and OLMo-2-1B at b2 x 2048 and b4 x 2048 (MHA, no dk/dv share), 257 MiB +
    // 256 for Llama-3.1-8B b4 x 2048 (GQA), Pythia-2.8B's head size 80 unrounded.
    const int64_t gqa = a.kvHeads < a.heads ? a.b * a.s * a.heads * (a.dq + a.dv) * elem : 0;
    const int64_t ws = a.b * a.s * a.heads * a.dq * 4 + gqa + a.b * a.heads * a.s * 4 + 256;
    s.record({&out}, {&q, &k, &v}, {k.sto, q.sto, v.sto, lse, out.sto, seed, offset},
             [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
                 // Flash backward: dq, dk, dv, then one fp32 workspace (dq accumulators, softmax
                 // sums), freed before it returns.
                 std::vector<int> r(3, -1);
                 if (g[0] < 0)
                     return r;
                 r[0] = s.allocate(qb, Category::Temporaries);
                 r[1] = s.allocate(kb, Category::Temporaries);
                 r[2] = s.allocate(vb, Category::Temporaries);
                 const int w = s.allocate(ws, Category::Temporaries);
                 s.unref(w);
                 for (int i = 0; i < 3; ++i)
                     if (!needs[static_cast<size_t>(i)]) {
                         s.unref(r[static_cast<size_t>(i)]);
                         r[static_cast<size_t>(i)] = -1;
                     }
                 return r;
             });
    s.unref(lse);
    s.unref(seed);
    s.unref(offset);
    return out;
}

T Ops::sdpaEfficient(const T &q, const T &k, const T &v, const AttnShape &a, int elem, const T *bias, bool wide)
{
    // aten::_efficient_attention_forward: the output and a logsumexp padded to 32 rows; with a
    // mask (bf16, Mistral at its sliding window) a 256-byte scratch too.
    const int64_t lseLen = ((a.s + 31) / 32) * 32;
    const int seed = s.allocate(8, Category::Activations);
    const int offset = s.allocate(8, Category::Activations);
    T out = s.make(a.b * a.s * a.heads * a.dv * elem, elem, Category::Temporaries);
    const int lse = s.allocate(a.b * a.heads * lseLen * 4, Category::Activations);
    if (bias || elem == 2) { // also bf16 without a mask (DeepSeek's MLA, H200)
        const int scratch = s.allocate(256, Category::Temporaries);
        s.unref(scratch);
    }
    // See Note [Wide-head SDPA] (docs/estimator.md): the output accumulated in fp32, then cast.
    if (wide) {
        const int acc = s.allocate(out.bytes / elem * 4, Category::Temporaries);
        s.unref(acc);
    }
    // ... and backward's workspace: per (batch, head) the fp32 dq tiles (64 query rows by 128
    // columns and a 16-byte lock each), and dk and dv split over the keys as the kernel's
    // heuristic splits them (as many splits as fill the H100/H200's 132 SMs, at most one per
    // 64-key block), 64 rows of the head size each.
    const int64_t bh = a.b * a.heads;
    const int64_t splits = std::clamp<int64_t>((132 + bh - 1) / bh, 1, (a.s + 63) / 64);
    const int64_t gq = ((a.s + 63) / 64) * ((a.dq + 127) / 128) * (64 * 128 + 4);
    const int64_t gkv = splits * 64 * (((a.dq + 63) / 64) * 64 + ((a.dv + 63) / 64) * 64);
    const int64_t workspace = wide ? checkedMul(bh, ((gq + gkv + 3) / 4) * 4) * 4 : 0;
    const int64_t qb = q.bytes, kb = k.bytes, vb = v.bytes;
    const int64_t delta = a.b * a.heads * lseLen * 4;
    const bool masked = bias != nullptr;
    std::vector<int> saved = {q.sto, k.sto, v.sto, out.sto, lse, seed, offset};
    if (bias)
        saved.push_back(bias->sto);
    s.record({&out}, {&q, &k, &v}, saved,
             [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
                 std::vector<int> r(3, -1);
                 if (g[0] < 0)
                     return r;
                 if (masked) {
                     // bf16 with a bias (H200, Mistral-7B at s = 4096): the gradient made
                     // contiguous and dropped, dq, dk, dv, then an fp32 dq accumulator and delta.
                     const int gc = s.allocate(qb, Category::Temporaries);
                     s.unref(gc);
                     r[0] = s.allocate(qb, Category::Temporaries);
                     r[1] = s.allocate(kb, Category::Temporaries);
                     r[2] = s.allocate(vb, Category::Temporaries);
                     const int acc = s.allocate(qb / elem * 4 + delta, Category::Temporaries);
                     s.unref(acc);
                 } else if (workspace > 0) {
                     // dq, dk, dv, then delta and the workspace (H200, gemma-4-31b's global layer)
                     r[0] = s.allocate(qb, Category::Temporaries);
                     r[1] = s.allocate(kb, Category::Temporaries);
                     r[2] = s.allocate(vb, Category::Temporaries);
                     const int d = s.allocate(delta, Category::Temporaries);
                     const int w = s.allocate(workspace, Category::Temporaries);
                     s.unref(d);
                     s.unref(w);
                 } else {
                     const int d = s.allocate(delta, Category::Temporaries);
                     r[0] = s.allocate(qb, Category::Temporaries);
                     r[1] = s.allocate(kb, Category::Temporaries);
                     r[2] = s.allocate(vb, Category::Temporaries);
                     s.unref(d);
                 }
                 for (int i = 0; i < 3; ++i)
                     if (!needs[static_cast<size_t>(i)]) {
                         s.unref(r[static_cast<size_t>(i)]);
                         r[static_cast<size_t>(i)] = -1;
                     }
                 return r;
             });
    s.unref(lse);
    s.unref(seed);
    s.unref(offset);
    return out;
}

T Ops::repeatKv(const T &x, int64_t fullBytes)
{
    T out = s.make(fullBytes, x.elem);
    const int64_t back = x.bytes;
    s.record({&out}, {&x}, {}, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(back, Category::Temporaries)};
    });
    return out;
}

T Ops::bmm(const T &a, const T &b, int64_t outBytes, int elem, bool viewsBack)
{
    // BmmBackward0 (through matmul): b's gradient first, then a's, each of its operand's size. It
    // saves an operand only for the other's gradient (derivatives.yaml: self for mat2, mat2 for
    // self): the first chunk of the gated delta rule multiplies by the zero state, which needs none.
    T out = s.make(outBytes, elem);
    std::vector<int> saved;
    if (s.gradEnabled() && b.requiresGrad)
        saved.push_back(a.sto);
    if (s.gradEnabled() && a.requiresGrad)
        saved.push_back(b.sto);
    s.record({&out}, {&a, &b}, saved,
             [ab = a.bytes, bb = b.bytes, viewsBack](Sim &s, const std::vector<int> &g, const std::vector<bool> &n) {
                 std::vector<int> r(2, -1);
                 if (g[0] < 0)
                     return r;
                 if (n[1])
                     r[1] = s.allocate(bb, Category::Temporaries);
                 if (n[0])
                     r[0] = s.allocate(ab, Category::Temporaries);
                 if (viewsBack)
                     for (int k : r)
                         if (k >= 0)
                             s.markViewed(k);
                 return r;
             });
    return out;
}

T Ops::sdpaMathMasked(const T &q, const T &k, const T &v, const AttnShape &a, int elem)
{
    // See Note [SDPA math path in fp32] (docs/estimator.md).
    Ops o(s);
    const int64_t rows = a.b * a.heads * a.s;
    // convert_boolean_attn_mask: where(mask, 0, -inf) in q's dtype, over the batch.
    const int z = s.allocate(elem, Category::Temporaries), ninf = s.allocate(elem, Category::Temporaries);
    const int additive = s.allocate(a.b * a.s * a.s * elem, Category::Temporaries);
    s.unref(z);
    s.unref(ninf);
    // The fp32 copies (allowFP16BF16ReductionMathSDP is off), query * sqrt(scale).
    T q32 = o.to(q, 4), k32 = o.to(k, 4), v32 = o.to(v, 4);
    T query = o.scale(q32);
    T kt = o.scale(k32); // key_acc.transpose(-2, -1) * sqrt(scale)
    // torch.matmul broadcasts the one kv head: expand + reshape for bmm, copies of both operands
    // at b > 1 (the query's memory is (b, s, heads, d) after rotary) and views at b = 1 (Note [Eager
    // matmul copies]); ExpandBackward0 sums the kv head's gradient back either way.
    const bool folds = a.b > 1;
    auto broadcastHeads = [&](const T &x) {
        const int64_t bytes = x.bytes / a.kvHeads * a.heads;
        T r = folds ? s.make(bytes, x.elem) : s.detachedView(x, bytes);
        const int id = s.record({&r}, {&x}, {}, [xb = x.bytes](Sim &s, const std::vector<int> &g, const std::vector<bool> &n) {
            if (!n[0] || g[0] < 0)
                return std::vector<int>{-1};
            return std::vector<int>{s.allocate(xb, Category::Temporaries)};
        });
        if (id < 0 && !folds) {
            r.node = x.node;
            r.out = x.out;
            r.param = x.param;
            r.requiresGrad = x.requiresGrad && s.gradEnabled();
        }
        return r;
    };
    T qc = folds ? o.copy(query) : s.view(query);
    T ke = broadcastHeads(kt);
    const int64_t scores = rows * a.s * 4;
    T sc = bmm(qc, ke, scores, 4);
    s.drop(qc);
    s.drop(ke);
    s.drop(kt);
    // attn.add_(mask) in place; _safe_softmax (its bool eq(-inf) mask and row-wise all).
    T p = s.make(scores, 4);
    s.record({&p}, {&sc}, {p.sto}, [scores](Sim &s, const std::vector<int> &g, const std::vector<bool> &n) {
        if (!n[0] || g[0] < 0)
            return std::vector<int>{-1};
        const int r = s.allocate(scores, Category::Temporaries);
        s.unref(s.allocate(scores, Category::Temporaries)); // Note [Softmax backward temporary]
        return std::vector<int>{r};
    });
    const int inf = s.allocate(scores / 4, Category::Temporaries);
    const int rowAll = s.allocate(rows, Category::Temporaries);
    const int fill = s.allocate(4, Category::Temporaries);
    s.unref(fill);
    s.unref(rowAll);
    s.unref(inf);
    s.drop(sc);
    // make_tuple(matmul(attn, value).to(origin), attn.to(origin)), its arguments right to left.
    const int probsLow = s.allocate(scores / 4 * elem, Category::Temporaries);
    T ve = broadcastHeads(v32);
    T out32 = bmm(p, ve, rows * a.dv * 4, 4);
    s.drop(p);
    s.drop(ve);
    T out = o.to(out32, elem);
    // The math function's temporaries and locals, then the tuple's probabilities, then the mask.
    for (T *t : {&out32, &query, &v32, &k32, &q32})
        s.drop(*t);
    s.unref(probsLow);
    s.unref(additive);
    return out;
}

T Ops::sdpaMath(const T &q, const T &k, const T &v, const AttnShape &a, int elem)
{
    // at::_scaled_dot_product_attention_math (PyTorch 2.11; fp32 with grouped-query attention),
    // in the order the H200 trace shows it: query * sqrt(scale); the causal mask (ones(L, S,
    // bool).tril(), then where(mask, 0, -inf) in the query's dtype); key and value repeated to
    // every head (pre_process_group_query_attention_input); key^T * sqrt(scale); the query made
    // contiguous for bmm (HF hands it over transposed); q @ k^T; += mask in place;
    // _safe_softmax (softmax, then a bool eq(-inf) mask and its row-wise all); @ value. The
    // function's locals key_expanded, query and the mask go when it returns.
    const int64_t full = a.b * a.heads * a.s * a.dq * elem;
    const int64_t scores = a.b * a.heads * a.s * a.s * elem;
    Ops o(s);
    T qs = o.scale(q);
    const int ones = s.allocate(a.s * a.s, Category::Temporaries);
    const int tril = s.allocate(a.s * a.s, Category::Temporaries);
    s.unref(ones);
    const int zero = s.allocate(4, Category::Temporaries);
    const int ninf = s.allocate(4, Category::Temporaries);
    const int mask = s.allocate(a.s * a.s * elem, Category::Temporaries);
    s.unref(ninf);
    s.unref(zero);
    s.unref(tril);
    const bool gqa = a.kvHeads < a.heads;
    auto repeat = [&](const T &x) {
        T r = s.make(full, elem);
        s.record({&r}, {&x}, {}, [xb = x.bytes](Sim &s, const std::vector<int> &g, const std::vector<bool> &n) {
            // repeat_interleave's backward: the gradient summed over the repeats, no temporary
            if (!n[0] || g[0] < 0)
                return std::vector<int>{-1};
            return std::vector<int>{s.allocate(xb, Category::Temporaries)};
        });
        return r;
    };
    T krep = gqa ? repeat(k) : s.view(k);
    T vrep = gqa ? repeat(v) : s.view(v);
    T ks = o.scale(krep);
    T qc = o.copy(qs);
    T sc = bmm(qc, ks, scores, elem);
    s.drop(qc);
    s.drop(ks);
    T p = s.make(scores, elem);
    s.record({&p}, {&sc}, {p.sto}, [scores](Sim &s, const std::vector<int> &g, const std::vector<bool> &n) {
        if (!n[0] || g[0] < 0)
            return std::vector<int>{-1};
        // _safe_softmax's backward: _softmax_backward_data, and one temporary of its size
        const int r = s.allocate(scores, Category::Temporaries);
        s.unref(s.allocate(scores, Category::Temporaries));
        return std::vector<int>{r};
    });
    const int inf = s.allocate(scores / elem, Category::Temporaries);       // eq(-inf): bool
    const int rows = s.allocate(a.b * a.heads * a.s, Category::Temporaries); // all(dim=-1)
    const int fill = s.allocate(4, Category::Temporaries);
    s.unref(fill);
    s.unref(rows);
    s.unref(inf);
    s.drop(sc);
    T out = bmm(p, vrep, a.b * a.heads * a.s * a.dv * elem, elem);
    s.drop(p);
    s.drop(vrep);
    s.drop(krep);
    s.drop(qs);
    s.unref(mask);
    return out;
}

// See Note [Attention sinks] (docs/estimator.md): the masked scores x (rows of `scores`/`rows`
// each) with the sink column, to the probabilities over the real columns (a slice).
T Ops::sinkProbabilities(T &x, const T &sinks, int64_t rows, int64_t scores, int elem, std::vector<T> *locals)
{
    T sinkView = s.detachedView(sinks, rows * elem); // sinks.reshape(1, -1, 1, 1).expand(b, -1, s, -1)
    const int64_t sinkBytes = sinks.bytes;
    const int sid = s.record({&sinkView}, {&sinks}, {},
                             [sinkBytes](Sim &s, const std::vector<int> &g, const std::vector<bool> &n) {
                                 // ExpandBackward0: the gradient summed to one logit per head
                                 if (!n[0] || g[0] < 0)
                                     return std::vector<int>{-1};
                                 return std::vector<int>{s.allocate(sinkBytes, Category::Temporaries)};
                             });
    if (sid < 0) {
        sinkView.node = sinks.node;
        sinkView.out = sinks.out;
        sinkView.param = sinks.param;
        sinkView.requiresGrad = sinks.requiresGrad && s.gradEnabled();
    }
    T combined = cat({&x, &sinkView}, scores + rows, elem);
    s.drop(sinkView);
    // .max(dim=-1, keepdim=True): values and int64 indices; MaxBackward0 keeps the indices and
    // scatters the values' gradient into zeros of the input's size.
    T values = s.make(rows * elem, elem);
    T indices = s.make(rows * 8, 8);
    s.record({&values}, {&combined}, {indices.sto},
             [cb = combined.bytes](Sim &s, const std::vector<int> &g, const std::vector<bool> &n) {
                 if (!n[0] || g[0] < 0)
                     return std::vector<int>{-1};
                 return std::vector<int>{s.allocate(cb, Category::Temporaries)};
             });
    s.drop(indices);
    T shifted = addBroadcast(combined, values, combined.bytes, combined.elem, true); // combined_logits - max: the name rebinds
    s.drop(values);
    s.drop(combined);
    T probs = softmax(shifted); // F.softmax(..., dtype=combined_logits.dtype): no upcast
    s.drop(x);                  // attn_weights rebinds to the sliced probabilities
    T p = slice(probs, scores); // probs[..., :-1]; dropout(p=0) and .to(dtype) return it
    s.drop(probs);
    if (locals)
        locals->push_back(shifted);
    else
        s.drop(shifted);
    return p;
}

T Ops::eagerAttention(const T &q0, const T &k, const T &v0, const T *mask, const AttnShape &a, int elem,
                      const EagerStyle &style)
{
    const double softcap = style.softcap;
    // HF eager_attention_forward: repeat_kv (a copy when grouped), q @ k^T, * scaling, (soft-cap:
    // / cap, tanh, * cap), + mask, softmax in fp32, .to(q.dtype), dropout, @ v, transpose.
    Ops o(s);
    const bool gqa = a.kvHeads < a.heads;
    // Note [Eager matmul copies]: torch.matmul folds (b, heads) into bmm's batch with
    // expand + reshape, a contiguous copy (CloneBackward passes; bmm saves the copy) of an operand
    // whose memory is (b, s, heads, d): q after Llama's element-wise rotary, and with one head per
    // kv head k and v as the projections' transposed views. repeat_kv's output and a
    // concatenated rotary's (heads-major) fold as views, and so does anything at b = 1.
    const bool folds = style.stridedQkv || a.b > 1;
    const bool qCopies = style.stridedQkv || (folds && !style.headsMajor);
    const int64_t rep = a.b * a.heads * a.s * a.dq * elem;
    const int64_t repV = a.b * a.heads * a.s * a.dv * elem;
    auto repeat = [&](const T &x, int64_t bytes) {
        if (!gqa)
            return s.view(x);
        T r = s.make(bytes, elem);
        s.record({&r}, {&x}, {}, [xb = x.bytes](Sim &s, const std::vector<int> &g, const std::vector<bool> &n) {
            // ViewBackward of the expanded reshape: summed back over the repeats
            if (!n[0] || g[0] < 0)
                return std::vector<int>{-1};
            return std::vector<int>{s.allocate(xb, Category::Temporaries)};
        });
        return r;
    };
    T kr = repeat(k, rep);
    T vr = repeat(v0, repV);
    T q = qCopies ? copy(q0) : s.view(q0);
    if (!gqa && qCopies) {
        T kc = copy(kr);
        s.drop(kr);
        kr = kc;
    }
    const int64_t scores = a.b * a.heads * a.s * a.s;
    T sc = bmm(q, kr, scores * elem, elem);
    T x = o.scale(sc);
    s.drop(sc);
    if (softcap > 0.0) {
        T d = o.scale(x);
        s.drop(x);
        T th = o.tanh(d);
        s.drop(d);
        x = o.scale(th);
        s.drop(th);
    }
    if (mask) {
        T m = s.make(x.bytes, elem);
        s.record({&m}, {&x}, {}, [](Sim &s, const std::vector<int> &g, const std::vector<bool> &n) {
            return std::vector<int>{n[0] && g[0] >= 0 ? pass(s, g[0]) : -1};
        });
        s.drop(x);
        x = m;
    }
    T p;
    if (style.sinks) {
        p = sinkProbabilities(x, *style.sinks, a.b * a.heads * a.s, scores, elem, style.locals);
    } else {
        const int se = style.softmaxFp32 ? 4 : elem;
        // See Note [Softmax upcast] (docs/estimator.md): bf16 scores are converted to fp32 first, a
        // temporary freed when the softmax returns; the masked scores go after the .to(q.dtype).
        const bool upcast = style.softmaxFp32 && elem == 2 && !style.halfToFloat;
        T xs = upcast ? o.to(x, 4) : s.view(x);
        T p32 = o.softmax(xs, se);
        s.drop(xs);
        if (!style.softmaxFp32)
            s.drop(x);
        p = o.to(p32, elem);
        s.drop(p32);
        if (style.softmaxFp32)
            s.drop(x);
        if (style.dropout > 0.0) {
            T pd = o.dropout(p, style.dropout);
            s.drop(p);
            p = pd;
        }
    }
    if (!gqa && folds) {
        T vc = copy(vr);
        s.drop(vr);
        vr = vc;
    }
    T out = bmm(p, vr, a.b * a.heads * a.s * a.dv * elem, elem);
    if (style.returned)
        *style.returned = p;
    else
        s.drop(p);
    s.drop(kr);
    s.drop(vr);
    s.drop(q);
    return out;
}

// ------------------------------------------------------------------ mixture of experts

T Ops::softmax(const T &x, int outElem)
{
    // See Note [Softmax backward temporary] (docs/estimator.md): the gradient, then
    // tmp = grad * output of its size, freed before the backward returns.
    const int e = outElem ? outElem : x.elem;
    T out = s.make(x.numel() * e, e);
    const int64_t back = x.bytes, tmp = out.bytes;
    s.record({&out}, {&x}, {out.sto}, [back, tmp](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        const int r = s.allocate(back, Category::Temporaries);
        s.unref(s.allocate(tmp, Category::Temporaries));
        return std::vector<int>{r};
    });
    return out;
}

T Ops::logSoftmax(const T &x)
{
    return unary(x, x.bytes, x.elem, Keeps::Output); // _log_softmax_backward_data(grad, output)
}

T Ops::gatherColumn(const T &x, int64_t rows)
{
    return unary(x, rows * x.elem, x.elem, Keeps::Input);
}

T Ops::logsumexp(const T &x, int64_t rows)
{
    const int64_t col = rows * x.elem;
    T out = s.make(col, x.elem);
    const int maxes = s.allocate(col, Category::Temporaries);
    const int inf = s.allocate(rows, Category::Temporaries); // the maxes' isinf mask (bool)
    s.unref(inf);
    s.unref(maxes);
    const int shifted = s.allocate(x.bytes, Category::Temporaries); // exp(x - max)
    const int sums = s.allocate(col, Category::Temporaries);
    s.unref(shifted);
    s.unref(sums);
    const int64_t back = x.bytes;
    s.record({&out}, {&x}, {x.sto, out.sto}, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        const int diff = s.allocate(back, Category::Temporaries); // x - result
        const int ex = s.allocate(back, Category::Temporaries);   // .exp()
        const int prod = s.allocate(back, Category::Temporaries); // grad * exp
        s.unref(diff);
        s.unref(ex);
        return std::vector<int>{prod};
    });
    return out;
}

T Ops::sigmoid(const T &x)
{
    return unary(x, x.bytes, x.elem, Keeps::Output); // sigmoid_backward(grad, output)
}

std::pair<T, T> Ops::topk(const T &x, int64_t rows, int k)
{
    T values = s.make(rows * k * x.elem, x.elem);
    T indices = s.make(rows * k * 8, 8);
    const int64_t back = x.bytes;
    s.record({&values}, {&x}, {indices.sto}, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // TopkBackward0: value_selecting_reduction_backward: zeros of the input, scattered into.
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(back, Category::Temporaries)};
    });
    indices.node = -1;
    indices.requiresGrad = false;
    return {values, indices};
}

T Ops::gather(const T &x, const T &index, int64_t outRows, int64_t cols)
{
    T out = s.make(outRows * cols * x.elem, x.elem);
    const int64_t back = x.bytes, idx = index.bytes;
    s.record({&out}, {&x}, {index.sto}, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // index_put_ with accumulate: zeros of the input, then a sort of the index (the values
        // and the permutation, a scratch copy, and a one-byte flag), all freed before it returns.
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        const int z = s.allocate(back, Category::Temporaries);
        const int a = s.allocate(idx, Category::Temporaries);
        const int b = s.allocate(idx, Category::Temporaries);
        s.unref(a);
        const int c = s.allocate(idx, Category::Temporaries);
        const int d = s.allocate(idx, Category::Temporaries);
        const int e = s.allocate(idx, Category::Temporaries);
        const int f = s.allocate(1, Category::Temporaries);
        s.unref(f);
        s.unref(e);
        s.unref(d);
        s.unref(c);
        s.unref(b);
        return std::vector<int>{z};
    });
    return out;
}

T Ops::groupedMm(const T &x, const T &w, const T &offsets, int64_t rows, int64_t in, int64_t outF)
{
    const int elem = w.elem;
    T out = s.make(rows * outF * elem, elem);
    // The CUTLASS grouped GEMM's problem descriptors and workspace, freed when it returns
    // (480 and 67,584 bytes for 8 or 60 experts on the H200).
    auto scratch = [](Sim &s) {
        const int a = s.allocate(480, Category::Temporaries);
        const int b = s.allocate(67584, Category::Temporaries);
        s.unref(b);
        s.unref(a);
    };
    scratch(s);
    std::vector<int> saved = {offsets.sto};
    if (w.requiresGrad && s.gradEnabled())
        saved.push_back(x.sto);
    if (x.requiresGrad && s.gradEnabled())
        saved.push_back(w.sto);
    const int64_t wBytes = w.bytes, xBytes = rows * in * x.elem;
    s.record({&out}, {&x, &w}, saved, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        std::vector<int> r(2, -1);
        if (g[0] < 0)
            return r;
        if (needs[1]) {
            r[1] = s.allocate(wBytes, Category::Temporaries); // every expert's slice, even unused
            scratch(s);
        }
        if (needs[0]) {
            r[0] = s.allocate(xBytes, Category::Temporaries);
            scratch(s);
        }
        return r;
    });
    return out;
}

T Ops::loraExpertWeight(const T &w, const T &lhs, const T &rhs, bool graph)
{
    T out = s.make(w.bytes, w.elem);
    const int copy = s.allocate(lhs.bytes, Category::Temporaries); // lhs.contiguous() for the bmm
    s.unref(copy);
    if (!graph)
        return out;
    const int64_t L = lhs.bytes, R = rhs.bytes;
    s.record({&out}, {&lhs, &rhs}, {lhs.sto, rhs.sto}, [L, R](Sim &s, const std::vector<int> &g, const std::vector<bool> &) {
        // w is frozen: grad lhs = grad @ rhs^T (a result and its copy), grad rhs = lhs^T @ grad
        // (with a copy of lhs), in the order the H200 streams show.
        std::vector<int> r(2, -1);
        if (g[0] < 0)
            return r;
        const int a = s.allocate(L, Category::Temporaries);
        r[0] = s.allocate(L, Category::Temporaries);
        s.unref(a);
        const int b = s.allocate(R, Category::Temporaries);
        const int c = s.allocate(L, Category::Temporaries);
        s.unref(c);
        r[1] = s.allocate(R, Category::Temporaries);
        s.unref(b);
        return r;
    });
    return out;
}

T Ops::maskedFill(const T &x, const T &mask)
{
    T out = s.make(x.bytes, x.elem);
    const int64_t back = x.bytes;
    s.record({&out}, {&x}, {mask.sto}, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // MaskedFillBackward0: grad.masked_fill(mask, 0)
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(back, Category::Temporaries)};
    });
    return out;
}

T Ops::inPlaceVersion(const T &x, const std::vector<const T *> &inputs, const std::vector<int> &saved, BackwardFn fn)
{
    T out = s.detachedView(x);
    if (s.record({&out}, inputs, saved, std::move(fn)) < 0) {
        out.node = x.node;
        out.out = x.out;
        out.requiresGrad = x.requiresGrad && s.gradEnabled();
    }
    return out;
}

T Ops::inPlace(const T &x, const std::vector<int> &saved)
{
    const int64_t back = x.bytes;
    return inPlaceVersion(x, {&x}, saved, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(back, Category::Temporaries)};
    });
}

T Ops::addInPlace(const T &x, const T &other)
{
    return inPlaceVersion(x, {&x, &other}, {}, [](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        std::vector<int> r(2, -1);
        for (size_t i = 0; i < 2; ++i)
            if (needs[i] && g[0] >= 0)
                r[i] = pass(s, g[0]);
        return r;
    });
}

T Ops::clamp(const T &x)
{
    return unary(x, x.bytes, x.elem, Keeps::Input);
}

std::vector<T> Ops::split(const T &x, const std::vector<int64_t> &numels)
{
    std::vector<T> parts;
    for (int64_t n : numels) {
        T p = s.detachedView(x, n * x.elem);
        parts.push_back(p);
    }
    std::vector<T *> outs;
    for (T &p : parts)
        outs.push_back(&p);
    const int64_t back = x.bytes;
    const int id = s.record(outs, {&x}, {}, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // SplitBackward0: torch.cat of the parts' gradients (zeros for a missing one).
        bool any = false;
        for (int k : g)
            any = any || k >= 0;
        if (!needs[0] || !any)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(back, Category::Temporaries)};
    });
    if (id < 0)
        for (T &p : parts) {
            p.node = x.node;
            p.out = x.out;
            p.param = x.param;
            p.requiresGrad = x.requiresGrad && s.gradEnabled();
        }
    return parts;
}

T Ops::sumGroups(const T &x, int64_t outNumel)
{
    T out = s.make(outNumel * x.elem, x.elem);
    const int64_t back = x.bytes;
    s.record({&out}, {&x}, {}, [back](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        // SumBackward1 expands the gradient (a view); the consumer, IndexBackward0, makes it
        // contiguous before anything else: a copy of the input's size, made here.
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(back, Category::Temporaries)};
    });
    return out;
}

// See Note [Fused loss chunks] (docs/estimator.md).
T Ops::fusedLinearCrossEntropy(const T &x, const T &w, int64_t b, int64_t seq, int64_t hidden, int64_t vocab,
                                  int computeElem)
{
    // LigerForCausalLMLoss (liger_kernel/transformers/model/loss_utils.py): the labels padded by
    // one and shifted, a contiguous int64 copy, then LigerFusedLinearCrossEntropyFunction
    // (liger_kernel/ops/fused_linear_cross_entropy.py, reduction "mean") whose forward computes
    // the gradients chunk by chunk and keeps them for backward:
    //   grad_input = zeros_like(_input)        [tokens, hidden] in the input's dtype, saved
    //   grad_weight = zeros_like(weight)       [vocab, hidden] in the weight's dtype, when it trains
    //   loss_1d = zeros(tokens, fp32); target_mask = target != ignore_index (and its .sum())
    //   per chunk: logits_chunk = x_chunk @ weight.t()   [chunk, vocab], softmax grad in place
    //              grad_input[chunk] = grad_logits_chunk @ weight   (a [chunk, hidden] temporary)
    //              addmm(grad_weight, grad_logits.t(), x_chunk, out=grad_weight)  (in place; an
    //              fp32 input under autocast is cast to the chunk's dtype first)
    //   chunk = min(tokens, next_pow2(ceil(tokens / ceil(vocab / hidden)))): about tokens x hidden
    // Backward hands the saved gradients on (element_mul in place when grad_output != 1).
    const int64_t tokens = b * seq;
    const int padded = s.allocate((tokens + b) * 8, Category::Temporaries);
    const int target = s.allocate(tokens * 8, Category::Temporaries);
    s.unref(padded);
    const int gradInput = s.allocate(tokens * hidden * x.elem, Category::Logits);
    const bool weightGrad = w.requiresGrad && s.gradEnabled();
    const int gradWeight = weightGrad ? s.allocate(w.bytes, Category::Logits) : -1;
    const int loss1d = s.allocate(tokens * 4, Category::Temporaries);
    const int mask = s.allocate(tokens, Category::Temporaries);
    const int count = s.allocate(8, Category::Temporaries); // target_mask.sum(), then .item()
    s.unref(count);
    const int64_t chunk = fusedLossChunkRows(tokens, hidden, vocab);
    for (int64_t start = 0; start < tokens; start += chunk) {
        const int64_t n = std::min(chunk, tokens - start);
        const int cast = x.elem != computeElem ? s.allocate(n * hidden * computeElem, Category::Temporaries) : -1;
        const int logits = s.allocate(n * vocab * computeElem, Category::Logits);
        s.blasWorkspace(0);
        if (cast >= 0)
            s.unref(cast); // autocast's copy of the chunk, gone after the mm
        const int gi = s.allocate(n * hidden * computeElem, Category::Temporaries);
        s.unref(gi); // copied into grad_input[start:end]
        if (weightGrad && w.elem == 4 && computeElem != 4) {
            // fp32 weight under autocast: addmm(grad_weight, grad_logits.t(), input_chunk,
            // out_dtype=float32, out=grad_weight) in place, the input chunk cast to the logits' dtype.
            if (x.elem != computeElem) {
                const int in = s.allocate(n * hidden * computeElem, Category::Temporaries);
                s.unref(in);
            }
        } else if (weightGrad) {
            // grad_weight += torch.mm(grad_logits_chunk.t(), _input_chunk).float(): a [vocab,
            // hidden] product in the logits' dtype and its fp32 copy, every chunk (Liger ead96b6;
            // measured with the real library on the H200, full fine-tuning: 4.7-8.9% of the peak).
            const int prod = s.allocate(vocab * hidden * computeElem, Category::Temporaries);
            if (computeElem != 4) {
                const int f32 = s.allocate(vocab * hidden * 4, Category::Temporaries);
                s.unref(prod);
                s.unref(f32);
            } else {
                s.unref(prod);
            }
        }
        s.unref(logits); // del grad_logits_chunk at the end of the iteration
    }
    s.unref(mask);
    T loss = s.make(4, 4);
    s.unref(loss1d); // torch.sum(loss_1d) is the loss; loss_1d goes with the function's frame
    std::vector<int> saved = {gradInput};
    if (gradWeight >= 0)
        saved.push_back(gradWeight);
    s.record({&loss}, {&x, &w}, saved, [gradInput, gradWeight](Sim &s, const std::vector<int> &g, const std::vector<bool> &nd) {
        std::vector<int> r{-1, -1};
        if (g[0] < 0)
            return r;
        if (nd[0]) {
            s.ref(gradInput); // handed on as the input's gradient (the node's saved copy goes after)
            r[0] = gradInput;
        }
        if (nd[1] && gradWeight >= 0) {
            s.ref(gradWeight);
            r[1] = gradWeight;
        }
        return r;
    });
    s.unref(gradInput);
    if (gradWeight >= 0)
        s.unref(gradWeight);
    s.unref(target);
    return loss;
}

T Ops::nllLoss(const T &lp, int target)
{
    T loss = s.make(lp.elem, lp.elem);
    const int totalWeight = s.allocate(lp.elem, Category::Activations);
    s.record({&loss}, {&lp}, {target, totalWeight}, [n = lp.bytes](Sim &s, const std::vector<int> &g, const std::vector<bool> &nd) {
        if (!nd[0] || g[0] < 0)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(n, Category::Logits)}; // nll_loss_backward: zeros + scatter
    });
    s.unref(totalWeight);
    return loss;
}

T Ops::causalLmLoss(const T &logits, int64_t b, int64_t seq, int64_t vocab)
{
    // ForCausalLMLoss: logits.float(); labels padded with ignore_index and shifted (a contiguous
    // copy, saved by nll_loss); cross_entropy = log_softmax (saves its output) + nll_loss (a
    // 4-byte loss and a saved 4-byte total_weight).
    const int64_t tokens = b * seq;
    Ops o(s);
    T f = o.to(logits, 4);
    const int padded = s.allocate((tokens + b) * 8, Category::Temporaries);
    const int target = s.allocate(tokens * 8, Category::Activations);
    T lp = s.make(tokens * vocab * 4, 4, Category::Logits);
    s.record({&lp}, {&f}, {lp.sto}, [n = tokens * vocab * 4](Sim &s, const std::vector<int> &g, const std::vector<bool> &nd) {
        if (!nd[0] || g[0] < 0)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(n, Category::Logits)}; // _log_softmax_backward_data
    });
    T loss = o.nllLoss(lp, target);
    s.unref(target);
    s.drop(lp);
    s.drop(f);
    s.unref(padded);
    return loss;
}

} // namespace headroom::sim

namespace headroom {

int64_t fusedLossChunkRows(int64_t tokens, int64_t hidden, int64_t vocab)
{
    const int64_t inc = (vocab + hidden - 1) / std::max<int64_t>(1, hidden);
    int64_t chunk = 1;
    while (chunk < (tokens + inc - 1) / std::max<int64_t>(1, inc))
        chunk *= 2;
    return std::min(chunk, tokens);
}

} // namespace headroom
