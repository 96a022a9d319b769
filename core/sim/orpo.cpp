// Issue 29: ORPO's loss as TRL's ORPOTrainer.compute_loss runs it (trl/experimental/orpo/
// orpo_trainer.py at f2cd577), op by op, after the policy's forward has made its logits.
// See Note [ORPO step] (docs/estimator.md); checked against tests/data/h200/posttrain-2026-12-05.
#include "orpo.h"

#include "dpo.h"

#include <algorithm>

namespace headroom::sim {

T orpoLoss(Sim &S, Ops &O, T logits, const OrpoShape &d)
{
    const int64_t seqs = 2 * d.pairs, rows = d.seq - 1, V = d.vocab;
    S.recategorize(logits.sto, Category::Logits);
    // concatenated_forward's cross_entropy_loss over the chosen half: all_logits[:len_chosen]
    // (a view), [..., :-1, :].contiguous() (a copy), the labels' shift (contiguous), then
    // nn.CrossEntropyLoss in the logits' dtype: log_softmax (saves its output) and nll_loss (a
    // scalar; keeps the target and total_weight; its backward, zeros of the log-probs scattered into)
    // CPOTrainer's with cpo_alpha 0 (SimPO): nll_loss = torch.tensor(0.0) (a scalar, left out)
    S.setOp("orpo.nll");
    T nll;
    if (d.chosenNll) {
        T chosen = O.slice(logits, d.pairs * d.seq * V);
        T shifted = O.slice(chosen, d.pairs * rows * V);
        T contiguous = O.copy(shifted);
        S.recategorize(contiguous.sto, Category::Logits);
        const int labels = S.allocate(d.pairs * rows * 8, Category::Activations);
        T lp = O.logSoftmax(contiguous);
        S.recategorize(lp.sto, Category::Logits);
        nll = O.nllLoss(lp, labels);
        S.unref(labels);
        S.drop(lp);
        S.drop(contiguous); // cross_entropy_loss returns
        S.drop(shifted);
        S.drop(chosen);
    }

    // get_batch_logps over all the logits, averaged per sequence: the labels' shift (a clone),
    // the mask, selective_log_softmax over logits[:, :-1, :] (a view), the masked product, its sum
    S.setOp("orpo.logps");
    const int shiftedLabels = S.allocate(seqs * rows * 8, Category::Temporaries);
    T shift = O.slice(logits, seqs * rows * V);
    T logps = selectiveLogSoftmax(S, O, shift, seqs, rows, V, 0, false);
    S.unref(shiftedLabels);
    T sums = O.sumGroups(logps, seqs);
    S.drop(logps);

    // the odds-ratio loss and the metrics over per-sequence numbers and views: a few bytes
    S.setOp("orpo.loss");
    T ratio = O.mean(sums, 1);
    S.drop(sums);
    T loss = nll.valid() ? O.add(nll, ratio) : ratio;
    if (nll.valid()) {
        S.drop(nll);
        S.drop(ratio);
    }
    // compute_loss returns: the outputs' logits go (the slice nodes keep none)
    S.drop(shift);
    S.drop(logits);
    return loss;
}

} // namespace headroom::sim
