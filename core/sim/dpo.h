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

// TRL's selective_log_softmax over `logits` (views of `seqs` sequences of `rows` x `vocab`), then
// `per_token_logps[shift_completion_mask == 0] = 0` with `promptZeros` zeros a row: the per-token
// log-probabilities (See Note [DPO step]; KTO's and the reference's too). Without `maskInPlace`
// the stacked log-probabilities as they come (ORPO masks by a product).
T selectiveLogSoftmax(Sim &S, Ops &O, const T &logits, int64_t seqs, int64_t rows, int64_t vocab, int64_t promptZeros,
                      bool maskInPlace = true);
// The policy's per-sequence log-probabilities as DPO's and KTO's _compute_loss make them, with
// grad: `shift` = logits[:, :-1, :] (a view; SliceBackward0 makes zeros of the logits' size in
// backward, and the caller keeps it until the loss returns), selectiveLogSoftmax over it with
// the completion mask in place, the sum over each sequence (what the loss reads).
T sequenceLogpSums(Sim &S, Ops &O, const T &logits, int64_t seqs, int64_t rows, int64_t vocab, int64_t promptZeros,
                   T &shift);
// A forward under no_grad (`forward` makes its logits, `seqs` sequences of `rows` + 1 tokens),
// then selective_log_softmax over its shifted logits (a row at a time, under op `logpsOp` where
// given): the reference's log-probabilities, and KTO's KL batch. Returns the logits, which the
// caller keeps (outputs held until the loss returns) or drops.
T noGradLogps(Sim &S, Ops &O, int64_t seqs, int64_t rows, int64_t vocab, int64_t promptZeros,
              const std::function<T()> &forward, const char *logpsOp = nullptr);
// TRL's entropy_from_logits under no_grad: a contiguous copy of the `rows` x `vocab` logits (none
// where they are contiguous already: `copies` false), then 128-row chunks (log_softmax, exp,
// their product).
void entropyFromLogits(Sim &S, int64_t rows, int64_t vocab, int elem, bool copies = true);

// The policy's `logits` [2b, seq, vocab] (consumed) -> the loss. `referenceLogits` runs the
// reference's forward (called under no_grad) and returns its logits.
T dpoLoss(Sim &S, Ops &O, T logits, const DpoShape &d, const std::function<T()> &referenceLogits);

} // namespace headroom::sim
