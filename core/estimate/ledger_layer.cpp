// The per-op ledger's decoder layer: each op's allocations as whole tensors, the layer composed
// from them. Every allocation names the PyTorch op or the HF Transformers / PEFT code path that
// makes it.
//
// Speed: a decoder layer is simulated once (plus layer 0, which differs under LoRA) and the
// other layers are composed arithmetically. Within the forward pass the live total only grows
// from layer to layer, and within backward it changes by the same amount per layer, so the
// peak over identical layers is always at the first or the last of them.

#include "ledger.h"

#include <algorithm>

namespace headroom::est {

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
    if (cfg.attention != Attention::Eager) { // SDPA, or a flash kernel (Note [Flash kernels])
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

} // namespace headroom::est
