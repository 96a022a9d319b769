#include "headroom/layers.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <unordered_map>

namespace headroom {

std::string_view label(OpKind k)
{
    switch (k) {
    case OpKind::Attention: return "Attention";
    case OpKind::Mlp: return "MLP and experts";
    case OpKind::Norm: return "Norms";
    case OpKind::Lora: return "LoRA";
    case OpKind::Logits: return "Logits and loss";
    case OpKind::Embedding: return "Embedding and inputs";
    case OpKind::Other: return "Residuals, backward and other";
    }
    return "?";
}

OpKind opKindOf(std::string_view op)
{
    std::string s(op.substr(0, 300));
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const auto any = [&](std::initializer_list<std::string_view> words) {
        return std::any_of(words.begin(), words.end(), [&](std::string_view w) { return s.find(w) != std::string::npos; });
    };
    // In this order: a norm named after attention ("post_attention_layernorm") is a norm, an
    // expert's projection ("shared_expert.up_proj") the MLP's.
    if (any({"lora", "_cast_input_dtype", "tuners/"})) // PEFT's adapters, and its casts for them
        return OpKind::Lora;
    if (any({"lm_head", "loss", "logits", "cross_entropy", "forcausallm"}))
        return OpKind::Logits;
    if (any({"norm"}))
        return OpKind::Norm;
    if (any({"mlp", "expert", "router", "moe", "gate_proj", "up_proj", "down_proj", "fc1", "fc2", "activations.py",
             "act_fn", "gelu", "silu", "swiglu"}))
        return OpKind::Mlp;
    if (any({"attn", "attention", "q_proj", "k_proj", "v_proj", "o_proj", "qkv", "kv_a", "kv_b", "rotary", "rotate_half",
             "causal_mask", "sdpa", "softmax", "query_key_value"}))
        return OpKind::Attention;
    if (any({"embed", "input_ids", "positions"}))
        return OpKind::Embedding;
    return OpKind::Other;
}

int64_t LayerUse::total() const
{
    int64_t t = 0;
    for (int64_t b : bytes)
        t += b;
    return t;
}

std::vector<LayerUse> liveByLayer(const Timeline &t, size_t event)
{
    // what each allocation is, by id, while it lives
    struct Live
    {
        int layer;
        OpKind kind;
        int64_t bytes;
    };
    std::vector<OpKind> kindOfOp(t.ops.size());
    for (size_t i = 0; i < t.ops.size(); ++i)
        kindOfOp[i] = opKindOf(t.ops[i]);
    std::unordered_map<uint32_t, Live> live;
    const size_t n = std::min(event, t.events.size());
    for (size_t i = 0; i < n; ++i) {
        const MemEvent &e = t.events[i];
        if (e.kind == MemEvent::Alloc) {
            if (e.category != Category::Activations && e.category != Category::Logits &&
                e.category != Category::Temporaries)
                continue;
            live[e.id] = {e.layer, e.op < kindOfOp.size() ? kindOfOp[e.op] : OpKind::Other,
                          CachingAllocatorModel::roundSize(e.bytes)};
        } else if (e.kind == MemEvent::Free) {
            live.erase(e.id);
        }
    }
    std::map<int, LayerUse> byLayer;
    for (const auto &[id, l] : live) {
        LayerUse &u = byLayer[std::max(-1, l.layer)];
        u.layer = std::max(-1, l.layer);
        u.bytes[static_cast<size_t>(l.kind)] += l.bytes;
    }
    std::vector<LayerUse> out;
    out.reserve(byLayer.size());
    for (auto &[layer, u] : byLayer)
        out.push_back(u);
    return out;
}

size_t stepPeakEvent(const Timeline &t, int step)
{
    // The allocator model's own peak (allocated counts whole blocks, so a block that was not
    // split counts whole): the event where the estimate's peak allocated is reached.
    const Replay r = replay(t);
    const ReplayPhase *best = nullptr;
    for (const ReplayPhase &p : r.phases)
        if (p.mark.step == step && (!best || p.peakAllocatedBytes > best->peakAllocatedBytes))
            best = &p;
    return best ? best->peakEvents : 0;
}

size_t forwardEndEvent(const Timeline &t, int step)
{
    for (const PhaseSpan &p : stepPhases(t, step))
        if (p.phase == Phase::Forward)
            return p.end;
    return 0;
}

} // namespace headroom
