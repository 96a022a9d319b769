#pragma once
// ORPO's loss after the policy's forward (orpo.cpp). Internal to core.

#include "ops.h"

namespace headroom::sim {

struct OrpoShape
{
    int64_t pairs = 1;  // b: the batch holds 2b sequences (b chosen, then b rejected)
    int64_t seq = 1;    // tokens of each sequence
    int64_t vocab = 1;
    int64_t prompt = 0; // tokens of each sequence's prompt (labels -100)
    bool chosenNll = true; // the chosen half's cross-entropy (SimPO: CPO with cpo_alpha 0, none)
};

// The policy's `logits` [2b, seq, vocab] (consumed) -> the loss, as TRL's ORPOTrainer computes it.
T orpoLoss(Sim &S, Ops &O, T logits, const OrpoShape &d);

} // namespace headroom::sim
