// Issue 29: a reward model's step after its score Linear, as Transformers'
// GenericForSequenceClassification.forward and TRL's RewardTrainer.compute_loss (f2cd577) run it.
// See Note [Reward step] (docs/estimator.md); checked against tests/data/h200/posttrain-2026-12-05.
#include "reward.h"

namespace headroom::sim {

T rewardLoss(Sim &S, Ops &O, T logits, const RewardShape &r, const std::function<void()> &forwardReturns)
{
    const int64_t tok = r.seqs * r.seq, le = logits.elem;
    // last_non_pad_token = (arange(seq, int32) * (input_ids != pad).to(int32)).argmax(-1)
    S.setOp("score.pooling");
    const int notPad = S.allocate(tok, Category::Temporaries);
    const int nonPadMask = S.allocate(tok * 4, Category::Temporaries);
    S.unref(notPad);
    const int tokenIndices = S.allocate(r.seq * 4, Category::Temporaries);
    const int product = S.allocate(tok * 4, Category::Temporaries);
    const int last = S.allocate(r.seqs * 8, Category::Activations);
    S.unref(product);
    // logits[arange(batch), last_non_pad_token]: IndexBackward0 saves both indices; its backward
    // is index_put_ with accumulate into zeros of the logits (a sort of the index)
    const int rows = S.allocate(r.seqs * 8, Category::Activations);
    T pooled = S.make(r.seqs * r.labels * le, static_cast<int>(le));
    const int64_t back = logits.bytes, idx = r.seqs * 8;
    S.record({&pooled}, {&logits}, {rows, last}, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        const int z = s.allocate(back, Category::Temporaries);
        const int lin = s.allocate(idx, Category::Temporaries); // the linear index, sorted with its permutation
        const int sorted = s.allocate(idx, Category::Temporaries);
        const int perm = s.allocate(idx, Category::Temporaries);
        s.unref(perm);
        s.unref(sorted);
        s.unref(lin);
        return std::vector<int>{z};
    });
    S.unref(rows);
    S.unref(last);
    // the forward returns: its locals and the full logits go (the model output holds the pooled
    // ones), and last_hidden_state with them (score's node keeps its input)
    S.unref(tokenIndices);
    S.unref(nonPadMask);
    S.drop(logits);
    forwardReturns();
    // TRL: torch.chunk (views), chosen - rejected, logsigmoid (saves its input), neg, mean: a few
    // bytes each
    S.setOp("reward.loss");
    T loss = O.mean(pooled, 1);
    S.drop(pooled);
    return loss;
}

} // namespace headroom::sim
