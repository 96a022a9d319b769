#pragma once
// The ATen ops a Hugging Face training step runs, as the autograd simulator sees them: what each
// allocates in forward, what it saves for backward, and what its backward allocates, in order.
// Each recipe names its PyTorch op (derivatives.yaml) and was checked against allocation streams
// recorded on the H200 (tests/data/corpus/h200-timelines.tar.xz). Internal to core.

#include "autograd.h"

namespace headroom::sim {

// Tensor shape bookkeeping is by element counts and element sizes; shapes matter only where an
// op's memory depends on them (broadcasting reductions, attention's heads and lengths).
class Ops
{
public:
    explicit Ops(Sim &s)
        : s(s)
    {
    }
    Sim &s;

    // ---- elementwise and casts
    // x.to(dtype): a copy when the dtype changes; ToCopyBackward casts the gradient back.
    T to(const T &x, int elem);
    // a * b, the result in `elem`; `aFull`/`bFull`: whether the operand has the result's shape
    // (else it is broadcast, and its gradient is summed down after the node, in validate_outputs).
    T mul(const T &a, const T &b, int64_t numel, int elem, bool aFull = true, bool bFull = true,
          int64_t reduceRows = 0);
    // x * scalar: MulBackward1 saves nothing.
    T scale(const T &x, int elem = 0);
    // a + b (same shape): AddBackward0 hands the same gradient to both.
    T add(const T &a, const T &b, int elem = 0);
    // x + scalar: passes the gradient through.
    T addScalar(const T &x);
    T neg(const T &x);
    T pow2(const T &x);       // PowBackward0 saves x
    T rsqrt(const T &x);      // RsqrtBackward0 saves its result
    T tanh(const T &x);       // TanhBackward0 saves its result
    T mean(const T &x, int64_t outNumel); // MeanBackward1: the gradient expanded and divided
    T activation(const T &x, const std::string &kind); // silu / gelu (ATen): saves its input
    T dropout(const T &x, double p); // native_dropout: saves a bool mask
    // x.contiguous() of a non-contiguous view: a copy; CloneBackward passes through.
    T copy(const T &x);

    // ---- shape (views allocate nothing; their backward passes the gradient on)
    T viewOf(const T &x);
    // x.view(b, s, heads, d).transpose(1, 2) of a projection's output: a view; its backward gets
    // the gradient in (b, heads, s, d) layout, and `copyBack` says that layout is contiguous there
    // (after rotary embedding), so reshaping it back to (b, s, heads * d) copies it.
    T headsView(const T &x, bool copyBack);
    // torch.cat of tensors; CatBackward hands out views of the gradient.
    T cat(const std::vector<const T *> &parts, int64_t numel, int elem);
    // x[..., a:b]: a view; SliceBackward allocates a zero tensor of x's size and copies in.
    T slice(const T &x, int64_t numel);

    // ---- matrices
    // nn.Linear / F.linear over `tokens` rows: weight [out, in], optional bias [out].
    T linear(const T &x, const T &w, const T *bias, int64_t tokens, int64_t in, int64_t out, int elem);
    T embedding(const T &w, const T &ids, int64_t tokens, int64_t vocab, int64_t hidden);

    // ---- attention: q, k, v as (b, heads, s, d); returns (b, heads, s, d) in q's dtype.
    struct AttnShape
    {
        int64_t b = 1, s = 1, heads = 1, kvHeads = 1, dq = 1, dv = 1;
    };
    T sdpaFlash(const T &q, const T &k, const T &v, const AttnShape &a, int elem);
    T sdpaEfficient(const T &q, const T &k, const T &v, const AttnShape &a, int elem);
    T sdpaMath(const T &q, const T &k, const T &v, const AttnShape &a, int elem);
    T eagerAttention(const T &q, const T &k, const T &v, const T *mask, const AttnShape &a, int elem,
                     double softcap);

    // ---- loss: logits (tokens x vocab) -> scalar, as ForCausalLMLoss does it.
    T causalLmLoss(const T &logits, int64_t b, int64_t s, int64_t vocab);

    // Sum over the leading rows of a [rows, cols] tensor into [cols] (bias and norm-weight
    // gradients): what the CUDA reduction allocates besides its result.
    void reduceRows(int64_t rows, int64_t cols, int elem);

private:
    int gradAlloc(int64_t bytes) { return s.allocate(bytes, Category::Temporaries); }
};

} // namespace headroom::sim
