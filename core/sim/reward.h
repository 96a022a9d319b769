#pragma once
// A reward model's head and loss after its score Linear (reward.cpp). Internal to core.

#include "ops.h"

#include <functional>

namespace headroom::sim {

struct RewardShape
{
    int64_t seqs = 2;   // 2b sequences: b chosen, then b rejected
    int64_t seq = 1;    // tokens of each sequence
    int64_t labels = 1; // the score head's outputs
};

// GenericForSequenceClassification after `score`: its `logits` [seqs, seq, labels] (consumed),
// pooled at each sequence's last non-pad token; `forwardReturns` runs where the model's forward
// returns (its locals gone); then TRL's RewardTrainer.compute_loss over the pooled logits.
T rewardLoss(Sim &S, Ops &O, T logits, const RewardShape &r, const std::function<void()> &forwardReturns);

} // namespace headroom::sim
