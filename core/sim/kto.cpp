// Issue 29: KTO's loss as TRL's KTOTrainer._compute_loss runs it (trl/trainer/kto_trainer.py at
// f2cd577), op by op. See Note [KTO step] (docs/estimator.md); checked against
// tests/data/h200/posttrain-2026-12-05.
#include "kto.h"

#include "dpo.h"

#include <algorithm>

namespace headroom::sim {

T ktoLoss(Sim &S, Ops &O, const KtoShape &k, const std::function<T(KtoForward)> &forward)
{
    const int64_t rows = k.seq - 1, V = k.vocab;
    const int64_t promptZeros = std::max<int64_t>(0, k.prompt - 1);
    // _compute_kl_logps and the reference's log-probabilities: a forward under no_grad, its
    // shifted logits through selective_log_softmax (a row at a time), the mask, the sum; the KL
    // batch's logits go when the function returns, the reference's outputs stay until the loss does
    const auto noGrad = [&](KtoForward kind) {
        return noGradLogps(S, O, k.seqs, rows, V, promptZeros, [&] { return forward(kind); });
    };
    // KL_logps: the KL batch (each prompt with another's completion) through the policy, no_grad
    S.setOp("kto.kl");
    T kl = noGrad(KtoForward::PolicyKl);
    S.drop(kl);

    // the policy's forward, its shifted logits through selective_log_softmax (saved), the mask, the sum
    T logits = forward(KtoForward::Policy);
    const int e = logits.elem;
    S.recategorize(logits.sto, Category::Logits);
    S.setOp("kto.logps");
    T shift;
    T sums = sequenceLogpSums(S, O, logits, k.seqs, rows, V, promptZeros, shift);

    // the reference under no_grad (the adapter disabled or the copy; checkpointing off): its KL
    // batch, then its own forward, whose outputs stay until the loss returns
    T refLogits;
    if (k.reference != Reference::None) {
        S.setOp("kto.reference");
        T refKl = noGrad(KtoForward::ReferenceKl);
        S.drop(refKl);
        refLogits = noGrad(KtoForward::Reference);
    }

    // the KTO loss over per-sequence sums: a few bytes
    S.setOp("kto.loss");
    T loss = O.mean(sums, 1);
    S.drop(sums);

    // The metrics, without grad: entropy_from_logits over the shifted logits; the desirable and
    // the undesirable sequences' shifted logits by index_select (copies, kept until the loss
    // returns), each then indexed by its completion mask (a copy, gone after its mean).
    S.setOp("kto.metrics");
    const bool grad = S.gradEnabled();
    S.setGradEnabled(false);
    entropyFromLogits(S, k.seqs * rows, V, e);
    const int64_t chosen = (k.seqs + 1) / 2, rejected = k.seqs - chosen;
    T chosenLogits = S.make(chosen * rows * V * e, e, Category::Logits);
    T rejectedLogits = S.make(rejected * rows * V * e, e, Category::Logits);
    for (int64_t n : {chosen, rejected}) {
        T picked = S.make(n * (k.seq - k.prompt) * V * e, e, Category::Logits);
        S.drop(picked);
    }
    S.setGradEnabled(grad);
    // _compute_loss returns: the policy's outputs, the reference's, and the two copies go
    S.drop(shift);
    S.drop(logits);
    if (refLogits.valid())
        S.drop(refLogits);
    S.drop(chosenLogits);
    S.drop(rejectedLogits);
    return loss;
}

} // namespace headroom::sim
