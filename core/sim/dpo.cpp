// Issue 29: DPO's loss as TRL's DPOTrainer._compute_loss runs it (trl/trainer/dpo_trainer.py,
// trl/trainer/utils.py at f2cd577), op by op, after the policy's forward has made its logits.
// See Note [DPO step] (docs/estimator.md); checked against tests/data/h200/dpo-2026-12-04.
#include "dpo.h"

#include <algorithm>

namespace headroom::sim {

namespace {
// per_token_logps[mask == 0] = 0 where `maskInPlace`; else the log-probabilities as they are.
T maskLogps(Sim &S, Ops &O, T stacked, int64_t seqs, int64_t rows, int64_t promptZeros, bool maskInPlace)
{
    if (!maskInPlace)
        return stacked;
    // per_token_logps[shift_completion_mask == 0] = 0.0 (in _compute_loss): the comparison's bool
    // tensor, then index_put_ in place through the mask's nonzero() indices ([zeros, 2] int64,
    // saved by IndexPutBackward0, whose backward clones the gradient)
    const int isZero = S.allocate(seqs * rows, Category::Temporaries);
    const int indices = S.allocate(seqs * promptZeros * 2 * 8, Category::Activations);
    S.unref(isZero);
    T masked = O.inPlace(stacked, {indices});
    S.unref(indices);
    S.drop(stacked);
    return masked;
}

// TRL's selective_log_softmax for fp32 logits (QLoRA: prepare_model_for_kbit_training leaves
// lm_head in fp32, and so the logits): the labels' column gathered from the logits, then
// torch.logsumexp of each sequence over the unbound rows, stacked, and their difference
// (log_softmax(x_i) = x_i - logsumexp(x)). No row-sized tensor is kept in forward; backward makes
// each row's gradient (kept until UnbindBackward0 stacks them), then the gather's scatter into zeros
// of the logits' size. Measured: the DPO QLoRA steps of tests/data/h200/posttrain-2026-12-06.
T selectiveLogSoftmaxFp32(Sim &S, Ops &O, const T &logits, int64_t seqs, int64_t rows, int64_t vocab)
{
    T selected = O.gatherColumn(logits, seqs * rows);
    std::vector<int64_t> sizes(static_cast<size_t>(seqs), rows * vocab);
    std::vector<T> seq = O.split(logits, sizes); // iterating the logits: the unbind's views
    std::vector<T> lse;
    for (T &row : seq)
        lse.push_back(O.logsumexp(row, rows));
    std::vector<const T *> parts;
    for (const T &c : lse)
        parts.push_back(&c);
    T stacked = O.cat(parts, seqs * rows, logits.elem);
    for (T &c : lse)
        S.drop(c);
    for (T &row : seq)
        S.drop(row);
    T logps = O.sub(selected, stacked, logits.elem);
    S.drop(stacked);
    S.drop(selected);
    return logps;
}
} // namespace

// TRL's selective_log_softmax (fp32 logits: above); for 16-bit logits, one log_softmax per sequence
// (LogSoftmaxBackward0 saves its output), the label's column gathered, the columns stacked. Iterating the logits
// unbinds them (UnbindBackward0 stacks the rows' gradients: one tensor of the logits' size).
// Without grad a row's output goes when the loop's variable takes the next one, and the last at
// the function's return.
T selectiveLogSoftmax(Sim &S, Ops &O, const T &logits, int64_t seqs, int64_t rows, int64_t vocab, int64_t promptZeros,
                      bool maskInPlace)
{
    if (logits.elem == 4)
        return maskLogps(S, O, selectiveLogSoftmaxFp32(S, O, logits, seqs, rows, vocab), seqs, rows, promptZeros,
                         maskInPlace);
    std::vector<int64_t> sizes(static_cast<size_t>(seqs), rows * vocab);
    std::vector<T> seq = O.split(logits, sizes); // the unbind: views
    std::vector<T> cols;
    T previous;
    for (T &row : seq) {
        T lp = O.logSoftmax(row); // saves its output; backward one of its size
        S.recategorize(lp.sto, Category::Logits);
        cols.push_back(O.gatherColumn(lp, rows));
        if (previous.valid())
            S.drop(previous); // row_logps rebinds
        previous = lp;
    }
    std::vector<const T *> parts;
    for (const T &c : cols)
        parts.push_back(&c);
    T stacked = O.cat(parts, seqs * rows, logits.elem); // torch.stack: StackBackward0 hands out views
    for (T &c : cols)
        S.drop(c);
    for (T &row : seq)
        S.drop(row);
    if (previous.valid())
        S.drop(previous);
    return maskLogps(S, O, stacked, seqs, rows, promptZeros, maskInPlace);
}


T sequenceLogpSums(Sim &S, Ops &O, const T &logits, int64_t seqs, int64_t rows, int64_t vocab, int64_t promptZeros,
                   T &shift)
{
    shift = O.slice(logits, seqs * rows * vocab);
    T logps = selectiveLogSoftmax(S, O, shift, seqs, rows, vocab, promptZeros);
    // .sum(1) (and DPO's chunk): columns of seqs x rows (what they allocate is a few bytes a
    // token, left out)
    T sums = O.sumGroups(logps, seqs);
    S.drop(logps);
    return sums;
}

T noGradLogps(Sim &S, Ops &O, int64_t seqs, int64_t rows, int64_t vocab, int64_t promptZeros,
              const std::function<T()> &forward, const char *logpsOp)
{
    const bool grad = S.gradEnabled();
    S.setGradEnabled(false);
    T logits = forward();
    S.recategorize(logits.sto, Category::Logits);
    if (logpsOp)
        S.setOp(logpsOp);
    T shift = S.view(logits, seqs * rows * vocab * logits.elem);
    T logps = selectiveLogSoftmax(S, O, shift, seqs, rows, vocab, promptZeros);
    S.drop(shift);
    S.drop(logps);
    S.setGradEnabled(grad);
    return logits;
}

void entropyFromLogits(Sim &S, int64_t rows, int64_t vocab, int elem, bool copies)
{
    T flat = copies ? S.make(rows * vocab * elem, elem, Category::Logits) : T{};
    const int64_t chunkRows = std::min<int64_t>(128, rows);
    T prev;
    for (int64_t done = 0; done < rows; done += chunkRows) {
        const int64_t n = std::min<int64_t>(chunkRows, rows - done);
        T lp = S.make(n * vocab * elem, elem, Category::Logits);
        if (prev.valid())
            S.drop(prev);
        T ex = S.make(n * vocab * elem, elem, Category::Logits);
        T prod = S.make(n * vocab * elem, elem, Category::Logits);
        S.drop(ex);
        S.drop(prod);
        prev = lp;
    }
    if (prev.valid())
        S.drop(prev);
    if (flat.valid())
        S.drop(flat);
}

T dpoLoss(Sim &S, Ops &O, T logits, const DpoShape &d, const std::function<T()> &referenceLogits)
{
    const int64_t seqs = 2 * d.pairs, rows = d.seq - 1, V = d.vocab, e = logits.elem;
    S.recategorize(logits.sto, Category::Logits); // the breakdown's logits: every vocabulary-wide tensor below
    S.setOp("dpo.logps");
    const int64_t promptZeros = std::max<int64_t>(0, d.prompt - 1); // the shifted mask's zeros in a row
    T shift;
    T sums = sequenceLogpSums(S, O, logits, seqs, rows, V, promptZeros, shift);

    T refLogits;
    if (d.reference != Reference::None) {
        // with torch.no_grad(), the adapter disabled or the frozen copy, checkpointing off
        S.setOp("dpo.reference");
        refLogits = noGradLogps(S, O, seqs, rows, V, promptZeros, referenceLogits, "dpo.reference_logps");
    }

    // The sigmoid loss over per-sequence sums: a few bytes.
    S.setOp("dpo.loss");
    T loss = O.mean(sums, 1);
    S.drop(sums);

    // The metrics it logs, without grad: entropy_from_logits copies the shifted logits whole
    // (reshape of a non-contiguous view) and runs 128-row chunks (log_softmax, exp, product);
    // then the chosen and the rejected logits indexed by the completion mask, one at a time.
    S.setOp("dpo.metrics");
    const bool grad = S.gradEnabled();
    S.setGradEnabled(false);
    {
        entropyFromLogits(S, seqs * rows, V, e);
        const int64_t completion = d.pairs * (d.seq - d.prompt); // the mask's ones in one half
        for (int half = 0; half < 2; ++half) {
            T picked = S.make(completion * V * e, e, Category::Logits);
            S.drop(picked);
        }
    }
    S.setGradEnabled(grad);
    // _compute_loss returns: the outputs' logits go (the slice and unbind nodes keep none), and
    // the reference's with them
    S.drop(shift);
    S.drop(logits);
    if (refLogits.valid())
        S.drop(refLogits);
    return loss;
}

} // namespace headroom::sim
