#pragma once
// DPO's loss after the policy's forward (dpo.cpp). Internal to core.

#include "ops.h"

#include <functional>

namespace headroom::sim {

struct DpoShape
{
    int64_t pairs = 1;  // b: the batch holds 2b sequences (b chosen, then b rejected)
    int64_t seq = 1;    // tokens of each sequence
    int64_t vocab = 1;
    int64_t prompt = 0; // tokens of each sequence's prompt (the completion mask's zeros)
    Reference reference = Reference::Adapter;
};

// The policy's `logits` [2b, seq, vocab] (consumed) -> the loss. `referenceLogits` runs the
// reference's forward (called under no_grad) and returns its logits.
T dpoLoss(Sim &S, Ops &O, T logits, const DpoShape &d, const std::function<T()> &referenceLogits);

} // namespace headroom::sim
