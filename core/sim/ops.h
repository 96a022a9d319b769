#pragma once
// The ATen ops a Hugging Face training step runs, as the autograd simulator sees them: what each
// allocates in forward, what it saves for backward, and what its backward allocates, in order.
// Each recipe names its PyTorch op (derivatives.yaml) and was checked against allocation streams
// recorded on the H200 (tests/data/corpus/h200-timelines.tar.xz). Internal to core.

#include "autograd.h"

namespace headroom::sim {

// A gradient handed on unchanged (views, adds): the next node holds its own reference.
inline int pass(Sim &s, int g)
{
    s.ref(g);
    return g;
}

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
    // a - b (same shape): SubBackward0 hands the gradient to a and -grad (a new tensor) to b.
    T sub(const T &a, const T &b, int elem = 0);
    // a + b or a - b (`subtract`) into `outBytes` in `elem`, either operand broadcast (a - b of a
    // per-row statistic, a pairwise difference): AddBackward0 / SubBackward0 hand the gradient on
    // (negated for b), then each broadcast operand's gradient is summed down to its shape
    // (validate_outputs). Defined in deltanet.cpp.
    T addBroadcast(const T &a, const T &b, int64_t outBytes, int elem, bool subtract);
    // x + scalar: passes the gradient through.
    T addScalar(const T &x);
    T neg(const T &x);
    T pow2(const T &x, int elem = 0); // PowBackward0 saves x; `elem`: autocast's fp32 output
    T rsqrt(const T &x);      // RsqrtBackward0 saves its result
    T tanh(const T &x);       // TanhBackward0 saves its result
    T relu(const T &x);       // ReluBackward0 saves its result
    T mean(const T &x, int64_t outNumel); // MeanBackward1: the gradient expanded and divided
    T activation(const T &x, const std::string &kind); // silu / gelu (ATen): saves its input
    T dropout(const T &x, double p); // native_dropout: saves a bool mask
    // PEFT's lora.Linear.forward after its base layer, over the base output `y` (consumed) and
    // the layer's input `x`: x cast to the adapters' dtype (castInput), dropout, lora_B(lora_A(x))
    // (each weight as `weight` hands it: a view, or autocast's copy), times the scaling, added to
    // y, and the sum cast to resultElem (0: left as it is, PEFT's bnb Linear4bit).
    struct LoraCall
    {
        int64_t rows, in, out, rank;
        double dropout;
        bool castInput, amp;
        int resultElem;
    };
    T loraAdd(T &y, const T &x, const T &a, const T &b, const LoraCall &k, const std::function<T(const T &)> &weight);
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
    // bitsandbytes matmul_4bit over `tokens` rows of x (already in the compute dtype `elem`) with
    // an NF4 weight (a parameter) of out x in (bitsandbytes/autograd/_functions.py MatMul4Bit): the weight is
    // dequantized to `elem` for F.linear (the CUDA gemm_4bit's dequant + F.linear path), and
    // again in backward for the input's gradient; nothing of x is saved. `nested`: the absmax
    // is itself 8-bit (double quantization) and is dequantized first.
    T linear4bit(const T &x, int64_t tokens, int64_t in, int64_t outF, int elem, bool nested, bool biased = false);

    // ---- attention: q, k, v as (b, heads, s, d); returns (b, heads, s, d) in q's dtype.
    struct AttnShape
    {
        int64_t b = 1, s = 1, heads = 1, kvHeads = 1, dq = 1, dv = 1;
    };
    T sdpaFlash(const T &q, const T &k, const T &v, const AttnShape &a, int elem);
    // `bias`: an additive mask (b, 1, s, s) the op saves (SDPA converts a boolean mask to one).
    // `wide`: heads wider than 256 in 16 bits (Gemma 4's global layers; Note [Wide-head SDPA]).
    T sdpaEfficient(const T &q, const T &k, const T &v, const AttnShape &a, int elem, const T *bias = nullptr,
                    bool wide = false);
    // transformers' repeat_kv: (b, kv_heads, s, d) expanded to every head and reshaped (a copy);
    // ExpandBackward0 sums the gradient back to kv_heads.
    T repeatKv(const T &x, int64_t fullBytes);
    T sdpaMath(const T &q, const T &k, const T &v, const AttnShape &a, int elem);
    // a @ b of `outBytes` in `elem` (the attention's batched matmuls): saves both operands.
    // `viewsBack`: torch.matmul of 4-D operands folds them to 3-D and its gradients come back
    // through views (reshape), which the InputBuffer cannot add into in place.
    T bmm(const T &a, const T &b, int64_t outBytes, int elem, bool viewsBack = false);
    // The math path of SDPA handed a boolean mask, for 16-bit q, k, v and fewer kv heads (Falcon's
    // multi-query attention; Note [SDPA math path in fp32]).
    T sdpaMathMasked(const T &q, const T &k, const T &v, const AttnShape &a, int elem);
    // How a family writes eager_attention_forward: Llama upcasts the softmax to fp32; GPT-2
    // keeps the model dtype, applies attention dropout, and its q, k, v are strided views of
    // c_attn's output, which torch.matmul copies contiguous (and saves) first.
    struct EagerStyle
    {
        double softcap = 0.0;
        bool softmaxFp32 = true;
        bool stridedQkv = false;
        double dropout = 0.0;
        // fp16 scores: softmax(x, dtype=float32) runs CUDA's fused half-to-float kernel; bf16
        // scores are converted to fp32 first (Note [Softmax upcast]).
        bool halfToFloat = false;
        // q and k laid out (b, heads, s, d) in memory (a concatenated rotary): matmul folds them
        // as views (Note [Eager matmul copies]).
        bool headsMajor = false;
        // GPT-OSS: a learned sink logit per head (the parameter; Note [Attention sinks]). The
        // function's locals that live until it returns go to `locals` for the caller to drop
        // after its transpose copy.
        const T *sinks = nullptr;
        std::vector<T> *locals = nullptr;
        // Where the probabilities the function returns (attn_weights) go; dropped when unset
        // (Note [Returned attention weights]).
        T *returned = nullptr;
    };
    T eagerAttention(const T &q, const T &k, const T &v, const T *mask, const AttnShape &a, int elem,
                     const EagerStyle &style);

    // ---- mixture of experts (transformers/integrations/moe.py, grouped_mm path)
    // softmax over the last dimension, its output in `outElem` bytes per element (0: x's; fp16
    // x straight to fp32 is CUDA's fused half-to-float kernel): SoftmaxBackward0 saves its result,
    // and its backward makes a temporary of the gradient's size (Note [Softmax backward temporary]).
    T softmax(const T &x, int outElem = 0);
    // log_softmax over the last dimension: saves its result; its backward allocates the gradient only.
    T logSoftmax(const T &x);
    // sigmoid: SigmoidBackward0 saves its result.
    T sigmoid(const T &x);
    // torch.topk over `rows` rows: values (x's dtype) and int64 indices (saved); TopkBackward0
    // scatters the gradient into zeros of the input's size.
    std::pair<T, T> topk(const T &x, int64_t rows, int k);
    // x[index] along the first dimension, `outRows` rows of `cols`: IndexBackward0 saves the
    // int64 index; its backward is index_put_(zeros_like(x), index, grad, accumulate=True), which
    // sorts the index (int64 buffers of the index's size).
    T gather(const T &x, const T &index, int64_t outRows, int64_t cols);
    // torch.nn.functional.grouped_mm(x, w.transpose(-2, -1), offs): `rows` rows of `in` through
    // a stacked [experts, out, in] weight. Saves x (for the weight) and w (for the input); its
    // backward makes the whole weight's gradient first, then the input's.
    T groupedMm(const T &x, const T &w, const T &offsets, int64_t rows, int64_t in, int64_t outF);
    // A frozen stacked experts weight w through PEFT's LoRA parametrization: w + scaling x (lhs @
    // rhs) over all experts at once, into a tensor of w's size (with a contiguous copy of the
    // permuted lhs while the batched matmul runs). `graph`: recorded for autograd (gradients for
    // lhs and rhs); without it the result is only made (register_parametrization's check).
    T loraExpertWeight(const T &w, const T &lhs, const T &rhs, bool graph);
    // torch.gather(x, -1, index) of one column per row (`rows` of them): GatherBackward0 keeps x
    // (gather_backward takes self: a view keeps its storage) and scatters the gradient into zeros
    // of x's size.
    T gatherColumn(const T &x, int64_t rows);
    // torch.logsumexp(x, -1) over `rows` rows (fp32): the result and a row's scratch, then a
    // transient of x's size (exp(x - max)); LogsumexpBackward0 keeps x and the result, and makes
    // x - result, its exp and their product with the gradient, keeping the product.
    T logsumexp(const T &x, int64_t rows);
    // x.masked_fill(mask, 0) (out of place): saves the mask; backward masks the gradient (a copy).
    T maskedFill(const T &x, const T &mask);
    // An in-place op on x (masked_fill_, div_): the same storage, a new grad_fn that keeps
    // `saved`; its backward makes one gradient of x's size.
    T inPlace(const T &x, const std::vector<int> &saved);
    // x.add_(other), other of x's shape: the same storage, a new grad_fn that saves nothing and
    // hands the gradient to both.
    T addInPlace(const T &x, const T &other);
    // x.clamp(min, max): ClampBackward1 keeps x (a view keeps its storage) and masks the gradient.
    T clamp(const T &x);
    // x.split / x.chunk along the last dimension into parts of `numels` elements: views;
    // SplitBackward0 concatenates the parts' gradients into one new tensor of x's size.
    std::vector<T> split(const T &x, const std::vector<int64_t> &numels);
    // x.view(rows, k, cols).sum(dim=1) -> (rows, cols): SumBackward1 expands the gradient.
    T sumGroups(const T &x, int64_t outNumel);

    // ---- normalisation
    // nn.LayerNorm over `rows` x `cols` (the output in `outElem`): native_layer_norm saves its
    // input and the per-row mean and rstd (fp32). `strided`: the input is not contiguous, and the
    // kernel copies it contiguous first, in forward and again in backward (freed each time).
    T layerNorm(const T &x, const T &w, const T &bias, int64_t rows, int64_t cols, int outElem, bool strided = false);
    // RMSNorm's core on an fp32 x over `rows` rows: x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps).
    // The mean goes to `variance` for the caller to drop where the code's local goes, or, with
    // `meanInline` (one expression, Gemma's _norm), as soon as the sum is made. `powInverse`:
    // x * pow(mean + eps, -0.5), whose node keeps the sum (Gemma4RMSNorm).
    T rmsNormalize(const T &x32, int64_t rows, bool meanInline, T &variance, bool powInverse = false);

    // ---- linear attention (defined in deltanet.cpp; Note [Gated DeltaNet])
    T exp(const T &x);      // ExpBackward0 saves its result
    T softplus(const T &x); // SoftplusBackward0 saves its input

    // F.conv1d of a (b, C, s) view over a depthwise [C, 1, k] weight, padded k - 1 on both sides:
    // `outBytes` (b, C, s + k - 1). It copies the strided input contiguous first (freed), and saves
    // the input and the weight.
    T conv1dDepthwise(const T &x, const T &w, int64_t outBytes);
    // x.cumsum(dim): a scan temporary beside the output; CumsumBackward0 saves nothing.
    T cumsum(const T &x);
    // F.pad(x, ...) with zeros into `outBytes` (a new tensor even with nothing to pad);
    // ConstantPadNdBackward0 narrows the gradient back (a copy of x's size).
    T pad(const T &x, int64_t outBytes);
    // torch.linalg.solve_triangular(a, b, upper=False, unitriangular=True): a result of b's size
    // (cuBLAS's batched trsm, with two small info buffers); saves a and the result.
    T solveTriangular(const T &a, const T &b);
    // base[..., i, ...] = src: copy_ into a view of `base` (CopySlices). Returns the new version
    // of base (the same storage); backward hands base a clone of the gradient with the slice
    // zeroed, and src the slice (a copy of its size).
    T copyIntoSlice(const T &base, const T &src);

    // ---- loss: logits (tokens x vocab) -> scalar, as ForCausalLMLoss does it.
    T causalLmLoss(const T &logits, int64_t b, int64_t s, int64_t vocab);
    // nll_loss over log-probabilities `lp` and the `target` storage: a scalar in lp's dtype; keeps
    // the target and total_weight; its backward makes zeros of lp's size and scatters into them.
    T nllLoss(const T &lp, int target);
    // ---- loss: hidden states (tokens x hidden) and the lm_head weight -> scalar, without the
    // logits: Liger's fused linear cross-entropy. `w` is the lm_head parameter (its gradient is
    // made in forward when it trains); `cast` the autocast copy the chunks' matmuls use, if any.
    T fusedLinearCrossEntropy(const T &x, const T &w, int64_t b, int64_t s, int64_t hidden, int64_t vocab,
                              int computeElem);

    // Sum over the leading rows of a [rows, cols] tensor into [cols] (bias and norm-weight
    // gradients): what the CUDA reduction allocates besides its result.
    void reduceRows(int64_t rows, int64_t cols, int elem);

private:
    // An in-place op's result: x's storage, with a new grad_fn over `inputs` (x first) when one is
    // recorded; otherwise x as it was.
    T inPlaceVersion(const T &x, const std::vector<const T *> &inputs, const std::vector<int> &saved, BackwardFn fn);
    T sinkProbabilities(T &x, const T &sinks, int64_t rows, int64_t scores, int elem, std::vector<T> *locals);
    int gradAlloc(int64_t bytes) { return s.allocate(bytes, Category::Temporaries); }
    // An op of `outBytes` output in `elem` whose backward allocates one tensor of x's size (the
    // input's gradient) and nothing else; its node keeps x, its output, or nothing.
    enum class Keeps { Nothing, Input, Output };
    T unary(const T &x, int64_t outBytes, int elem, Keeps keeps);
};

} // namespace headroom::sim
