#pragma once
// Issue 31's per-layer view: what is alive at one moment of a step, by decoder layer and by the
// kind of op that made it, from a timeline (the estimate's, or a measured one's).

#include "headroom/timeline.h"

#include <array>
#include <string_view>
#include <vector>

namespace headroom {

enum class OpKind : uint8_t { Attention, Mlp, Norm, Lora, Logits, Embedding, Other };
constexpr int kOpKindCount = 7;
constexpr std::array<OpKind, kOpKindCount> kAllOpKinds = {OpKind::Attention, OpKind::Mlp, OpKind::Norm, OpKind::Lora,
                                                         OpKind::Logits, OpKind::Embedding, OpKind::Other};
std::string_view label(OpKind k); // "Attention", "MLP and experts", ...

// The kind of op an allocation's op names: an estimate's op ("q_proj", "rmsnorm", "lora_A") or a
// recorded run's code line ("integrations/sdpa_attention.py:158 sdpa_attention_forward"). A
// recorded line that names no kind (a model's own "forward") is Other.
OpKind opKindOf(std::string_view op);

// The bytes alive of one decoder layer (layer -1: outside the layers: the embedding, the final
// norm, the logits and the loss), by op kind, rounded as the allocator rounds.
struct LayerUse
{
    int layer = -1;
    std::array<int64_t, kOpKindCount> bytes{};
    int64_t total() const;
};

// Activations, logits and temporaries (not weights, gradients, optimizer state or buffers)
// alive after the first `event` events: one entry per layer that holds any, layer -1 first, then
// by layer. A recorded run carries no layers: everything is under -1.
std::vector<LayerUse> liveByLayer(const Timeline &t, size_t event);

// The events applied when the step's allocated bytes peak (as the allocator model replays the
// stream: the estimate's peak allocated), and when its first forward pass ends; 0 for no such step.
size_t stepPeakEvent(const Timeline &t, int step);
size_t forwardEndEvent(const Timeline &t, int step);

} // namespace headroom
