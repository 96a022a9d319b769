// Part of probe_torch.cpp, the probe's one Torch translation unit (each costs ~25 s to compile):
// the network: the fused loss, autocast, the decoder (HF Llama/Mistral/Qwen op for op, PEFT LoRA, NF4) and one step. Included there, inside namespace headroom::probe's anonymous namespace, in this order:
// meter.h, network.h, optimizers.h, parallel.h. Not a header of its own.
// NOLINTBEGIN(llvm-header-guard)

// ---------------------------------------------------------------- fused loss
// A fused linear cross-entropy with the memory pattern of Liger's LigerFusedLinearCrossEntropy
// (liger_kernel/ops/fused_linear_cross_entropy.py, reduction "mean"): the forward makes the
// gradients chunk by chunk and keeps them; the logits never exist whole. Per chunk one
// [chunk, vocab] buffer holds the logits, then (in place, as Liger's Triton kernel writes it) the
// softmax gradient; grad_input takes a [chunk, hidden] product; grad_weight gets each chunk's
// [vocab, hidden] product through an fp32 copy. Without autocast (refused by
// libtorchRefusal (headroom/support.h)).
struct FusedLossFn : public torch::autograd::Function<FusedLossFn>
{
    static Tensor forward(torch::autograd::AutogradContext *ctx, Tensor x, Tensor w, Tensor labels)
    {
        const int64_t hidden = w.size(1), vocab = w.size(0);
        Tensor in = x.reshape({-1, hidden});
        const int64_t tokens = in.size(0);
        Tensor gradInput = torch::zeros_like(in);
        Tensor gradWeight = w.requires_grad() ? torch::zeros_like(w) : Tensor();
        Tensor loss1d = torch::zeros({tokens}, in.options().dtype(torch::kFloat));
        Tensor valid = labels.ne(-100);
        const int64_t nonIgnored = std::max<int64_t>(1, valid.sum().item<int64_t>());
        const int64_t chunk = fusedLossChunkRows(tokens, hidden, vocab);
        for (int64_t start = 0; start < tokens; start += chunk) {
            const int64_t n = std::min(chunk, tokens - start);
            Tensor xc = in.narrow(0, start, n);
            Tensor target = labels.narrow(0, start, n);
            Tensor keep = valid.narrow(0, start, n).unsqueeze(1);
            Tensor idx = target.clamp_min(0).unsqueeze(1);
            Tensor logits = torch::mm(xc, w.t());
            {
                Tensor picked = logits.gather(1, idx).to(torch::kFloat);
                Tensor top = std::get<0>(logits.max(1, true));
                logits.sub_(top).exp_();
                Tensor sum = logits.sum(1, true, torch::kFloat);
                loss1d.narrow(0, start, n).copy_(((sum.log() + top.to(torch::kFloat) - picked) * keep).squeeze(1) / nonIgnored);
                logits.div_(sum.to(logits.scalar_type()));
                logits.scatter_add_(1, idx, torch::full({n, 1}, -1.0, logits.options()));
                logits.mul_(keep.to(logits.scalar_type())).div_(static_cast<double>(nonIgnored));
            }
            gradInput.narrow(0, start, n).copy_(torch::mm(logits, w));
            if (gradWeight.defined())
                // Liger (ead96b6) with a weight in the logits' dtype: grad_weight +=
                // torch.mm(grad_logits_chunk.t(), _input_chunk).float() (two [vocab, hidden]
                // temporaries per chunk; measured with the real library on the H200).
                gradWeight.add_(torch::mm(logits.t(), xc).to(torch::kFloat));
        }
        valid.reset();
        Tensor loss = loss1d.sum();
        ctx->save_for_backward({gradInput, gradWeight.defined() ? gradWeight : Tensor()});
        ctx->saved_data["shape"] = x.sizes().vec();
        return loss;
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grads)
    {
        auto saved = ctx->get_saved_variables();
        Tensor gi = saved[0], gw = saved[1];
        if (!grads[0].equal(torch::ones({}, grads[0].options()))) { // element_mul in place
            gi.mul_(grads[0]);
            if (gw.defined())
                gw.mul_(grads[0]);
        }
        return {gi.view(ctx->saved_data["shape"].toIntVector()), gw, Tensor()};
    }
};

// ---------------------------------------------------------------- autocast
class AutocastGuard
{
public:
    AutocastGuard(bool enabled, c10::DeviceType dev, c10::ScalarType dtype)
        : m_enabled(enabled)
        , m_dev(dev)
    {
        if (!m_enabled)
            return;
#if TORCH_VERSION_MAJOR >= 2
        m_prev = at::autocast::is_autocast_enabled(dev);
        at::autocast::set_autocast_dtype(dev, dtype);
        at::autocast::set_autocast_enabled(dev, true);
#else
        if (dev == c10::DeviceType::CPU) {
            m_prev = at::autocast::is_cpu_enabled();
            at::autocast::set_autocast_cpu_dtype(dtype);
            at::autocast::set_cpu_enabled(true);
        } else {
            m_prev = at::autocast::is_enabled();
            at::autocast::set_autocast_gpu_dtype(dtype);
            at::autocast::set_enabled(true);
        }
#endif
        at::autocast::increment_nesting();
    }
    ~AutocastGuard()
    {
        if (!m_enabled)
            return;
        // torch.autocast.__exit__: the weight-cast cache lives until the outermost context exits.
        if (at::autocast::decrement_nesting() == 0)
            at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR >= 2
        at::autocast::set_autocast_enabled(m_dev, m_prev);
#else
        if (m_dev == c10::DeviceType::CPU)
            at::autocast::set_cpu_enabled(m_prev);
        else
            at::autocast::set_enabled(m_prev);
#endif
    }

private:
    bool m_enabled;
    c10::DeviceType m_dev;
    bool m_prev = false;
};

// ---------------------------------------------------------------- the model
constexpr float kNf4[16] = {-1.0f,       -0.6961928f, -0.5250731f, -0.3949175f, -0.2844414f, -0.1848449f,
                            -0.0910500f, 0.0f,        0.0795803f,  0.1609302f,  0.2461123f,  0.3379152f,
                            0.4407098f,  0.5626170f,  0.7229568f,  1.0f};

struct Linear
{
    int64_t in = 0, out = 0;
    Tensor weight, bias;
    // QLoRA: NF4 packed two per byte, absmax per 64 values (fp32, or uint8 + fp32 per 256 blocks).
    Tensor packed, absmax, absmax2;
    // LoRA (PEFT): fp32 adapters, as get_peft_model's autocast_adapter_dtype leaves them.
    Tensor loraA, loraB;
    double scaling = 1.0;
};

struct Mlp
{
    Linear gate, up, down;
};

struct Layer
{
    Tensor norm1, norm1b, norm2, norm2b, qNorm, kNorm;
    Linear q, k, v, o;
    Mlp mlp;
    Tensor router;
    std::vector<Mlp> experts;
    Mlp shared;
    Tensor sharedGate;
};

struct Net;
Tensor dequantNf4(const Linear &l, c10::ScalarType dtype, const Tensor &code);

// bitsandbytes MatMul4Bit: saves the packed weight only; dequantizes in forward (F.linear with
// the bias, as gemm_4bit's dequant + F.linear path) and in backward.
struct Linear4bitFn : public torch::autograd::Function<Linear4bitFn>
{
    static Tensor forward(torch::autograd::AutogradContext *ctx, Tensor x, int64_t linearPtr, int64_t codePtr)
    {
        const auto *l = reinterpret_cast<const Linear *>(linearPtr);
        const auto *code = reinterpret_cast<const Tensor *>(codePtr);
        ctx->saved_data["l"] = linearPtr;
        ctx->saved_data["c"] = codePtr;
        ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
        Tensor w = dequantNf4(*l, x.scalar_type(), *code);
        return torch::linear(x, w, l->bias);
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grads)
    {
        const auto *l = reinterpret_cast<const Linear *>(ctx->saved_data["l"].toInt());
        const auto *code = reinterpret_cast<const Tensor *>(ctx->saved_data["c"].toInt());
        const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
        Tensor w = dequantNf4(*l, dtype, *code);
        return {grads[0].matmul(w), Tensor(), Tensor()};
    }
};

// The [out, in] weight in `dtype`, as bitsandbytes' dequantize kernel writes it: one output
// tensor, filled here 64 Ki blocks at a time so the decoding's temporaries stay a few MiB (the
// kernel has none); double quantization decodes the 8-bit absmax first (an fp32 tensor per
// block, as dequantize_blockwise makes it).
Tensor dequantNf4(const Linear &l, c10::ScalarType dtype, const Tensor &code)
{
    const int64_t numel = l.in * l.out;
    const int64_t blocks = (numel + 63) / 64;
    Tensor absmax = l.absmax;
    if (l.absmax2.defined()) // double quantization: 8-bit absmax scaled per 256 blocks
        absmax = (l.absmax.to(torch::kFloat) / 255.0f).view({-1}) *
                 l.absmax2.repeat_interleave(256).slice(0, 0, l.absmax.numel());
    Tensor w = torch::empty({numel}, l.packed.options().dtype(dtype));
    constexpr int64_t kChunkBlocks = int64_t(1) << 16;
    for (int64_t b0 = 0; b0 < blocks; b0 += kChunkBlocks) {
        const int64_t nb = std::min(kChunkBlocks, blocks - b0);
        const int64_t e0 = b0 * 64, ne = std::min(nb * 64, numel - e0);
        Tensor bytes = l.packed.slice(0, e0 / 2, (e0 + ne + 1) / 2);
        Tensor hi = torch::div(bytes, 16, "floor");
        Tensor idx = torch::stack({hi, bytes - hi * 16}, -1).view({-1}).slice(0, 0, ne).to(torch::kInt);
        Tensor vals = torch::index_select(code, 0, idx);
        Tensor padded = vals.numel() == nb * 64 ? vals : torch::constant_pad_nd(vals, {0, nb * 64 - ne});
        Tensor scaled = padded.view({nb, 64}) * absmax.slice(0, b0, b0 + nb).view({nb, 1});
        w.slice(0, e0, e0 + ne).copy_(scaled.view({-1}).slice(0, 0, ne));
    }
    return w.view({l.out, l.in});
}

struct Net
{
    const ModelArch &m;
    const TrainingConfig &c;
    torch::Device device;
    c10::ScalarType paramType, computeType;
    c10::ScalarType quantComputeType = torch::kBFloat16; // QLoRA: Linear4bit's compute_dtype
    bool amp = false, full = true, qlora = false;
    Tensor embed, positions, finalNorm, finalNormB, lmHead, nf4Code;
    std::vector<Layer> layers;
    std::vector<Tensor> trainable;
    int64_t weightBytes = 0;
    std::array<bool, kLinearModuleCount> loraOn{};
    // SIGTERM during the build: a large model's random initialisation takes seconds on the CPU;
    // every parameter checks the flag, so a stop comes within one tensor's init.
    const std::atomic<bool> *stop = nullptr;
    Net(const ModelArch &model, const TrainingConfig &config, torch::Device dev, const std::atomic<bool> *stopFlag = nullptr)
        : m(model)
        , c(config)
        , device(dev)
        , stop(stopFlag)
    {
        amp = isAmp(c.precision);
        paramType = parameterBytes(c.precision) == 4 ? torch::kFloat
                    : c.precision == Precision::FP16  ? torch::kHalf
                                                      : torch::kBFloat16;
        computeType = c.precision == Precision::FP32                                     ? torch::kFloat
                      : (c.precision == Precision::FP16 || c.precision == Precision::AmpFP16) ? torch::kHalf
                                                                                         : torch::kBFloat16;
        full = c.finetune == FineTune::Full;
        qlora = c.finetune == FineTune::QLoRA;
        if (qlora) {
            // peft.prepare_model_for_kbit_training: every parameter that is not 4-bit is fp32, so
            // the residual stream and the activations are fp32; Linear4bit computes in the
            // model's dtype (amp QLoRA is refused: libtorchRefusal (headroom/support.h)).
            quantComputeType = computeType;
            paramType = computeType = torch::kFloat;
        }
        if (!full)
            loraOn = loraTargetMask(c.lora.targets);
        nf4Code = torch::from_blob(const_cast<float *>(kNf4), {16}, torch::kFloat).to(device);
        build();
    }

    Tensor param(std::vector<int64_t> shape, bool isNorm = false, bool trainableParam = true)
    {
        if (stop && stop->load())
            throw StopRequested();
        auto opts = torch::TensorOptions().dtype(paramType).device(device);
        Tensor t = isNorm ? torch::ones(shape, opts) : torch::empty(shape, opts);
        if (!isNorm) {
            // In slices of about 16 M elements, the flag checked between them: one embedding of a
            // 150k vocabulary takes seconds to fill on a CPU. Views: no extra memory.
            const int64_t rows = t.dim() > 0 ? t.size(0) : 1;
            const int64_t perRow = rows > 0 ? t.numel() / rows : 1;
            const int64_t step = std::max<int64_t>(1, (int64_t(16) << 20) / std::max<int64_t>(1, perRow));
            if (t.dim() == 0)
                t.normal_(0.0, 0.02);
            for (int64_t r = 0; t.dim() > 0 && r < rows; r += step) {
                if (stop && stop->load())
                    throw StopRequested();
                t.narrow(0, r, std::min(step, rows - r)).normal_(0.0, 0.02);
            }
        }
        weightBytes += t.numel() * t.element_size();
        if (full && trainableParam) {
            t.requires_grad_(true);
            trainable.push_back(t);
        }
        return t;
    }

    Linear linear(int64_t in, int64_t out, bool bias, LinearModule module)
    {
        Linear l;
        l.in = in;
        l.out = out;
        if (qlora) {
            const int64_t numel = in * out;
            const int64_t blocks = (numel + 63) / 64;
            auto u8 = torch::TensorOptions().dtype(torch::kUInt8).device(device);
            l.packed = torch::randint(0, 256, {(numel + 1) / 2}, u8);
            if (c.lora.doubleQuant) {
                l.absmax = torch::randint(1, 256, {blocks}, u8);
                l.absmax2 = torch::rand({(blocks + 255) / 256}, torch::TensorOptions().device(device)) * 0.1 + 0.01;
            } else {
                l.absmax = torch::rand({blocks}, torch::TensorOptions().device(device)) * 0.1 + 0.01;
            }
            for (const Tensor &t : {l.packed, l.absmax, l.absmax2})
                if (t.defined())
                    weightBytes += t.numel() * t.element_size();
        } else {
            l.weight = param({out, in});
        }
        if (bias && qlora) { // a Linear4bit's bias ends in compute_dtype (cast in place at the first forward)
            l.bias = torch::zeros({out}, torch::TensorOptions().dtype(quantComputeType).device(device));
            weightBytes += l.bias.numel() * l.bias.element_size();
        } else if (bias) {
            l.bias = param({out});
        }
        if (!full && loraOn[static_cast<size_t>(module)]) {
            auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
            const int64_t r = c.lora.rank;
            l.loraA = torch::empty({r, in}, f32).uniform_(-1.0 / std::sqrt(double(in)), 1.0 / std::sqrt(double(in)));
            l.loraB = torch::zeros({out, r}, f32);
            for (Tensor *t : {&l.loraA, &l.loraB}) {
                t->requires_grad_(true);
                trainable.push_back(*t);
                weightBytes += t->numel() * t->element_size();
            }
            l.scaling = c.lora.alpha / double(r);
        }
        return l;
    }

    Mlp mlp(int64_t inter)
    {
        Mlp p;
        if (m.mlp == MlpKind::Gated)
            p.gate = linear(m.hiddenSize, inter, m.mlpBias, LinearModule::Gate);
        p.up = linear(m.hiddenSize, inter, m.mlpBias, LinearModule::Up);
        p.down = linear(inter, m.hiddenSize, m.mlpBias, LinearModule::Down);
        return p;
    }

    void build()
    {
        const int64_t h = m.hiddenSize, qOut = m.numHeads * m.headDim, kvOut = m.numKvHeads * m.headDim;
        const bool ln = m.norm == NormKind::LayerNorm;
        embed = param({m.vocabSize, h});
        if (m.learnedPositions)
            positions = param({m.maxPositions, h});
        layers.reserve(static_cast<size_t>(m.numLayers)); // onUnit keeps pointers into the layers
        for (int64_t i = 0; i < m.numLayers; ++i) {
            Layer L;
            L.norm1 = param({h}, true);
            L.norm2 = param({h}, true);
            if (ln) {
                L.norm1b = param({h}, false);
                L.norm2b = param({h}, false);
            }
            L.q = linear(h, qOut, m.qkvBias, LinearModule::Q);
            L.k = linear(h, kvOut, m.qkvBias, LinearModule::K);
            L.v = linear(h, kvOut, m.qkvBias, LinearModule::V);
            L.o = linear(qOut, h, m.oBias, LinearModule::O);
            if (m.qkNorm) {
                L.qNorm = param({m.headDim}, true);
                L.kNorm = param({m.headDim}, true);
            }
            if (m.isMoe()) {
                L.router = param({m.numExperts, h});
                for (int64_t e = 0; e < m.numExperts; ++e)
                    L.experts.push_back(mlp(m.expertIntermediateSize));
                if (m.sharedExpertIntermediateSize > 0)
                    L.shared = mlp(m.sharedExpertIntermediateSize);
                if (m.sharedExpertGate)
                    L.sharedGate = param({1, h});
            } else {
                L.mlp = mlp(m.intermediateSize);
            }
            layers.push_back(std::move(L));
        }
        finalNorm = param({h}, true);
        if (ln)
            finalNormB = param({h}, false);
        if (!m.tiedEmbeddings)
            lmHead = param({m.vocabSize, h});
    }

    // ---- ops, as HF writes them
    Tensor norm(const Tensor &x, const Tensor &w, const Tensor &b) const
    {
        if (m.norm == NormKind::LayerNorm)
            return torch::layer_norm(x, {x.size(-1)}, w, b, 1e-5);
        // LlamaRMSNorm.forward
        const auto inputType = x.scalar_type();
        Tensor hs = x.to(torch::kFloat);
        Tensor variance = hs.pow(2).mean(-1, true);
        hs = hs * torch::rsqrt(variance + 1e-6);
        return w * hs.to(inputType);
    }

    Tensor applyLinear(const Linear &l, const Tensor &x) const
    {
        Tensor result;
        if (qlora) {
            // Linear4bit.forward: x.to(compute_dtype), matmul_4bit, .to(the input's dtype); PEFT's
            // lora/bnb.py then clones the result before adding the adapters.
            Tensor y = Linear4bitFn::apply(x.to(quantComputeType), reinterpret_cast<int64_t>(&l),
                                           reinterpret_cast<int64_t>(&nf4Code));
            result = y.to(x.scalar_type());
            y.reset();
            if (l.loraA.defined())
                result = result.clone();
        } else {
            result = torch::linear(x, l.weight, l.bias);
        }
        if (!l.loraA.defined())
            return result;
        // peft.tuners.lora.layer.Linear.forward
        const auto resultType = result.scalar_type();
        Tensor xa = x.to(l.loraA.scalar_type());
        if (c.lora.dropout > 0.0)
            xa = torch::dropout(xa, c.lora.dropout, true);
        result = result + torch::linear(torch::linear(xa, l.loraA), l.loraB) * l.scaling;
        return result.to(resultType);
    }

    Tensor act(const Tensor &x) const
    {
        if (m.activation == "silu")
            return torch::silu(x);
        if (m.activation == "gelu_new" || m.activation == "gelu_fast") // HF NewGELUActivation, as Python ops
            return 0.5 * x * (1.0 + torch::tanh(0.7978845608028654 /* sqrt(2 / pi) */ * (x + 0.044715 * torch::pow(x, 3.0))));
        if (m.activation == "gelu")
            return torch::gelu(x);
        return torch::gelu(x, "tanh");
    }

    Tensor applyMlp(const Mlp &p, const Tensor &x) const
    {
        if (m.mlp == MlpKind::Gated)
            return applyLinear(p.down, act(applyLinear(p.gate, x)) * applyLinear(p.up, x));
        return applyLinear(p.down, act(applyLinear(p.up, x)));
    }

    static Tensor rotateHalf(const Tensor &x)
    {
        const int64_t half = x.size(-1) / 2;
        return torch::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
    }

    static Tensor repeatKv(const Tensor &x, int64_t rep)
    {
        if (rep == 1)
            return x;
        const auto b = x.size(0), kv = x.size(1), s = x.size(2), d = x.size(3);
        return x.unsqueeze(2).expand({b, kv, rep, s, d}).reshape({b, kv * rep, s, d});
    }

    Tensor attention(const Layer &L, const Tensor &x, const Tensor &cos, const Tensor &sin, const Tensor &mask) const
    {
        const int64_t b = x.size(0), s = x.size(1), nh = m.numHeads, kv = m.numKvHeads, d = m.headDim;
        Tensor q = applyLinear(L.q, x).view({b, s, nh, d});
        Tensor k = applyLinear(L.k, x).view({b, s, kv, d});
        Tensor v = applyLinear(L.v, x).view({b, s, kv, d}).transpose(1, 2);
        if (m.qkNorm) {
            q = norm(q, L.qNorm, {});
            k = norm(k, L.kNorm, {});
        }
        q = q.transpose(1, 2);
        k = k.transpose(1, 2);
        // apply_rotary_pos_emb
        Tensor qe = (q * cos) + (rotateHalf(q) * sin);
        Tensor ke = (k * cos) + (rotateHalf(k) * sin);
        Tensor out;
        const double scaling = 1.0 / std::sqrt(double(d));
        if (c.attention != Attention::Eager) { // a flash kernel as SDPA's (Note [Flash kernels])
#if TORCH_VERSION_MAJOR >= 2
            out = at::scaled_dot_product_attention(qe, ke, v, {}, 0.0, true, c10::nullopt, kv < nh);
#else
            out = std::get<0>(at::_scaled_dot_product_attention(qe, repeatKv(ke, nh / kv), repeatKv(v, nh / kv), {},
                                                                 0.0, false, true));
#endif
        } else {
            // eager_attention_forward
            Tensor kr = repeatKv(ke, nh / kv), vr = repeatKv(v, nh / kv);
            Tensor w = torch::matmul(qe, kr.transpose(2, 3)) * scaling;
            w = w + mask;
            w = torch::softmax(w, -1, torch::kFloat).to(qe.scalar_type());
            out = torch::matmul(w, vr);
        }
        out = out.transpose(1, 2).contiguous().reshape({b, s, nh * d});
        return applyLinear(L.o, out);
    }

    Tensor moe(const Layer &L, const Tensor &x) const
    {
        // MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock
        const auto shape = x.sizes().vec();
        Tensor hs = x.reshape({-1, m.hiddenSize});
        Tensor logits = torch::linear(hs, L.router);
        Tensor weights = torch::softmax(logits, 1, torch::kFloat);
        auto top = torch::topk(weights, m.expertsPerToken, -1);
        Tensor rw = std::get<0>(top);
        rw = (rw / rw.sum(-1, true)).to(hs.scalar_type());
        Tensor sel = std::get<1>(top);
        Tensor outAcc = torch::zeros_like(hs);
        for (int64_t e = 0; e < m.numExperts; ++e) {
            Tensor hit = (sel == e).nonzero();
            if (hit.size(0) == 0)
                continue;
            Tensor rows = hit.select(1, 0), slot = hit.select(1, 1);
            Tensor cur = hs.index_select(0, rows);
            Tensor y = applyMlp(L.experts[static_cast<size_t>(e)], cur) * rw.index({rows, slot}).unsqueeze(1);
            outAcc = outAcc.index_add(0, rows, y.to(outAcc.scalar_type()));
        }
        if (L.shared.down.in > 0) {
            Tensor so = applyMlp(L.shared, hs);
            if (L.sharedGate.defined())
                so = torch::sigmoid(torch::linear(hs, L.sharedGate)) * so;
            outAcc = outAcc + so;
        }
        return outAcc.view(shape);
    }

    Tensor layerForward(size_t i, const Tensor &x, const Tensor &cos, const Tensor &sin, const Tensor &mask) const
    {
        const Layer &L = layers[i];
        Tensor h = x + attention(L, norm(x, L.norm1, L.norm1b), cos, sin, mask);
        Tensor n2 = norm(h, L.norm2, L.norm2b);
        return h + (m.isMoe() ? moe(L, n2) : applyMlp(L.mlp, n2));
    }
};

struct LayerCall
{
    const Net *net;
    size_t index;
    Tensor cos, sin, mask;
};

// Gradient checkpointing per decoder layer: keeps only the layer input, recomputes in backward.
struct CheckpointFn : public torch::autograd::Function<CheckpointFn>
{
    static Tensor forward(torch::autograd::AutogradContext *ctx, Tensor x, int64_t callPtr)
    {
        ctx->save_for_backward({x});
        ctx->saved_data["call"] = callPtr;
        const auto *call = reinterpret_cast<const LayerCall *>(callPtr);
        torch::NoGradGuard noGrad;
        return call->net->layerForward(call->index, x, call->cos, call->sin, call->mask);
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grads)
    {
        const auto *call = reinterpret_cast<const LayerCall *>(ctx->saved_data["call"].toInt());
        Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
        Tensor out;
        {
            torch::AutoGradMode on(true);
            AutocastGuard ac(call->net->amp, call->net->device.type(), call->net->computeType);
            out = call->net->layerForward(call->index, x, call->cos, call->sin, call->mask);
        }
        torch::autograd::backward({out}, {grads[0]});
        return {x.grad(), Tensor()};
    }
};

// ---------------------------------------------------------------- the step

struct Step
{
    Net &net;
    Tensor ids, labels;
    std::vector<LayerCall> calls;
    LayerMarker marker; // its recorder is set for the step that --snapshot samples

    Tensor forward()
    {
        const auto &m = net.m;
        const int64_t b = ids.size(0), s = ids.size(1);
        AutocastGuard ac(net.amp, net.device.type(), net.computeType);
        Tensor x = torch::embedding(net.embed, ids);
        if (net.positions.defined())
            x = x + torch::embedding(net.positions, torch::arange(s, ids.options()).unsqueeze(0));
        if (net.c.gradCheckpointing && !x.requires_grad())
            x.requires_grad_(true); // HF enable_input_require_grads, needed by reentrant checkpointing
        // LlamaRotaryEmbedding: fp32 with autocast off, then cast to the hidden dtype.
        Tensor cos, sin;
        {
            AutocastGuard off(false, net.device.type(), net.computeType);
            auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(net.device);
            Tensor invFreq = 1.0 / torch::pow(10000.0, torch::arange(0, m.headDim, 2, f32) / double(m.headDim));
            Tensor pos = torch::arange(s, f32);
            Tensor freqs = torch::outer(pos, invFreq);
            Tensor emb = torch::cat({freqs, freqs}, -1);
            cos = emb.cos().to(x.scalar_type()).unsqueeze(0).unsqueeze(0);
            sin = emb.sin().to(x.scalar_type()).unsqueeze(0).unsqueeze(0);
        }
        Tensor mask;
        if (net.c.attention == Attention::Eager) { // (b, 1, s, s) additive causal mask, as HF builds it
            auto o = torch::TensorOptions().dtype(net.computeType).device(net.device);
            mask = torch::full({s, s}, -1e4, o).triu(1).expand({b, 1, s, s}).contiguous();
        }
        calls.clear();
        calls.reserve(net.layers.size());
        for (size_t i = 0; i < net.layers.size(); ++i) {
            calls.push_back({&net, i, cos, sin, mask});
            if (net.c.checkpointed(static_cast<int64_t>(i)))
                x = CheckpointFn::apply(x, reinterpret_cast<int64_t>(&calls.back()));
            else
                x = net.layerForward(i, x, cos, sin, mask);
            if (x.requires_grad() && (marker.recorder || marker.stop))
                x = MarkFn::apply(x, reinterpret_cast<int64_t>(&marker), static_cast<int64_t>(i));
            else
                marker.at("forward, after layer " + std::to_string(i));
        }
        x = net.norm(x, net.finalNorm, net.finalNormB);
        if (net.c.loss == Loss::Fused)
            return FusedLossFn::apply(x, net.lmHead.defined() ? net.lmHead : net.embed, labels);
        Tensor logits = torch::linear(x, net.lmHead.defined() ? net.lmHead : net.embed);
        if (m.finalLogitSoftcap > 0)
            logits = torch::tanh(logits / m.finalLogitSoftcap) * m.finalLogitSoftcap;
        // ForCausalLMLoss
        Tensor flat = logits.to(torch::kFloat).view({-1, m.vocabSize});
        return torch::nn::functional::cross_entropy(flat, labels,
                                                    torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
    }
};
// NOLINTEND(llvm-header-guard)
