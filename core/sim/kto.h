#pragma once
// KTO's step after the batch is made (kto.cpp). Internal to core.

#include "ops.h"

#include <functional>

namespace headroom::sim {

struct KtoShape
{
    int64_t seqs = 1;   // b unpaired sequences, the first ceil(b/2) desirable
    int64_t seq = 1;    // tokens of each sequence
    int64_t vocab = 1;
    int64_t prompt = 0; // tokens of each sequence's prompt (the completion mask's zeros)
    Reference reference = Reference::Adapter;
};

// Which forward TRL's KTOTrainer._compute_loss asks for: the KL batch or the batch, through the
// policy or the reference.
enum class KtoForward { PolicyKl, Policy, ReferenceKl, Reference };

// TRL's KTOTrainer._compute_loss -> the loss. `forward(kind)` runs that forward (the caller sets
// the adapters and checkpointing; grad is set here) and returns its logits [seqs, seq, vocab].
T ktoLoss(Sim &S, Ops &O, const KtoShape &k, const std::function<T(KtoForward)> &forward);

} // namespace headroom::sim
