// The estimator: an op-level ledger of what one steady-state training step keeps alive.
//
// Every allocation below names the PyTorch op or HF Transformers / PEFT code path that makes
// it. docs/estimator.md explains each term; tests/data/hf_reference_h200.json holds the
// measurements they are checked against (tests/tst_accuracy.cpp).
//
// Speed: a decoder layer is simulated once (plus layer 0, which differs under LoRA) and the
// other layers are composed arithmetically. Within the forward pass the live total only grows
// from layer to layer, and within backward it changes by the same amount per layer, so the
// peak over identical layers is always at the first or the last of them.

#include "headroom/estimator.h"

#include "headroom/error.h"
#include "headroom/timeline.h"

#include "headroom/simulation.h"

#include <cstdio>
#include <algorithm>
#include <sstream>
#include <set>
#include <cmath>
#include <map>

namespace headroom {

int64_t Breakdown::total() const
{
    int64_t t = 0;
    for (auto b : bytes)
        t += b;
    return t;
}

int64_t Breakdown::allocated() const
{
    return total() - (*this)[Category::AllocatorSlack] - (*this)[Category::CudaContext];
}

namespace {

using C = Category;

// CUDACachingAllocator::round_size: every block is a multiple of 512 bytes.
int64_t roundBlock(int64_t b)
{
    return b <= 0 ? 0 : checkedMul((b + 511) / 512, 512);
}

class Ledger
{
public:
    void alloc(C c, int64_t bytes)
    {
        bytes = roundBlock(bytes);
        m_cur[c] += bytes;
        m_total += bytes;
        if (m_total > m_peak) {
            m_peak = m_total;
            m_atPeak = m_cur;
        }
    }
    void free(C c, int64_t bytes)
    {
        bytes = roundBlock(bytes);
        m_cur[c] -= bytes;
        m_total -= bytes;
    }
    void move(C from, C to, int64_t bytes)
    {
        bytes = roundBlock(bytes);
        m_cur[from] -= bytes;
        m_cur[to] += bytes;
    }
    // Add a breakdown already rounded (a composed layer), `times` times.
    void add(const Breakdown &b, int64_t times = 1)
    {
        for (size_t i = 0; i < b.bytes.size(); ++i) {
            const int64_t v = checkedMul(b.bytes[i], times);
            m_cur.bytes[i] += v;
            m_total += v;
        }
        if (m_total > m_peak) {
            m_peak = m_total;
            m_atPeak = m_cur;
        }
    }
    // A momentary excursion on top of the current state (a layer's inner peak).
    void probe(const Breakdown &b)
    {
        const int64_t t = m_total + b.total();
        if (t > m_peak) {
            m_peak = t;
            m_atPeak = m_cur;
            for (size_t i = 0; i < b.bytes.size(); ++i)
                m_atPeak.bytes[i] += b.bytes[i];
        }
    }
    void resetPeak()
    {
        m_peak = m_total;
        m_atPeak = m_cur;
    }
    int64_t total() const { return m_total; }
    int64_t peak() const { return m_peak; }
    const Breakdown &current() const { return m_cur; }
    const Breakdown &atPeak() const { return m_atPeak; }

private:
    Breakdown m_cur;
    Breakdown m_atPeak;
    int64_t m_total = 0;
    int64_t m_peak = 0;
};

Breakdown minus(const Breakdown &a, const Breakdown &b)
{
    Breakdown r;
    for (size_t i = 0; i < a.bytes.size(); ++i)
        r.bytes[i] = a.bytes[i] - b.bytes[i];
    return r;
}

// Array indices for the linear modules, in LinearModule's order (loraTargetMask's mask).
enum Module {
    ModQ = int(LinearModule::Q),
    ModK = int(LinearModule::K),
    ModV = int(LinearModule::V),
    ModO = int(LinearModule::O),
    ModGate = int(LinearModule::Gate),
    ModUp = int(LinearModule::Up),
    ModDown = int(LinearModule::Down),
    ModuleCount = kLinearModuleCount
};

struct Ctx
{
    const ModelArch &m;
    const TrainingConfig &cfg;
    int64_t T = 0, b = 0, s = 0, h = 0, qOut = 0, kvOut = 0, nh = 0, V = 0;
    int c = 2;  // activation bytes
    int r = 2;  // residual-stream bytes (fp32 under autocast: the embedding is not autocast)
    int p = 2;  // parameter / gradient / optimizer-state bytes
    bool amp = false;
    bool full = true;
    bool qlora = false;
    std::array<bool, ModuleCount> lora{};
    ExpertsLora experts; // PEFT's ParamWrappers on the stacked experts
    int loraBytes = 4; // PEFT's autocast_adapter_dtype=True keeps adapters in fp32
    int64_t weightCopies = 1; // experts share one simulated MLP: E weight copies under autocast
    bool mixedPrecisionPolicy = false; // FSDP2's: bf16 compute over fp32 shards
    std::vector<std::string> notes;

    Ctx(const ModelArch &model, const TrainingConfig &config)
        : m(model)
        , cfg(config)
    {
        T = checkedMul(config.microBatch, config.seqLen);
        b = config.microBatch;
        s = config.seqLen;
        h = model.hiddenSize;
        nh = model.numHeads;
        qOut = model.numHeads * model.headDim;
        kvOut = model.numKvHeads * model.headDim;
        V = model.vocabSize;
        c = computeBytes(config.precision);
        amp = isAmp(config.precision);
        p = parameterBytes(config.precision);
        if (amp && config.zeroStage >= 2) {
            // FSDP2 with MixedPrecisionPolicy(param_dtype=bf16): each unit's parameters are
            // all-gathered in bf16 and its inputs cast to bf16 (cast_forward_inputs), so the
            // step runs as pure bf16 (autocast finds nothing to cast); the sharded fp32 parameters,
            // their fp32 gradients (reduce_dtype) and the optimizer state stay fp32.
            amp = false;
            mixedPrecisionPolicy = true;
        }
        r = amp ? 4 : c;
        full = config.finetune == FineTune::Full;
        qlora = config.finetune == FineTune::QLoRA;
        if (qlora && config.zeroStage < 2) {
            // peft.prepare_model_for_kbit_training makes every parameter that is not 4-bit fp32,
            // and with fp32 embeddings and norms every activation is fp32 (as the simulator,
            // program.cpp Run). FSDP-QLoRA recipes skip it (TRL's sharded QLoRA) and stay in bf16.
            p = 4;
            if (!amp)
                c = r = 4;
        }
        if (!full) {
            lora = loraAdaptedModules(model, config.lora.targets); // indexed like Module
            experts = expertsLora(model, config.lora.targets);
        }
    }
    int64_t tok(int64_t bytesPerToken) const { return checkedMul(T, bytesPerToken); }
    int64_t inFeatures(Module mod) const { return linearInFeatures(m, LinearModule(mod)); }
    int64_t outFeatures(Module mod) const { return linearOutFeatures(m, LinearModule(mod)); }
};

// The input of a group of Linears (q/k/v share the norm output; gate/up share it too).
struct Input
{
    int64_t tokens = 0;
    int64_t features = 0;
    int bytes = 2;
    bool saved = false;     // a consumer saved this very tensor for backward
    bool requiresGrad = true; // false for layer 0's input under LoRA (frozen embedding)
    int64_t size() const { return checkedMul(checkedMul(tokens, features), bytes); }
};

// One nn.Linear (optionally wrapped by PEFT LoRA or bitsandbytes Linear4bit) reading `in`.
// Returns the output's byte size, which is allocated as a temporary.
int64_t linear(Ledger &L, Ctx &x, Module mod, Input &in, int64_t outF, bool grad)
{
    const int64_t n = in.tokens;
    const int64_t inF = in.features;
    // Output in the compute dtype (autocast runs Linear in bf16/fp16).
    const int64_t outBytes = checkedMul(checkedMul(n, outF), x.c);
    if (x.amp && !x.qlora) {
        // Autocast casts the fp32 weight to bf16 for the matmul (cached for the whole forward when it
        // is a trainable leaf); mm saves that copy whenever a gradient needs it.
        const int64_t copy = checkedMul(checkedMul(checkedMul(inF, outF), 2), x.weightCopies);
        const bool saved = grad && (x.full || in.requiresGrad);
        L.alloc(saved ? C::Activations : C::Temporaries, copy);
        if (!saved)
            L.free(C::Temporaries, copy);
    }
    if (x.full) {
        if (grad) {
            // torch.mm saves its input for the weight gradient. Under autocast each Linear gets its
            // own low-precision copy of an fp32 input (autocast caches only leaf weights).
            if (x.amp && in.bytes == 4)
                L.alloc(C::Activations, checkedMul(n, inF) * 2);
            else
                in.saved = true;
        } else if (x.amp && in.bytes == 4) {
            L.alloc(C::Temporaries, checkedMul(n, inF) * 2);
            L.free(C::Temporaries, checkedMul(n, inF) * 2);
        }
        L.alloc(C::Temporaries, outBytes);
        return outBytes;
    }
    // Frozen base: torch.mm saves nothing of the input when the weight needs no gradient
    // (autograd only saves what a required gradient uses). bitsandbytes MatMul4Bit saves the packed
    // weight only, and dequantizes it to the compute dtype in forward and again in backward.
    if (x.qlora) {
        L.alloc(C::Temporaries, checkedMul(checkedMul(inF, outF), x.c));
        L.free(C::Temporaries, checkedMul(checkedMul(inF, outF), x.c));
    }
    if (x.amp && in.bytes == 4) {
        L.alloc(C::Temporaries, checkedMul(n, inF) * 2);
        L.free(C::Temporaries, checkedMul(n, inF) * 2);
    }
    L.alloc(C::Temporaries, outBytes); // base result
    if (!x.lora[mod])
        return outBytes;

    // PEFT lora.Linear.forward: x = self._cast_input_dtype(x, lora_A.weight.dtype) (fp32 adapters),
    // then lora_B(lora_A(dropout(x))) * scaling, added to the base result.
    const int64_t nIn = checkedMul(n, inF);
    const int rank = x.cfg.lora.rank;
    const bool dropout = x.cfg.lora.dropout > 0.0;
    int64_t castBytes = 0;
    if (in.bytes != 4) {
        castBytes = nIn * 4; // x.to(float32), a new tensor
        L.alloc(grad && !dropout && !x.amp ? C::Activations : C::Temporaries, castBytes);
    }
    if (dropout) {
        // native_dropout saves its bool mask; its output is what lora_A saves.
        L.alloc(grad ? C::Activations : C::Temporaries, nIn);
        L.alloc(grad && !x.amp ? C::Activations : C::Temporaries, nIn * 4);
        if (castBytes)
            L.free(C::Temporaries, castBytes);
        castBytes = nIn * 4;
    } else if (castBytes == 0 && grad && !x.amp) {
        in.saved = true; // fp32 training: lora_A saves the shared input itself
    }
    if (x.amp) {
        // lora_A under autocast casts its fp32 input to bf16 and saves that copy.
        L.alloc(grad ? C::Activations : C::Temporaries, nIn * 2);
        if (castBytes)
            L.free(C::Temporaries, castBytes);
    }
    const int loraAct = x.amp ? 2 : 4;
    const int64_t aOut = checkedMul(checkedMul(n, rank), loraAct); // saved by lora_B
    L.alloc(grad ? C::Activations : C::Temporaries, aOut);
    const int64_t bOut = checkedMul(checkedMul(n, outF), loraAct);
    L.alloc(C::Temporaries, bOut);                                 // lora_B output
    L.alloc(C::Temporaries, bOut);                                 // * scaling
    L.free(C::Temporaries, bOut);
    const int64_t sumBytes = checkedMul(checkedMul(n, outF), std::max(loraAct, x.c)); // type promotion
    L.alloc(C::Temporaries, sumBytes);                             // result + ...
    L.free(C::Temporaries, bOut);
    L.free(C::Temporaries, outBytes);
    if (sumBytes != outBytes) {
        L.alloc(C::Temporaries, outBytes);                         // result.to(torch_result_dtype)
        L.free(C::Temporaries, sumBytes);
    }
    if (!grad) {
        if (!x.amp && !dropout && in.bytes != 4)
            L.free(C::Temporaries, castBytes);
        if (dropout) {
            L.free(C::Temporaries, nIn);
            L.free(C::Temporaries, nIn * 4);
        }
        if (x.amp)
            L.free(C::Temporaries, nIn * 2);
        L.free(C::Temporaries, aOut);
    }
    return outBytes;
}

void releaseInput(Ledger &L, Input &in, bool keepAsActivation)
{
    if (in.saved && keepAsActivation)
        L.move(C::Temporaries, C::Activations, in.size());
    else
        L.free(C::Temporaries, in.size());
}

// LlamaRMSNorm / LayerNorm over a tensor of `features`, input in residual dtype `inBytes`.
// Returns the output as an Input for its consumers; the input tensor itself is not freed here,
// but `inputSaved` says whether the norm saved it.
Input norm(Ledger &L, Ctx &x, int64_t tokens, int64_t features, int inBytes, bool gradIn, bool grad, bool &inputSaved)
{
    const int64_t n = checkedMul(tokens, features);
    const bool save = grad && gradIn;
    const bool weightGrad = grad && x.full;
    const int outBytes = (x.amp || x.c == 4) ? 4 : x.c;
    if (x.m.norm == NormKind::LayerNorm) {
        // native_layer_norm saves its input plus per-row mean and rstd (fp32).
        inputSaved = save || weightGrad;
        if (inputSaved)
            L.alloc(C::Activations, checkedMul(tokens, 8));
        L.alloc(C::Temporaries, n * outBytes);
        return {tokens, features, outBytes, false, gradIn || x.full};
    }
    if (inBytes == 4) {
        // hidden_states.to(torch.float32) is a no-op: pow and the mul save the input itself.
        inputSaved = save;
        L.alloc(C::Temporaries, n * 4); // pow(2), freed by mean
        L.free(C::Temporaries, n * 4);
        L.alloc(weightGrad ? C::Activations : C::Temporaries, n * 4); // hidden_states * rsqrt(...)
        L.alloc(C::Temporaries, n * outBytes);                       // self.weight * hidden_states
        if (!weightGrad)
            L.free(C::Temporaries, n * 4);
        return {tokens, features, outBytes, false, gradIn || x.full};
    }
    inputSaved = false;
    L.alloc(save ? C::Activations : C::Temporaries, n * 4); // .to(float32), saved by pow and mul
    L.alloc(C::Temporaries, n * 4);                         // pow(2)
    L.free(C::Temporaries, n * 4);
    L.alloc(C::Temporaries, n * 4);                         // hidden_states * rsqrt(variance + eps)
    L.alloc(weightGrad ? C::Activations : C::Temporaries, n * inBytes); // .to(input_dtype), saved by weight *
    L.free(C::Temporaries, n * 4);
    L.alloc(C::Temporaries, n * outBytes);                  // self.weight * (...)
    if (!weightGrad)
        L.free(C::Temporaries, n * inBytes);
    if (!save)
        L.free(C::Temporaries, n * 4);
    return {tokens, features, outBytes, false, gradIn || x.full};
}

// Rotary embedding on q or k (apply_rotary_pos_emb): (q * cos) + (rotate_half(q) * sin).
// Under autocast cos/sin stay fp32 (HF computes them with autocast disabled, then casts to the
// fp32 hidden dtype), so the products promote to fp32.
int64_t rope(Ledger &L, Ctx &x, int64_t inBytes, int64_t features)
{
    const int ob = x.amp ? 4 : x.c;
    const int64_t out = x.tok(features) * ob;
    L.alloc(C::Temporaries, out);                  // q * cos
    L.alloc(C::Temporaries, x.tok(features) * x.c); // cat(-x2, x1)
    L.alloc(C::Temporaries, out);                  // rotate_half(q) * sin
    L.free(C::Temporaries, x.tok(features) * x.c);
    L.alloc(C::Temporaries, out);                  // sum
    L.free(C::Temporaries, out);
    L.free(C::Temporaries, out);
    L.free(C::Temporaries, inBytes);
    return out;
}

// Returns the attention output (b, s, heads*dim) in compute dtype, allocated as a temporary,
// and whether the attention op itself saved it.
int64_t attention(Ledger &L, Ctx &x, int64_t qBytes, int64_t kBytes, int64_t vBytes, bool grad, bool &outSaved)
{
    const auto &cfg = x.cfg;
    const int64_t scores = checkedMul(checkedMul(checkedMul(x.b, x.nh), x.s), x.s);
    const bool gqa = x.m.numKvHeads < x.m.numHeads;
    const C keep = grad ? C::Activations : C::Temporaries;
    const int64_t outBytes = x.tok(x.qOut) * x.c;
    outSaved = false;
    if (cfg.attention == Attention::SDPA) {
        const bool mathKernel = x.c == 4 && gqa; // enable_gqa: only flash and math kernels support it
        if (!mathKernel) {
            // Flash (16-bit) or memory-efficient (fp32) kernel: saves q, k, v, output and logsumexp.
            if (x.amp) { // autocast casts the fp32 rotary outputs to bf16; those copies are saved
                L.alloc(keep, x.tok(x.qOut) * 2);
                L.alloc(keep, x.tok(x.kvOut) * 2);
                L.free(C::Temporaries, qBytes);
                L.free(C::Temporaries, kBytes);
            } else {
                L.move(C::Temporaries, keep, qBytes);
                L.move(C::Temporaries, keep, kBytes);
            }
            L.move(C::Temporaries, keep, vBytes);
            const int64_t lseLen = x.c == 4 ? ((x.s + 31) / 32) * 32 : x.s;
            L.alloc(keep, checkedMul(checkedMul(x.b, x.nh), lseLen) * 4);
            L.alloc(C::Temporaries, outBytes);
            outSaved = grad;
            if (!grad) {
                L.free(C::Temporaries, qBytes);
                L.free(C::Temporaries, kBytes);
                L.free(C::Temporaries, vBytes);
                L.free(C::Temporaries, checkedMul(checkedMul(x.b, x.nh), lseLen) * 4);
            }
            return outBytes;
        }
        // Math kernel (at::_scaled_dot_product_attention_math): k, v repeated for GQA, q and k
        // scaled by sqrt(scale), softmax probabilities saved, output made contiguous by HF.
        x.notes.push_back("fp32 with grouped-query attention: SDPA falls back to the math kernel, which keeps "
                          "the s x s probabilities");
        const int64_t full = x.tok(x.qOut) * 4;
        L.alloc(keep, full);               // q * sqrt(scale)
        L.alloc(C::Temporaries, full);     // k.repeat_interleave
        L.alloc(keep, full);               // k * sqrt(scale)
        L.free(C::Temporaries, full);
        L.alloc(keep, full);               // v.repeat_interleave
        L.alloc(C::Temporaries, scores * 4); // q @ k^T
        L.alloc(C::Temporaries, scores);     // causal mask (bool)
        L.alloc(keep, scores * 4);           // softmax
        L.free(C::Temporaries, scores);
        L.free(C::Temporaries, scores * 4);
        L.alloc(C::Temporaries, full);       // attn @ v
        L.free(C::Temporaries, qBytes);
        L.free(C::Temporaries, kBytes);
        L.free(C::Temporaries, vBytes);
        L.alloc(C::Temporaries, full);       // transpose(1, 2).contiguous()
        L.free(C::Temporaries, full);
        if (!grad) {
            L.free(C::Temporaries, 3 * full);
            L.free(C::Temporaries, scores * 4);
        }
        return full;
    }
    // HF eager_attention_forward: repeat_kv materialises k and v for GQA; matmul saves q and k;
    // softmax(dtype=float32) saves its fp32 output; .to(q.dtype) is saved by the matmul with v.
    const int64_t rep = x.tok(x.qOut) * x.c;
    if (x.amp) {
        L.alloc(keep, x.tok(x.qOut) * 2); // autocast copy of the fp32 rotary q
        L.free(C::Temporaries, qBytes);
    } else {
        L.move(C::Temporaries, keep, qBytes);
    }
    if (gqa) {
        L.alloc(keep, rep); // repeat_kv(k)
        L.free(C::Temporaries, kBytes);
        L.alloc(keep, rep); // repeat_kv(v)
        L.free(C::Temporaries, vBytes);
    } else {
        if (x.amp) {
            L.alloc(keep, x.tok(x.kvOut) * 2);
            L.free(C::Temporaries, kBytes);
        } else {
            L.move(C::Temporaries, keep, kBytes);
        }
        L.move(C::Temporaries, keep, vBytes);
    }
    L.alloc(C::Temporaries, scores * x.c); // q @ k^T
    L.alloc(C::Temporaries, scores * x.c); // * scaling
    L.free(C::Temporaries, scores * x.c);
    L.alloc(C::Temporaries, scores * x.c); // + causal_mask
    L.free(C::Temporaries, scores * x.c);
    L.alloc(keep, scores * 4);             // softmax(..., dtype=float32)
    L.free(C::Temporaries, scores * x.c);
    const bool castProbs = x.c != 4;
    if (castProbs)
        L.alloc(keep, scores * x.c);       // .to(query.dtype)
    L.alloc(C::Temporaries, outBytes);     // attn_weights @ v
    L.alloc(C::Temporaries, outBytes);     // transpose(1, 2).contiguous()
    L.free(C::Temporaries, outBytes);
    if (!grad) {
        L.free(C::Temporaries, scores * 4 + (castProbs ? scores * x.c : 0));
        L.free(C::Temporaries, x.tok(x.qOut) * (x.amp ? 2 : x.c));
        L.free(C::Temporaries, gqa ? 2 * rep : x.tok(x.kvOut) * 2 * x.c);
    }
    return outBytes;
}

struct LayerCost
{
    Breakdown keep;      // what the layer leaves saved for backward
    Breakdown excursion; // its inner peak above the level it started at
};

// A gated or plain MLP over `tokens` tokens with intermediate size `inter`, reading `in`.
// Returns the output byte size (a temporary).
int64_t mlp(Ledger &L, Ctx &x, Input &in, int64_t inter, bool grad)
{
    const C keep = grad ? C::Activations : C::Temporaries;
    const int64_t n = checkedMul(in.tokens, inter) * x.c;
    const int extraAct = x.m.activationSavedTensors - 1; // gelu_new keeps intermediate products
    if (x.m.mlp == MlpKind::Gated) {
        linear(L, x, ModGate, in, inter, grad); // g
        linear(L, x, ModUp, in, inter, grad);   // u
        releaseInput(L, in, grad);
        L.move(C::Temporaries, keep, n);      // act_fn saves g
        L.move(C::Temporaries, keep, n);      // mul saves u
        L.alloc(keep, n);                     // a = act_fn(g), saved by mul
        if (extraAct > 0)
            L.alloc(keep, checkedMul(n, extraAct));
        L.alloc(C::Temporaries, n);           // m = a * u
        if (!grad) {
            L.free(C::Temporaries, 3 * n);
            if (extraAct > 0)
                L.free(C::Temporaries, checkedMul(n, extraAct));
        }
    } else {
        linear(L, x, ModUp, in, inter, grad); // fc1
        releaseInput(L, in, grad);
        L.move(C::Temporaries, keep, n);    // activation saves its input
        if (extraAct > 0)
            L.alloc(keep, checkedMul(n, extraAct));
        L.alloc(C::Temporaries, n);         // activation output
        if (!grad) {
            L.free(C::Temporaries, n);
            if (extraAct > 0)
                L.free(C::Temporaries, checkedMul(n, extraAct));
        }
    }
    Input mid{in.tokens, inter, x.c, false};
    const int64_t out = linear(L, x, ModDown, mid, x.h, grad);
    releaseInput(L, mid, grad);
    return out;
}

LayerCost layerForward(Ctx &x, bool gradIn, bool grad)
{
    Ledger L;
    const auto &m = x.m;
    const int64_t stream = x.tok(x.h) * x.r;
    L.alloc(C::Temporaries, stream);
    const Breakdown start = L.current();
    L.resetPeak();

    bool streamSaved = false;
    Input n1 = norm(L, x, x.T, x.h, x.r, gradIn, grad, streamSaved);
    const int64_t q = linear(L, x, ModQ, n1, x.qOut, grad);
    const int64_t k = linear(L, x, ModK, n1, x.kvOut, grad);
    const int64_t v = linear(L, x, ModV, n1, x.kvOut, grad);
    releaseInput(L, n1, grad);
    int64_t qb = q, kb = k;
    if (m.qkNorm) { // Qwen3: RMSNorm over head_dim on q and k
        bool unused = false;
        Input qn = norm(L, x, x.T, x.qOut, x.c, true, grad, unused);
        L.free(C::Temporaries, q);
        Input kn = norm(L, x, x.T, x.kvOut, x.c, true, grad, unused);
        L.free(C::Temporaries, k);
        qb = qn.size();
        kb = kn.size();
    }
    const int64_t qe = rope(L, x, qb, x.qOut);
    const int64_t ke = rope(L, x, kb, x.kvOut);
    bool outSaved = false;
    attention(L, x, qe, ke, v, grad, outSaved);
    Input ao{x.T, x.qOut, x.c, false};
    const int64_t o = linear(L, x, ModO, ao, x.h, grad);
    ao.saved = ao.saved || outSaved;
    releaseInput(L, ao, grad);
    // Residual add: a new stream tensor; the old one lives on only if a norm saved it.
    L.alloc(C::Temporaries, stream);
    L.free(C::Temporaries, o);
    if (streamSaved && grad)
        L.move(C::Temporaries, C::Activations, stream);
    else
        L.free(C::Temporaries, stream);

    bool stream2Saved = false;
    Input n2 = norm(L, x, x.T, x.h, x.r, true, grad, stream2Saved);
    int64_t mlpOut = 0;
    if (m.isMoe()) {
        // Router: Linear(h, E), softmax(dtype=float) saved, top-k. Experts see T*k token rows, each
        // gathered (index) from the normed input; outputs are scaled by the routing weight (saved).
        const C keep = grad ? C::Activations : C::Temporaries;
        const int64_t E = m.numExperts, k2 = m.expertsPerToken;
        if (grad && x.full)
            n2.saved = true;
        L.alloc(C::Temporaries, x.tok(E) * x.c);
        L.alloc(keep, x.tok(E) * 4);
        L.free(C::Temporaries, x.tok(E) * x.c);
        Input routed{checkedMul(x.T, k2), x.h, x.c, false};
        L.alloc(C::Temporaries, routed.size());
        x.weightCopies = E;
        const int64_t eo = mlp(L, x, routed, m.expertIntermediateSize, grad);
        x.weightCopies = 1;
        L.move(C::Temporaries, grad && x.full ? C::Activations : C::Temporaries, eo); // * routing weight
        if (!(grad && x.full))
            L.free(C::Temporaries, eo);
        mlpOut = x.tok(x.h) * x.c;
        L.alloc(C::Temporaries, mlpOut); // index_add_ target
        if (m.sharedExpertIntermediateSize > 0) {
            Input shared{x.T, x.h, n2.bytes, false};
            L.alloc(C::Temporaries, shared.size());
            const int64_t so = mlp(L, x, shared, m.sharedExpertIntermediateSize, grad);
            L.move(C::Temporaries, keep, so); // * sigmoid(shared_expert_gate(x)), saved
            if (!grad)
                L.free(C::Temporaries, so);
        }
        releaseInput(L, n2, grad);
    } else {
        mlpOut = mlp(L, x, n2, m.intermediateSize, grad);
    }
    L.alloc(C::Temporaries, stream); // second residual add
    L.free(C::Temporaries, mlpOut);
    if (stream2Saved && grad)
        L.move(C::Temporaries, C::Activations, stream);
    else
        L.free(C::Temporaries, stream);

    LayerCost cost;
    cost.keep = minus(L.current(), start);
    cost.excursion = minus(L.atPeak(), start);
    return cost;
}

struct Params
{
    ParamSummary summary;
    int64_t layerGradBytes = 0;   // gradients one decoder layer produces
    int64_t embedGradBytes = 0;     // token embedding (the lm_head's too when tied)
    int64_t positionGradBytes = 0;  // learned positions (GPT-2)
    int64_t lmHeadGradBytes = 0;    // untied lm_head
    int64_t finalNormGradBytes = 0;
    int64_t stepTemporaryBytes = 0;
    int64_t largestLayerParamBytes = 0; // for ZeRO-3 gathers
    int64_t largestLayerGradTensorBytes = 0; // ZeRO-2: the largest gradient a layer produces whole
    int64_t rootParamBytes = 0;              // ZeRO-3: embedding, positions, final norm, lm_head
};

// NF4 storage of one tensor as bitsandbytes quantize_4bit packs it: two values per byte, one
// absmax per 64-value block (fp32, or 8-bit plus an fp32 absmax per 256 blocks when double-quantized).
int64_t nf4Bytes(int64_t numel, bool doubleQuant)
{
    const int64_t packed = (numel + 1) / 2;
    const int64_t blocks = (numel + 63) / 64;
    const int64_t absmax = doubleQuant ? blocks + ((blocks + 255) / 256) * 4 : blocks * 4;
    return packed + absmax;
}

Params countParams(const Ctx &x)
{
    Params P;
    auto &S = P.summary;
    const auto &cfg = x.cfg;
    const int p = x.p;
    int64_t trainableBytesForState = 0;
    int64_t layerParamBytes = 0;
    // One trainable tensor class: `count` tensors of rows x cols, stored in `bytes` per value (the
    // optimizer state follows the parameter's dtype in torch.optim).
    auto addTrainable = [&](int64_t rows, int64_t cols, int bytes, int64_t count, bool inLayer) {
        const int64_t numel = checkedMul(rows, cols);
        const int64_t n = checkedMul(numel, count);
        S.trainable = checkedAdd(S.trainable, n);
        S.gradientBytes = checkedAdd(S.gradientBytes, checkedMul(n, bytes));
        S.largestTrainableBytes = std::max(S.largestTrainableBytes, checkedMul(numel, bytes));
        trainableBytesForState = checkedAdd(trainableBytesForState, checkedMul(n, bytes));
        if (inLayer) {
            P.layerGradBytes = checkedAdd(P.layerGradBytes, checkedMul(checkedMul(numel, bytes), count / x.m.numLayers));
            P.largestLayerGradTensorBytes = std::max(P.largestLayerGradTensorBytes, checkedMul(numel, bytes));
        }
        // optimizer state
        int64_t state = 0;
        const int tensors = traits(cfg.optimizer).stateTensors;
        if (tensors >= 0) {
            // Parameter-shaped state tensors in the parameter's dtype (the optimizer table).
            state = checkedMul(n, int64_t(tensors) * bytes);
        } else if (cfg.optimizer == Optimizer::AdamW8bit || cfg.optimizer == Optimizer::PagedAdamW8bit) {
            // bitsandbytes: uint8 exp_avg and exp_avg_sq with an fp32 absmax per 256-value block;
            // tensors under min_8bit_size (4096) keep 32-bit state. Paged: the two moments of a
            // tensor of 1e5 values or more come from F.get_paged (cudaMallocManaged), outside the
            // allocator (optimizer.py get_state_buffer); the absmax stay torch tensors.
            const int64_t absmax = ((numel + 255) / 256) * 4;
            if (cfg.optimizer == Optimizer::PagedAdamW8bit && numel >= 100000) {
                state = checkedMul(count, 2 * absmax);
                S.pagedOptimizerStateBytes = checkedAdd(S.pagedOptimizerStateBytes, checkedMul(count, 2 * numel));
            } else if (numel >= 4096) {
                state = checkedMul(count, 2 * (numel + absmax));
            } else {
                state = checkedMul(n, 8);
            }
        } else if (cfg.optimizer == Optimizer::Lion) {
            // bitsandbytes Optimizer1State with optim_bits=32: state1 is fp32 whatever the
            // parameter's dtype (optimizer.py get_state_buffer(p, dtype=torch.float32)).
            state = checkedMul(n, 4);
        } else if (cfg.optimizer == Optimizer::Adafactor) {
            // torch.optim.Adafactor: row and column variances for matrices, full variance for vectors.
            state = checkedMul(checkedMul(cols > 1 ? rows + cols : rows, bytes), count);
        }
        S.optimizerStateBytes = checkedAdd(S.optimizerStateBytes, state);
    };
    for (const auto &t : parameterInventory(x.m)) {
        const int64_t n = checkedMul(t.numel(), t.count);
        S.total = checkedAdd(S.total, n);
        const bool inLayer = t.module != "embed_tokens" && t.module != "embed_positions" &&
                             t.module != "final_norm" && t.module != "lm_head";
        // Weights, as stored (what ZeRO-3 shards and gathers back per unit)
        const bool quantized = x.qlora && t.decoderLinear && !familyTraitsOrLlama(x.m.modelType).conv1dLinears;
        const int64_t stored = quantized ? checkedMul(nf4Bytes(t.numel(), cfg.lora.doubleQuant), t.count)
                                                          : checkedMul(n, p);
        S.weightBytes = checkedAdd(S.weightBytes, stored);
        if (inLayer)
            layerParamBytes = checkedAdd(layerParamBytes, stored / x.m.numLayers);
        else
            P.rootParamBytes = checkedAdd(P.rootParamBytes, stored);
        if (x.full)
            addTrainable(t.rows, t.cols, p, t.count, inLayer);
    }
    if (!x.full) {
        // LoRA adapters on every targeted Linear: A (r x in) and B (out x r), fp32.
        const int64_t r = cfg.lora.rank;
        const int64_t L = x.m.numLayers;
        for (int mod = 0; mod < ModuleCount; ++mod) {
            if (!x.lora[mod])
                continue;
            const int64_t count = L;
            const int64_t inF = x.inFeatures(Module(mod)), outF = x.outFeatures(Module(mod));
            for (auto [rows, cols] : {std::pair{r, inF}, std::pair{outF, r}}) {
                const int64_t numel = checkedMul(rows, cols);
                S.total = checkedAdd(S.total, checkedMul(numel, count));
                S.weightBytes = checkedAdd(S.weightBytes, checkedMul(checkedMul(numel, count), x.loraBytes));
                layerParamBytes = checkedAdd(layerParamBytes, checkedMul(checkedMul(numel, count / L), x.loraBytes));
                addTrainable(rows, cols, x.loraBytes, count, true);
            }
        }
        // The wrapped experts' adapters, on every MoE layer.
        int64_t moeLayers = 0;
        for (int64_t l = 0; l < L; ++l)
            moeLayers += x.m.isMoeLayer(l) ? 1 : 0;
        for (auto [rows, cols] : expertsLoraShapes(x.m, x.experts, r)) {
            const int64_t numel = checkedMul(rows, cols);
            S.total = checkedAdd(S.total, checkedMul(numel, moeLayers));
            S.weightBytes = checkedAdd(S.weightBytes, checkedMul(checkedMul(numel, moeLayers), x.loraBytes));
            layerParamBytes = checkedAdd(layerParamBytes, checkedMul(numel, x.loraBytes));
            addTrainable(rows, cols, x.loraBytes, moeLayers, true);
        }
    }
    if (x.full) {
        P.embedGradBytes = checkedMul(checkedMul(x.V, x.h), p);
        if (x.m.learnedPositions)
            P.positionGradBytes = checkedMul(checkedMul(x.m.maxPositions, x.h), p);
        P.lmHeadGradBytes = x.m.tiedEmbeddings ? 0 : checkedMul(checkedMul(x.V, x.h), p);
        P.finalNormGradBytes = checkedMul(checkedMul(x.h, x.m.norm == NormKind::LayerNorm ? 2 : 1), p);
    }
    P.largestLayerParamBytes = layerParamBytes;
    // Optimizer-step temporaries.
    const bool forLoop = cfg.optimizerImpl == OptimizerImpl::ForLoop;
    const bool fused = cfg.optimizerImpl == OptimizerImpl::Fused;
    switch (cfg.optimizer) {
    case Optimizer::AdamW:
    case Optimizer::Adafactor:
        // foreach AdamW: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs), one state-sized list.
        // for-loop: (exp_avg_sq.sqrt() / bias_correction2_sqrt) holds two copies of the largest tensor.
        // torch.optim.Adafactor (foreach) measured at one parameter-sized buffer as well.
        P.stepTemporaryBytes = fused ? 0 : forLoop ? 2 * S.largestTrainableBytes : trainableBytesForState;
        break;
    case Optimizer::AdamW8bit: // bitsandbytes' blockwise kernel updates in place
    case Optimizer::PagedAdamW8bit:
    case Optimizer::Lion:      // bitsandbytes' 32-bit kernel, in place too
    case Optimizer::SGD:       // _foreach_add_(params, grads, alpha=-lr)
    case Optimizer::SGDMomentum:
        P.stepTemporaryBytes = 0;
        break;
    }
    return P;
}

double defaultSlackFraction()
{
    // Median of (peak reserved - peak allocated) / peak allocated over the first 30 HF runs in
    // tests/data/hf_reference_h200.json (range 1.8% to 40%): fragmentation is path dependent.
    return 0.061;
}

// The step's peak: the forward, backward or optimizer phase with the most allocated (after load
// is never the step's peak), its breakdown the estimate's.
void takePeakPhase(Estimate &est)
{
    size_t top = 1;
    for (size_t i = 2; i < 4; ++i)
        if (est.phases[i].peakAllocatedBytes > est.phases[top].peakAllocatedBytes)
            top = i;
    est.peakPhase = est.phases[top].phase;
    est.peakAllocatedBytes = est.phases[top].peakAllocatedBytes;
    est.peak = est.phases[top].atPeak;
}

// Any collective (DDP, or ZeRO at any N) brings up an NCCL communicator.
bool usesCollectives(const TrainingConfig &cfg)
{
    return cfg.worldSize > 1 || cfg.zeroStage >= 1;
}

// The device total (nvidia-smi's Used) is peak reserved plus what lives on the device outside
// PyTorch's allocator: the CUDA context, and NCCL's communicator once a collective runs, whose
// buffers the caching allocator never sees. The driver's reservation goes with the estimate for
// the verdict, which takes it off the card.
void addOutsideAllocator(Estimate &est, const TrainingConfig &cfg, const EstimatorOptions &opt)
{
    est.peak[Category::CudaContext] = opt.cudaContextBytes;
    est.deviceTotalBytes = checkedAdd(est.peakReservedBytes, opt.cudaContextBytes);
    est.driverReservedBytes = opt.driverReservedBytes;
    if (usesCollectives(cfg)) {
        est.peak[Category::Communication] = checkedAdd(est.peak[Category::Communication], opt.ncclCommunicatorBytes);
        est.deviceTotalBytes = checkedAdd(est.deviceTotalBytes, opt.ncclCommunicatorBytes);
    }
}

// The per-op ledger this estimator started from: composed layers, whole-tensor lifetimes. It
// still answers for what the autograd simulation does not run yet: FSDP (ZeRO-2/3) and optimizer
// offload. One step, phase by phase: each phase a member, sharing the shapes, the parameter
// counts and the running ledger.
class LedgerStep
{
public:
    LedgerStep(const ModelArch &model, const TrainingConfig &cfg, const EstimatorOptions &opt)
        : model(model)
        , cfg(cfg)
        , opt(opt)
        , x(model, cfg)
        , P(countParams(x))
        , N(cfg.worldSize)
        , zero(cfg.zeroStage)
        , fsdp(zero == 3 && x.full)
        , headTrainable(x.full)
        , fused(cfg.loss == Loss::Fused)
        , cl(x.amp ? 2 : x.c) // logits dtype: lm_head runs in bf16 under autocast
    {
        est.tokens = x.T;
        est.params = P.summary;
        const bool ddp = N > 1 && zero == 0;
        weights = perRank(3, P.summary.weightBytes);
        // ZeRO-Offload keeps the (sharded) optimizer state and its step on the host.
        state = cfg.offloadOptimizer ? 0 : perRank(1, P.summary.optimizerStateBytes);
        if (cfg.offloadOptimizer)
            est.params.hostOptimizerStateBytes = perRank(1, P.summary.optimizerStateBytes);
        est.params.pagedOptimizerStateBytes = perRank(1, P.summary.pagedOptimizerStateBytes);
        // DDP: Reducer::initialize_buckets gives every gradient a bucket copy for the whole run
        // (gradient_as_bucket_view=False), allocated when the model is wrapped.
        const int64_t ddpBuckets = ddp ? P.summary.gradientBytes : 0;
        // ZeRO-1/2: two reduce buckets, allocated once (DeepSpeed's ipg buffers; the probe's bucket pair).
        const int64_t reduceBuckets = zero == 1 || zero == 2 ? 2 * opt.ddpBucketBytes : 0;
        buckets = checkedAdd(ddpBuckets, reduceBuckets);
        // ZeRO-3: a unit's flat parameter all-gathered whole next to its shard (FSDP's padded
        // unsharded flat_param): a decoder layer, and the root, which stays gathered through backward.
        // With LoRA/QLoRA the frozen base is sharded and gathered the same way (FSDP with
        // use_orig_params; estimated, the probe measures ZeRO-3 for full fine-tuning only).
        // FSDP2's MixedPrecisionPolicy gathers in its param_dtype (bf16 over fp32 shards).
        auto gathered = [&](int64_t stored) { return x.mixedPrecisionPolicy ? stored / x.p * 2 : stored; };
        layerFull = zero == 3 ? gathered(P.largestLayerParamBytes) : 0;
        rootFull = zero == 3 ? gathered(P.rootParamBytes) : 0;
    }

    Estimate run()
    {
        afterLoad();
        forward();
        head();
        backward();
        optimizerStep();
        totals();
        notes();
        std::sort(x.notes.begin(), x.notes.end());
        x.notes.erase(std::unique(x.notes.begin(), x.notes.end()), x.notes.end());
        est.notes = x.notes;
        return est;
    }

private:
    const ModelArch &model;
    const TrainingConfig &cfg;
    const EstimatorOptions &opt;
    Ctx x;
    Params P;
    Estimate est;
    const int N;
    // ZeRO / FSDP bring their machinery at any world size (DeepSpeed and FSDP run on one GPU too);
    // torch DDP wraps only several ranks. ZeRO-3 shards full fine-tuning.
    const int zero;
    const bool fsdp;
    const bool headTrainable;
    const bool fused;
    const int cl;
    int64_t weights = 0, state = 0, buckets = 0, layerFull = 0, rootFull = 0;
    Ledger G; // the step
    Ledger H; // the head, simulated on its own and added
    // Forward to backward: what a layer keeps, the recompute, the head's tensors.
    bool ckpt = false;
    int64_t L = 0, eagerMask = 0;
    LayerCost recompute;
    Breakdown firstKeep, restKeep;
    int64_t fusedGradIn = 0, fusedGradW = 0, fusedCast = 0, logits = 0, logprobs = 0, softcapKeep = 0;

    // Sharding (ZeRO / FSDP): each rank holds 1/N of the state (stage >= 1), of the gradients
    // (stage >= 2) and of the weights (stage 3).
    int64_t perRank(int fromStage, int64_t v) const { return zero >= fromStage ? (v + N - 1) / N : v; }
    // Gradients ZeRO-2 and FSDP see whole before they reduce them: each tensor's for ZeRO-2 (it
    // is reduced as AccumulateGrad finishes it), a unit's for FSDP (reduced when the unit is done).
    int64_t whole(int64_t perTensor) const { return zero >= 2 ? perTensor : perRank(2, perTensor); }

    void afterLoad()
    {
        // ---- After load: the weights (and DDP's buckets).
        est.phases[0].phase = Phase::AfterLoad;
        est.phases[0].atPeak[C::Weights] = weights;
        est.phases[0].atPeak[C::Communication] = buckets;
        est.phases[0].peakAllocatedBytes = checkedAdd(weights, buckets);

        G.alloc(C::Weights, weights);
        G.alloc(C::Communication, buckets);
        G.alloc(C::OptimizerState, state);
        G.alloc(C::Temporaries, 2 * opt.cublasWorkspaceBytes); // forward and backward handles
        G.alloc(C::Temporaries, x.tok(16)); // input_ids and labels (int64), plus the padded shift
        G.resetPeak();
        G.alloc(C::Communication, rootFull); // FSDP root unit: gathered before the embedding

    }

    void forward()
    {
        // ---- Forward.
        ckpt = cfg.gradCheckpointing;
        const bool gradIn0 = x.full; // a frozen embedding gives layer 0 an input without grad
        const LayerCost first = layerForward(x, gradIn0, !ckpt);
        const LayerCost rest = layerForward(x, true, !ckpt);
        recompute = ckpt ? layerForward(x, true, true) : rest;
        L = model.numLayers;
        const int64_t stream = x.tok(x.h) * x.r;
        Breakdown ckptKeep;
        ckptKeep[C::Activations] = roundBlock(stream); // checkpoint saves the layer input
        firstKeep = ckpt ? ckptKeep : first.keep;
        restKeep = ckpt ? ckptKeep : rest.keep;

        G.alloc(C::Temporaries, stream); // embedding output (the embedding saves only indices)
        if (model.learnedPositions) {
            G.alloc(C::Temporaries, stream);
            G.free(C::Temporaries, stream);
        }
        // HF builds one (b, 1, s, s) additive causal mask per forward for eager attention.
        eagerMask =
            cfg.attention == Attention::Eager ? checkedMul(checkedMul(checkedMul(x.b, x.s), x.s), x.c) : 0;
        G.alloc(C::Temporaries, eagerMask);
        // FSDP2: the running layer's unsharded parameters (alloc_storage) and the flat all-gather
        // output they were copied from (_fsdp_collectives.py allocate), which lives until the next
        // layer's all-gather (measured: share2-l1b-bf16-full-adamw-b2s1024-z3's per-rank stream).
        G.alloc(C::Communication, 2 * layerFull);
        G.probe(first.excursion);
        G.add(firstKeep);
        if (L > 1) {
            G.add(restKeep, L - 2);
            G.probe(rest.excursion);
            G.add(restKeep);
        }
        // The last layer reshards; its all-gather output stays through the head and into backward
        // (116 MiB for a Llama-3.2-1B layer at both the forward and the backward peak).
        G.free(C::Communication, layerFull);
    }

    // Final norm, lm_head and the loss, on a ledger of their own (H), added to the step's.
    void head()
    {
        // Final norm and lm_head.
        bool unused = false;
        Input fn = norm(H, x, x.T, x.h, x.r, true, true, unused);
        // Fused linear cross-entropy (Ops::fusedLinearCrossEntropy has the code path): the gradients
        // of the final hidden state and of the lm_head weight are made in forward, chunk by chunk,
        // and kept; the logits never exist whole.
        if (fused) {
            releaseInput(H, fn, true); // Liger saves its gradients, not its input
            const int64_t weightCast = (x.amp && !x.qlora) ? checkedMul(checkedMul(x.V, x.h), 2) : 0;
            fusedCast = headTrainable ? weightCast : 0; // autocast caches a trainable leaf's cast
            H.alloc(C::Activations, fusedCast);
            fusedGradIn = x.tok(x.h) * x.r;            // zeros_like(_input)
            fusedGradW = headTrainable ? (model.tiedEmbeddings ? P.embedGradBytes : P.lmHeadGradBytes) : 0;
            H.alloc(C::Logits, fusedGradIn);
            H.alloc(C::Logits, fusedGradW);
            const int64_t small = checkedAdd(checkedMul(x.T, 4 + 1 + 8), checkedMul(x.b, 8)); // loss_1d, mask, labels
            H.alloc(C::Temporaries, small);
            const int64_t chunk = fusedLossChunkRows(x.T, x.h, x.V);
            // A trainable lm_head in the logits' dtype: grad_weight += mm(grad_logits.t(), x).float(),
            // a [vocab, hidden] product and its fp32 copy per chunk (Ops::fusedLinearCrossEntropy).
            const int weightElem = x.amp ? 4 : x.p;
            const int64_t weightTmp = !headTrainable || (weightElem == 4 && cl != 4)
                                          ? 0
                                          : checkedMul(checkedMul(x.V, x.h), cl + (cl != 4 ? 4 : 0));
            const int64_t transient = checkedAdd(checkedAdd(checkedMul(chunk, x.V * cl), checkedMul(chunk, x.h * cl)),
                                                 checkedAdd(checkedAdd(x.amp ? checkedMul(chunk, x.h * 2) : 0,
                                                                       headTrainable ? 0 : weightCast),
                                                            weightTmp));
            H.alloc(C::Logits, transient);
            H.free(C::Logits, transient);
            H.free(C::Temporaries, small);
        }
        if (headTrainable && !fused) {
            if (x.amp)
                H.alloc(C::Activations, x.tok(x.h) * 2); // autocast copy saved by lm_head
            else
                fn.saved = true;
        }
        if (!fused) {
        releaseInput(H, fn, true);
        // Under autocast the lm_head weight is cast to bf16 too and saved by its matmul.
        const int64_t headCopy = (x.amp && !x.qlora) ? checkedMul(checkedMul(x.V, x.h), 2) : 0;
        H.alloc(C::Activations, headCopy);
        logits = checkedMul(x.tok(x.V), cl);
        H.alloc(C::Logits, logits);
        if (model.finalLogitSoftcap > 0) {
            // Gemma 2: logits / cap (new), tanh (saves its output), * cap (new): the tanh output stays.
            H.alloc(C::Logits, logits);
            H.free(C::Logits, logits);
            H.alloc(C::Logits, logits);
            H.free(C::Logits, logits);
            H.alloc(C::Logits, logits);
            softcapKeep = logits;
        }
        // ForCausalLMLoss: logits.float(), then cross_entropy = log_softmax (saves its output) + nll_loss.
        const int64_t upcast = cl < 4 ? x.tok(x.V) * 4 : 0;
        H.alloc(C::Logits, upcast);
        logprobs = x.tok(x.V) * 4;
        H.alloc(C::Logits, logprobs);
        H.free(C::Logits, upcast);
        H.free(C::Logits, logits); // the output object (and its logits) is dropped before backward
        }
        G.probe(H.atPeak());
        G.add(H.current());
        G.free(C::Activations, fusedCast); // the autocast cache goes as the forward's autocast ends
        G.free(C::Temporaries, eagerMask);
        G.free(C::Temporaries, x.tok(x.h) * x.r); // the final hidden state
        est.phases[1].phase = Phase::Forward;
        est.phases[1].peakAllocatedBytes = G.peak();
        est.phases[1].atPeak = G.atPeak();

    }

    void backward()
    {
        // ---- Backward.
        G.resetPeak();
        // Gradients ZeRO-2 and FSDP see whole before they reduce them: each tensor's for ZeRO-2 (it
        // is reduced as AccumulateGrad finishes it), a unit's for FSDP (reduced when the unit is done).
        if (fused) {
            // The saved gradients are handed on: grad_input to the final norm, grad_weight to .grad.
            G.free(C::Logits, fusedGradIn);
            G.free(C::Logits, fusedGradW);
        } else {
        G.alloc(C::Logits, logprobs); // nll_loss_backward: grad of the log-probabilities
        G.alloc(C::Logits, logprobs); // _log_softmax_backward_data
        G.free(C::Logits, logprobs);  // the saved log-probabilities are released
        G.free(C::Logits, logprobs);
        if (cl < 4) {
            G.alloc(C::Logits, logits); // ToCopyBackward: the gradient back in bf16
            G.free(C::Logits, logprobs);
        }
        if (softcapKeep) {
            G.alloc(C::Logits, logits);
            G.free(C::Logits, logits);
            G.free(C::Logits, softcapKeep);
        }
        }
        G.alloc(C::Temporaries, x.tok(x.h) * x.c); // lm_head backward: grad of the final hidden state
        // The lm_head's weight gradient (tied: the embedding's, summed into later), then the final norm's.
        // ZeRO-2 reduces each as it is accumulated and keeps its part; the FSDP root keeps them whole
        // until the embedding's arrives at the end of backward.
        const int64_t headGrads = headTrainable ? checkedAdd(model.tiedEmbeddings ? P.embedGradBytes : P.lmHeadGradBytes,
                                                             P.finalNormGradBytes)
                                                : 0;
        G.alloc(C::Gradients, whole(headGrads));
        if (zero == 2) {
            G.free(C::Gradients, headGrads);
            G.alloc(C::Gradients, perRank(2, headGrads));
        }
        if (!fused)
            G.free(C::Logits, cl < 4 ? logits : logprobs); // the gradient of the logits is consumed
        G.free(C::Activations, H.current()[C::Activations]); // final norm's saved tensors go

        // Decoder layers, top to bottom. FSDP: the running layer's unit and the prefetched one below it
        // (BACKWARD_PRE) are gathered (one of the two buffers since the forward's last layer).
        G.alloc(C::Communication, layerFull);
        const int64_t layerGrads = perRank(2, P.layerGradBytes);
        const int64_t I = model.isMoe() ? checkedMul(model.expertIntermediateSize, model.expertsPerToken)
                                        : model.intermediateSize;
        // A layer's backward excursion depends on shapes alone, so it is the same for every layer.
        const Breakdown layerBackward = [&] {
            Breakdown e;
            // MLP backward: grad_a and grad_u of the product live together, with the gradient of the
            // layer's output and input in flight; LoRA adds the gradient of the fp32 input cast.
            int64_t mlpT = checkedMul(x.tok(I), 2 * x.c) + x.tok(x.h) * x.c;
            if (!x.full)
                mlpT = checkedAdd(mlpT, x.tok(I) * 4);
            // Attention backward: dq, dk, dv plus flash's fp32 dq accumulator; eager holds the gradient of
            // the probabilities in bf16 and fp32 and the gradient of the scores.
            const int64_t sc = checkedMul(checkedMul(checkedMul(x.b, x.nh), x.s), x.s);
            const int64_t attnT = cfg.attention == Attention::Eager
                                      ? checkedMul(sc, 2 * x.c + 4)
                                      : checkedAdd(x.tok(x.qOut + 2 * x.kvOut) * x.c, x.tok(x.qOut) * 4);
            e[C::Temporaries] = std::max(mlpT, attnT);
            e[C::Gradients] = layerGrads;
            if (zero == 2) // the largest gradient whole, before its reduction
                e[C::Gradients] = checkedAdd(layerGrads, P.largestLayerGradTensorBytes);
            // FSDP: the layer's gradients come whole, then SplitWithSizesBackward concatenates them
            // into the flat gradient (both alive, the layer's activations gone), which is
            // reduce-scattered into the shard.
            Breakdown cat;
            if (fsdp) { // this layer's shard comes only after the reduce-scatter (in `net` below)
                e[C::Gradients] = P.layerGradBytes;
                cat[C::Gradients] = 2 * P.layerGradBytes;
                cat[C::Temporaries] = x.tok(x.h) * x.c; // the gradient of the layer's input
                cat[C::Activations] = -restKeep[C::Activations]; // the layer's saved tensors are gone by then
            }
            if (ckpt) {
                // Recompute: the layer's forward runs again with its activations kept.
                Breakdown withKeep = e;
                withKeep[C::Activations] += recompute.keep[C::Activations];
                withKeep[C::Temporaries] += recompute.keep[C::Temporaries];
                const Breakdown &re = recompute.excursion;
                e = withKeep.total() >= re.total() ? withKeep : re;
            }
            return cat.total() > e.total() ? cat : e;
        }();
        Breakdown net;
        net[C::Activations] = -restKeep[C::Activations];
        net[C::Gradients] = layerGrads;
        Breakdown net0 = net;
        net0[C::Activations] = -firstKeep[C::Activations];
        if (L > 1) {
            G.probe(layerBackward);
            G.add(net, L - 2);
            G.probe(layerBackward);
            G.add(net);
        }
        G.probe(layerBackward);
        G.add(net0);
        // Embedding backward (embedding_dense_backward). Tied: AccumulateGrad sums into the lm_head's
        // gradient out of place, so the new gradient and the sum coexist with the old one.
        G.free(C::Communication, 2 * layerFull);
        if (x.full) {
            const int64_t eg = whole(P.embedGradBytes);
            if (model.tiedEmbeddings) {
                G.alloc(C::Temporaries, eg);
                G.alloc(C::Temporaries, eg);
                G.free(C::Temporaries, 2 * eg);
            } else {
                G.alloc(C::Gradients, eg);
            }
            G.alloc(C::Gradients, whole(P.positionGradBytes));
            if (zero == 2) { // reduced as they come; this rank keeps its part
                const int64_t last = checkedAdd(model.tiedEmbeddings ? 0 : P.embedGradBytes, P.positionGradBytes);
                G.free(C::Gradients, last);
                G.alloc(C::Gradients, perRank(2, last));
            }
            if (fsdp) { // the root's flat gradient: concatenated, reduce-scattered, then the root reshards
                const int64_t rootGrads =
                    checkedAdd(checkedAdd(headGrads, model.tiedEmbeddings ? 0 : P.embedGradBytes), P.positionGradBytes);
                G.alloc(C::Gradients, rootGrads);
                G.free(C::Gradients, 2 * rootGrads - perRank(2, rootGrads));
            }
        }
        G.free(C::Communication, rootFull);
        G.free(C::Temporaries, x.tok(x.h) * x.c);
        est.phases[2].phase = Phase::Backward;
        est.phases[2].peakAllocatedBytes = G.peak();
        est.phases[2].atPeak = G.atPeak();

    }

    void optimizerStep()
    {
        // ---- Optimizer step: state, gradients and the step's temporaries.
        G.resetPeak();
        const int64_t stepTemp = cfg.offloadOptimizer ? 0 : perRank(1, P.stepTemporaryBytes);
        G.alloc(C::Temporaries, stepTemp);
        G.free(C::Temporaries, stepTemp);
        est.phases[3].phase = Phase::Optimizer;
        est.phases[3].peakAllocatedBytes = G.peak();
        est.phases[3].atPeak = G.atPeak();

    }

    // Overall peak, reserved and device total.
    void totals()
    {
        takePeakPhase(est);
        const double slackFraction = opt.allocatorSlackFraction > 0 ? opt.allocatorSlackFraction : defaultSlackFraction();
        const int64_t slack = static_cast<int64_t>(std::llround(static_cast<double>(est.peakAllocatedBytes) * slackFraction));
        est.peak[C::AllocatorSlack] = slack;
        est.peakReservedBytes = checkedAdd(est.peakAllocatedBytes, slack);
        addOutsideAllocator(est, cfg, opt);
        if (usesCollectives(cfg))
            x.notes.push_back("NCCL's communicator takes about 558 MiB of device memory outside PyTorch's allocator "
                              "(measured at one rank); its per-peer buffers on several GPUs come on top");

    }

    void notes()
    {
        // Notes on mechanisms the user may not expect.
        if (!x.full)
            x.notes.push_back("PEFT keeps LoRA adapters in fp32 and casts each adapter's input to fp32; those copies "
                              "are saved for backward");
        if (cfg.offloadOptimizer)
        {
            char gib[32];
            std::snprintf(gib, sizeof gib, "%.2f GiB", static_cast<double>(est.params.hostOptimizerStateBytes) / 1073741824.0);
            x.notes.push_back(std::string("the optimizer state (") + gib +
                              " per rank) and its step run on the CPU; the host needs that much pinned memory");
        }
        if (x.qlora && cfg.zeroStage < 2)
            x.notes.push_back("QLoRA as PEFT prepares it (prepare_model_for_kbit_training) casts every parameter that is "
                              "not 4-bit to fp32 (embeddings, norms, lm_head), so the activations and logits are fp32: "
                              "twice bf16 LoRA's; the 4-bit base saves weight memory only");
        if (est.params.pagedOptimizerStateBytes > 0) {
            char gib[32];
            std::snprintf(gib, sizeof gib, "%.2f GiB", static_cast<double>(est.params.pagedOptimizerStateBytes) / 1073741824.0);
            x.notes.push_back(std::string("the paged optimizer keeps ") + gib +
                              " of moments in CUDA managed memory, outside PyTorch's allocator: nvidia-smi counts it "
                              "while it is on the GPU, and under memory pressure the driver pages it to host RAM "
                              "(a slower step, not an OOM); it is not in the totals here");
        }
        if (model.maxPositions > 0 && cfg.seqLen > model.maxPositions)
            x.notes.push_back("sequence length " + std::to_string(cfg.seqLen) + " is above the model's "
                              "max_position_embeddings (" + std::to_string(model.maxPositions) +
                              "): it was not trained for it (rope_scaling, or a shorter sequence)");
        if (x.amp)
            x.notes.push_back("autocast keeps a bf16 copy of every Linear weight until backward, and the residual "
                              "stream stays fp32");
        if (x.mixedPrecisionPolicy)
            x.notes.push_back("FSDP2's MixedPrecisionPolicy gathers the parameters in bf16 and casts each unit's inputs: "
                              "the step runs in bf16 over fp32 shards, gradients and optimizer state");
        if (zero >= 2 && isSimulated(cfg))
            x.notes.push_back("FSDP2 as accelerate runs it: the model built on the CPU and moved to the GPU unit by unit; "
                              "its all-gathers and reduce-scatters keep their own blocks on side streams, which the "
                              "compute stream cannot reuse (reserved is counted per stream)");
        else if (zero >= 2)
            x.notes.push_back("ZeRO-2/3 with " + std::string(cfg.offloadOptimizer ? "optimizer offload" : "QLoRA") +
                              " goes through the per-op ledger: peak allocated as the layers compose it, reserved as "
                              "allocated plus the median slack (FSDP2's side streams are not replayed); keep headroom, "
                              "or measure with --engine transformers");
    }
};

} // namespace

Estimate estimateLedger(const ModelArch &model, const TrainingConfig &cfg, const EstimatorOptions &opt)
{
    return LedgerStep(model, cfg, opt).run();
}

namespace {

// Bytes by category live after the first events[k] events (each block rounded as the allocator
// rounds it).
std::vector<Breakdown> breakdownsAt(const Timeline &t, const std::vector<size_t> &events)
{
    std::vector<Breakdown> out(events.size());
    std::vector<size_t> order(events.size());
    for (size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return events[a] < events[b]; });
    std::vector<int64_t> size;
    std::vector<uint8_t> cat;
    Breakdown cur;
    // What PyTorch holds before the program's first tensor (replay() allocates it too).
    cur[Category::Temporaries] = t.startupBytes > 0 ? CachingAllocatorModel::roundSize(t.startupBytes) : 0;
    size_t k = 0;
    for (size_t i = 0; i <= t.events.size() && k < order.size(); ++i) {
        while (k < order.size() && events[order[k]] == i) {
            out[order[k]] = cur;
            ++k;
        }
        if (i == t.events.size())
            break;
        const MemEvent &e = t.events[i];
        if (e.id >= size.size()) {
            size.resize(std::max<size_t>(e.id + 1, size.size() * 2), 0);
            cat.resize(size.size(), 0);
        }
        if (e.kind == MemEvent::Alloc) {
            size[e.id] = CachingAllocatorModel::roundSize(e.bytes);
            cat[e.id] = static_cast<uint8_t>(e.category);
            cur.bytes[cat[e.id]] += size[e.id];
        } else if (e.kind == MemEvent::Free) {
            cur.bytes[cat[e.id]] -= size[e.id];
            size[e.id] = 0;
        }
    }
    return out;
}

} // namespace

bool isSimulated(const TrainingConfig &cfg)
{
    // FSDP2 (ZeRO-2/3) is simulated unit by unit (program.cpp fullyShard); QLoRA's Params4bit
    // under FSDP2 is not.
    return !cfg.offloadOptimizer && (cfg.zeroStage <= 1 || cfg.finetune != FineTune::QLoRA);
}

Estimate estimate(const ModelArch &model, const TrainingConfig &cfg, const EstimatorOptions &opt)
{
    model.validate();
    cfg.validate();
    // Learned absolute positions (GPT-2's wpe, an nn.Embedding of max_position_embeddings rows):
    // Transformers fails with an index error past them, so there is no run to estimate.
    if (model.learnedPositions && model.maxPositions > 0 && cfg.seqLen > model.maxPositions)
        throw InputError("seq", std::to_string(cfg.seqLen),
                         model.name + " learns one position embedding per position: at most max_position_embeddings = " +
                             std::to_string(model.maxPositions) + " tokens (Transformers fails past it)");
    // PEFT wraps the stacked expert weights of Qwen3-MoE and DeepSeek-V2/V3 in ParamWrappers when
    // LoRA names the MLP projections (model.h expertsLora; simulated in program.cpp, measured in
    // bf16 on one GPU). What was not measured is refused rather than guessed.
    if (cfg.finetune != FineTune::Full && familyTraitsOrLlama(model.modelType).expertsWrappedByPeft && model.isMoe()) {
        const ExpertsLora el = expertsLora(model, cfg.lora.targets);
        const bool allLinear =
            std::find(cfg.lora.targets.begin(), cfg.lora.targets.end(), "all-linear") != cfg.lora.targets.end();
        if (allLinear)
            throw InputError("lora.targets", "all-linear",
                             "all-linear on " + model.modelType + " (stacked experts) was not measured; name the "
                             "modules (q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)");
        if (el.partial)
            throw InputError("lora.targets", "gate_proj/up_proj",
                             model.modelType + " fuses gate and up in one experts.gate_up_proj: name both or neither");
        if (el.any()) {
            auto refuse = [&](const char *field, const std::string &value, const std::string &why) {
                throw InputError(field, value, "LoRA on " + model.modelType + "'s experts (PEFT ParamWrapper) " + why);
            };
            if (cfg.lora.dropout > 0)
                refuse("lora.dropout", [&] { std::ostringstream o; o << cfg.lora.dropout; return o.str(); }(),
                       "needs lora_dropout 0: PEFT raises for any other value");
            if (cfg.finetune == FineTune::QLoRA)
                refuse("finetune", "qlora", "under QLoRA was not measured; use LoRA, or target the attention only");
            if (parameterBytes(cfg.precision) != 2 || isAmp(cfg.precision))
                refuse("precision", std::string(toString(cfg.precision)),
                       "was measured in bf16 only (the factors are cast to the experts' dtype); use bf16 or fp16");
            if (cfg.zeroStage >= 2 || cfg.offloadOptimizer)
                refuse(cfg.offloadOptimizer ? "offload_optimizer" : "zero",
                       cfg.offloadOptimizer ? "true" : std::to_string(cfg.zeroStage),
                       "was measured on one GPU; it is estimated there, with DDP and with ZeRO-1, not with FSDP "
                       "(parametrized DTensors) or optimizer offload");
        }
    }
    // Selective checkpointing is simulated layer by layer; the ledger composes identical layers.
    if (!isSimulated(cfg) && !cfg.checkpointingUniform(model.numLayers))
        throw InputError("checkpoint_layers", std::to_string(cfg.checkpointLayers),
                         "checkpointing some layers is estimated on one GPU, DDP and ZeRO-1; with FSDP or "
                         "optimizer offload only all layers or none");
    // Activation offload is simulated op by op (autograd.h setSavedToHost); the ledger has no
    // saved-tensor hooks.
    if (cfg.activationOffload && !isSimulated(cfg))
        throw InputError("activation_offload", "true",
                         "activation offload is estimated on one GPU, DDP and ZeRO-1; not yet with FSDP (ZeRO 2/3) "
                         "or optimizer offload");
    // Multi-head latent attention is simulated op by op; the per-op ledger (FSDP, optimizer
    // offload) has no MLA yet.
    if (model.isMla() && !isSimulated(cfg))
        throw InputError("model.model_type", model.modelType,
                         "multi-head latent attention is estimated on one GPU, DDP and ZeRO-1; not yet with FSDP "
                         "(ZeRO 2/3) or optimizer offload");
    // PEFT's get_peft_model raises when no target module is found in the model ("Target modules
    // {...} not found in the base model"); an estimate of that run would have no adapters at all.
    if (cfg.finetune != FineTune::Full) {
        const auto on = loraAdaptedModules(model, cfg.lora.targets);
        if (std::none_of(on.begin(), on.end(), [](bool b) { return b; }) && !expertsLora(model, cfg.lora.targets).any()) {
            std::string targets, names;
            for (const auto &t : cfg.lora.targets)
                targets += (targets.empty() ? "" : ",") + t;
            std::set<std::string> seen;
            for (const auto &n : linearModuleNames(model))
                if (!n.empty() && seen.insert(n).second)
                    names += (names.empty() ? "" : ", ") + n;
            throw InputError("lora.targets", targets,
                             "none is a Linear module of " + model.modelType + ", so PEFT would refuse the run; its "
                             "Linear modules are " + names + " (or all-linear)");
        }
    }
    // Simulated: one GPU, DDP and ZeRO-1 (ZeroRedundancyOptimizer). FSDP (stages 2 and 3) and
    // optimizer offload still go through the per-op ledger.
    if (!isSimulated(cfg) || opt.ledgerOnly)
        return estimateLedger(model, cfg, opt);

    Estimate est = estimateLedger(model, cfg, opt); // parameters and notes
    // A warm-up and two steady steps, as the engine measures: the allocator's cache can still
    // grow in the second (Qwen2.5-0.5B fp32 and Llama-3.2-1B with 8-bit AdamW: -6.6% and -5.5%
    // peak reserved with one). The second step is the first's events again (repeatLastStep: the
    // program is the same and the step frees all it allocates), so only the replay pays for it;
    // simulating it too made every estimate 1.5x slower.
    auto run = std::make_shared<const Timeline>(simulateMeasuredRun(model, cfg, opt));
    const Timeline &t = *run;
    est.run = run;
    AllocatorConfig ac = opt.allocator;
    ac.capacityBytes = INT64_MAX; // the estimate asks what the step needs, not whether it fits
    const Replay r = replay(t, ac);

    // Steady state: the phases of steps 1 and 2 (step 0 is the warm-up), as the probe reports.
    std::array<const ReplayPhase *, 4> best{};
    int64_t reserved = 0;
    for (const auto &p : r.phases) {
        const size_t i = static_cast<size_t>(p.mark.phase);
        if (p.mark.phase == Phase::AfterLoad) {
            if (!best[i])
                best[i] = &p;
            continue;
        }
        if (p.mark.step < 1)
            continue;
        reserved = std::max(reserved, p.peakReservedBytes);
        if (!best[i] || p.peakAllocatedBytes > best[i]->peakAllocatedBytes)
            best[i] = &p;
    }
    std::vector<size_t> at;
    for (size_t i = 0; i < 4; ++i) {
        size_t ev = 0;
        if (best[i] && i == 0) {
            // After load: the tensors alive at its end, where the first forward begins.
            // (breakdownsAt gives the state after the first N events.)
            ev = t.events.size();
            for (const TimelineMark &mk : t.marks)
                if (mk.event > best[i]->mark.event) {
                    ev = mk.event;
                    break;
                }
        } else if (best[i]) {
            ev = best[i]->peakEvents;
        }
        at.push_back(ev);
    }
    const std::vector<Breakdown> bd = breakdownsAt(t, at);
    for (size_t i = 0; i < 4; ++i) {
        PhaseEstimate &pe = est.phases[i];
        pe.phase = kAllPhases[i];
        if (!best[i])
            continue;
        pe.peakAllocatedBytes = i == 0 ? best[i]->endAllocatedBytes : best[i]->peakAllocatedBytes;
        pe.peakReservedBytes = i == 0 ? best[i]->endReservedBytes : best[i]->peakReservedBytes;
        pe.atPeak = bd[i];
        // Blocks the allocator did not split count whole in its allocated bytes: the rest of a
        // block beyond the tensor's rounded size is slack.
        pe.atPeak[Category::AllocatorSlack] = std::max<int64_t>(0, pe.peakAllocatedBytes - pe.atPeak.allocated());
    }
    takePeakPhase(est);
    est.peakReservedBytes = std::max(reserved, est.peakAllocatedBytes);
    // Slack: what the allocator holds beyond the tensors' rounded bytes (cached free blocks, and
    // remainders too small to split off).
    est.peak[Category::AllocatorSlack] = std::max<int64_t>(0, est.peakReservedBytes - est.peak.allocated());
    addOutsideAllocator(est, cfg, opt);
    return est;
}

Timeline estimateTimeline(const ModelArch &model, const TrainingConfig &cfg, const EstimatorOptions &opt,
                          int steadySteps)
{
    model.validate();
    cfg.validate();
    if (steadySteps < 1 || steadySteps > 8)
        throw InputError("steady_steps", std::to_string(steadySteps), "must be in [1, 8]");
    return simulateRun(model, cfg, opt, steadySteps);
}

} // namespace headroom
