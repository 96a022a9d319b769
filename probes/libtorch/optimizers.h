// Part of probe_torch.cpp, the probe's one Torch translation unit (each costs ~25 s to compile):
// the optimizers: their state (as the first step makes it) and their steps (torch.optim's foreach/fused/for-loop paths, bitsandbytes 8-bit, Adafactor, Lion). Included there, inside namespace headroom::probe's anonymous namespace, in this order:
// meter.h, network.h, optimizers.h, parallel.h. Not a header of its own.
// NOLINTBEGIN(llvm-header-guard)

// ---------------------------------------------------------------- optimizers
struct OptimizerState
{
    std::vector<Tensor> a, b; // exp_avg / exp_avg_sq, momentum, row/col variances, 8-bit state
    std::vector<Tensor> aMax, bMax; // 8-bit absmax
    std::vector<Tensor> steps;
    int64_t step = 0;
    bool created = false;

    int64_t bytes() const
    {
        int64_t n = 0;
        for (const auto *v : {&a, &b, &aMax, &bMax, &steps})
            for (const auto &t : *v)
                if (t.defined())
                    n += t.numel() * t.element_size();
        return n;
    }
};

std::vector<Tensor> grads(const std::vector<Tensor> &params)
{
    std::vector<Tensor> g;
    g.reserve(params.size());
    for (const auto &p : params)
        g.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
    return g;
}

// The optimizer's state as its first step creates it (_init_group): zeros of each parameter's
// shape, or of the factored/8-bit shapes. SGD keeps none.
void createState(const TrainingConfig &c, const std::vector<Tensor> &params, OptimizerState &st)
{
    torch::NoGradGuard noGrad;
    switch (c.optimizer) {
    case Optimizer::AdamW:
        for (const auto &p : params) {
            st.a.push_back(torch::zeros_like(p));
            st.b.push_back(torch::zeros_like(p));
            st.steps.push_back(torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(p.device())));
        }
        break;
    case Optimizer::SGD:
        break;
    case Optimizer::SGDMomentum: // momentum_buffer = clone(grad) on the first step
        for (const auto &p : params)
            st.a.push_back(torch::zeros_like(p));
        break;
    case Optimizer::Lion: // bitsandbytes Lion (32-bit): one fp32 state per parameter
        for (const auto &p : params)
            st.a.push_back(torch::zeros_like(p, p.options().dtype(torch::kFloat)));
        break;
    case Optimizer::Adafactor: // torch.optim.Adafactor: factored second moments for matrices
        for (const auto &p : params) {
            if (p.dim() >= 2) {
                st.a.push_back(torch::zeros({p.size(0)}, p.options()));
                st.b.push_back(torch::zeros({p.size(1)}, p.options()));
            } else {
                st.a.push_back(torch::zeros_like(p));
                st.b.push_back(Tensor());
            }
        }
        break;
    case Optimizer::AdamW8bit:
    case Optimizer::PagedAdamW8bit: // refused before (libtorchRefusal (headroom/support.h))
        // bitsandbytes blockwise 8-bit state: uint8 moments with an fp32 absmax per 256 values;
        // tensors under 4096 values keep fp32 state.
        for (const auto &p : params) {
            if (p.numel() >= 4096) {
                const int64_t blocks = (p.numel() + 255) / 256;
                auto u8 = p.options().dtype(torch::kUInt8);
                auto f32 = p.options().dtype(torch::kFloat);
                st.a.push_back(torch::zeros({p.numel()}, u8));
                st.b.push_back(torch::zeros({p.numel()}, u8));
                st.aMax.push_back(torch::zeros({blocks}, f32));
                st.bMax.push_back(torch::zeros({blocks}, f32));
            } else {
                st.a.push_back(torch::zeros_like(p, p.options().dtype(torch::kFloat)));
                st.b.push_back(torch::zeros_like(p, p.options().dtype(torch::kFloat)));
                st.aMax.push_back(Tensor());
                st.bMax.push_back(Tensor());
            }
        }
        break;
    }
    st.created = true;
}

void optimizerStep(const TrainingConfig &c, std::vector<Tensor> &params, OptimizerState &st)
{
    torch::NoGradGuard noGrad;
    const double lr = 1e-5, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.01;
    ++st.step;
    std::vector<Tensor> g = grads(params);
    const bool first = !st.created;
    if (first && c.optimizer == Optimizer::SGDMomentum) {
        for (const auto &x : g)
            st.a.push_back(x.clone());
        st.created = true;
    } else if (first) {
        createState(c, params, st);
    }
    switch (c.optimizer) {
    case Optimizer::AdamW: {
        const double bc1 = 1 - std::pow(beta1, double(st.step)), bc2 = 1 - std::pow(beta2, double(st.step));
        const double stepSize = lr / bc1, bc2Sqrt = std::sqrt(bc2);
        if (c.optimizerImpl == OptimizerImpl::Fused) {
#if TORCH_VERSION_MAJOR >= 2
            if (!params.empty() && params.front().is_cuda()) {
                for (auto &s : st.steps)
                    s.add_(1);
                at::_fused_adamw_(params, g, st.a, st.b, {}, st.steps, lr, beta1, beta2, wd, eps, false, false);
                break;
            }
#endif
        }
        if (c.optimizerImpl == OptimizerImpl::ForLoop || c.optimizerImpl == OptimizerImpl::Fused) {
            // torch.optim.adamw._single_tensor_adamw
            for (size_t i = 0; i < params.size(); ++i) {
                params[i].mul_(1 - lr * wd);
                st.a[i].mul_(beta1).add_(g[i], 1 - beta1);
                st.b[i].mul_(beta2).addcmul_(g[i], g[i], 1 - beta2);
                Tensor denom = (st.b[i].sqrt() / bc2Sqrt).add_(eps);
                params[i].addcdiv_(st.a[i], denom, -stepSize);
            }
            break;
        }
        // torch.optim.adam._multi_tensor_adam (decoupled weight decay)
        torch::_foreach_mul_(params, 1 - lr * wd);
        torch::_foreach_mul_(st.a, beta1);
        torch::_foreach_add_(st.a, g, 1 - beta1);
        torch::_foreach_mul_(st.b, beta2);
        torch::_foreach_addcmul_(st.b, g, g, 1 - beta2);
        std::vector<Tensor> denom = torch::_foreach_sqrt(st.b);
        torch::_foreach_div_(denom, bc2Sqrt);
        torch::_foreach_add_(denom, eps);
        torch::_foreach_addcdiv_(params, st.a, denom, -stepSize);
        break;
    }
    case Optimizer::SGD:
        torch::_foreach_add_(params, g, -lr);
        break;
    case Optimizer::SGDMomentum:
        if (!first) {
            torch::_foreach_mul_(st.a, 0.9);
            torch::_foreach_add_(st.a, g, 1.0);
        }
        torch::_foreach_add_(params, st.a, -lr);
        break;
    case Optimizer::Lion: {
        // bitsandbytes' optimizer_update_32bit runs in place; here in 1 Mi-element chunks, so
        // the update's temporaries stay a few MiB.
        constexpr int64_t chunk = int64_t(1) << 20;
        for (size_t i = 0; i < params.size(); ++i) {
            Tensor pf = params[i].view({-1}), gf = g[i].reshape({-1}), sf = st.a[i].view({-1});
            for (int64_t o = 0; o < pf.numel(); o += chunk) {
                const int64_t len = std::min(chunk, pf.numel() - o);
                Tensor gc = gf.narrow(0, o, len).to(torch::kFloat);
                Tensor u = sf.narrow(0, o, len).mul(beta1).add_(gc, 1 - beta1).sign_();
                pf.narrow(0, o, len).add_(u, -lr);
                sf.narrow(0, o, len).mul_(beta2).add_(gc, 1 - beta2);
            }
        }
        break;
    }
    case Optimizer::Adafactor: {
        std::vector<Tensor> sq = torch::_foreach_mul(g, g);
        const double decay = 1 - std::pow(double(st.step), -0.8);
        for (size_t i = 0; i < params.size(); ++i) {
            if (params[i].dim() >= 2) {
                st.a[i].lerp_(sq[i].mean(-1), 1 - decay);
                st.b[i].lerp_(sq[i].mean(-2), 1 - decay);
            } else {
                st.a[i].lerp_(sq[i], 1 - decay);
            }
        }
        sq.clear();
        for (size_t i = 0; i < params.size(); ++i) {
            Tensor var = params[i].dim() >= 2 ? torch::outer(st.a[i], st.b[i]) / st.a[i].mean().clamp_min(1e-30)
                                              : st.a[i];
            params[i].add_(g[i] * var.clamp_min(1e-30).rsqrt(), -1e-2);
        }
        break;
    }
    case Optimizer::PagedAdamW8bit:
    case Optimizer::AdamW8bit: {
        // The update runs through fp32 per tensor.
        const double bc1 = 1 - std::pow(beta1, double(st.step)), bc2 = 1 - std::pow(beta2, double(st.step));
        for (size_t i = 0; i < params.size(); ++i) {
            Tensor gf = g[i].to(torch::kFloat).view({-1});
            Tensor ea, eb;
            if (st.aMax[i].defined()) {
                ea = (st.a[i].to(torch::kFloat) / 127.5 - 1).view({-1});
                eb = (st.b[i].to(torch::kFloat) / 255.0).view({-1});
                ea = ea.mul_(beta1).add_(gf, 1 - beta1);
                eb = eb.mul_(beta2).addcmul_(gf, gf, 1 - beta2);
                Tensor upd = (ea / bc1) / ((eb / bc2).sqrt_().add_(eps));
                params[i].view({-1}).add_(upd.to(params[i].scalar_type()), -lr);
                st.a[i].copy_(((ea.clamp(-1, 1) + 1) * 127.5).to(torch::kUInt8));
                st.b[i].copy_((eb.clamp(0, 1) * 255.0).to(torch::kUInt8));
            } else {
                st.a[i].mul_(beta1).add_(g[i].to(torch::kFloat), 1 - beta1);
                st.b[i].mul_(beta2).addcmul_(g[i].to(torch::kFloat), g[i].to(torch::kFloat), 1 - beta2);
            }
        }
        break;
    }
    }
}
// NOLINTEND(llvm-header-guard)
