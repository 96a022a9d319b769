// Issue 29: GRPO's step as TRL's GRPOTrainer runs it with use_vllm=False (trl/trainer/
// grpo_trainer.py at f2cd577) and the transformers engine measures it (probes/hrengine/grpo.py):
// HF generate's sampling loop, the reference's log-probabilities, and _compute_loss after the
// policy's forward. See Note [GRPO step] (docs/estimator.md).
#include "grpo.h"

#include "dpo.h"

#include <algorithm>

namespace headroom::sim {

std::vector<T> grpoGenerate(Sim &S, const GrpoShape &g, const GenerationModel &model, const T &prompts,
                            const T &promptMask)
{
    const int64_t G = g.completions, P = g.prompt, C = g.completion, V = g.vocab;
    // generate's input_ids and attention_mask: the caller's tensors until the first step rebinds them
    T ids = S.view(prompts), mask = S.view(promptMask);
    S.setOp("generate.cache_position");
    T cachePosition = S.make(P * 8, 8); // arange over the prompt, then one position a step
    T nextLogits, probs, tokens;
    for (int64_t step = 0; step < C; ++step) {
        const int64_t len = P + step; // tokens so far
        // prepare_inputs_for_generation: the last token's ids (a view) and positions
        T logits = step == 0 ? model.prefill() : model.decode();
        S.setOp("generate.sample");
        // _update_model_kwargs_for_generation: the attention mask grows by a column of ones;
        // the cache position becomes the next one
        T grown = S.make(G * (len + 1) * 8, 8);
        S.drop(mask);
        mask = grown;
        T position = S.make(8, 8);
        S.drop(cachePosition);
        cachePosition = position;
        // outputs.logits[:, -1, :].to(copy=True, dtype=torch.float32): the previous step's copy
        // goes when the name rebinds
        T copied = S.make(G * V * 4, 4, Category::Logits);
        if (nextLogits.valid())
            S.drop(nextLogits);
        nextLogits = copied;
        // the logits processors: TemperatureLogitsWarper only where the temperature is not 1
        // (top_k 0, top_p 1, no min_p and no repetition penalty add none)
        T scores = S.view(nextLogits);
        if (g.temperature != 1.0) {
            S.drop(scores);
            scores = S.make(G * V * 4, 4, Category::Logits);
        }
        // softmax, then torch.multinomial(probs, 1): exponential noise of the probabilities' size,
        // divided in place, its argmax
        T p = S.make(G * V * 4, 4, Category::Logits);
        if (probs.valid())
            S.drop(probs);
        probs = p;
        S.drop(scores);
        T noise = S.make(G * V * 4, 4, Category::Logits);
        T sampled = S.make(G * 8, 8);
        S.drop(noise);
        if (tokens.valid())
            S.drop(tokens);
        tokens = sampled;
        // input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
        T longer = S.make(G * (len + 1) * 8, 8);
        S.drop(ids);
        ids = longer;
        // del outputs: the step's logits go
        S.drop(logits);
    }
    // generate returns: its cache, the last step's copies and masks go with its frame
    model.release();
    for (T *t : {&nextLogits, &probs, &tokens, &mask, &cachePosition})
        S.drop(*t);
    // the engine: completion_mask = torch.ones_like(out[:, P:]) and completion_ids =
    // out[:, P:].contiguous(), then `out` goes
    S.setOp("generate.completions");
    T completionMask = S.make(G * C * 8, 8);
    T completionIds = S.make(G * C * 8, 8);
    S.drop(ids);
    return {completionIds, completionMask};
}

namespace {

// Before the loss reads them: logits[:, :-1, :], then [:, -C:, :] (views), then div_ by the
// temperature in place. An in-place op on a view gives the base its CopySlices and the view a
// replay of its slicing (SliceBackward0), two nodes: in backward the replay makes zeros of the
// base with the gradient in its slice, and the view's gradient goes as soon as it returns (H200,
// l1b-grpo-full-b4g1: the [b, C, V] gradient freed before CopySlices runs); CopySlices then
// clones that base-shaped gradient, runs DivBackward on a clone of the slice, and copies the
// result back.
T temperatureScaled(Sim &S, const T &logits, int64_t sliceBytes)
{
    if (!S.gradEnabled() || !logits.requiresGrad)
        return S.view(logits, sliceBytes);
    const int64_t base = logits.bytes;
    T copySlices = S.detachedView(logits);
    S.record({&copySlices}, {&logits}, {}, [base, sliceBytes](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        const int result = s.allocate(base, Category::Temporaries); // grad.clone()
        const int slice = s.allocate(sliceBytes, Category::Temporaries);
        const int divided = s.allocate(sliceBytes, Category::Temporaries);
        s.unref(slice);
        s.unref(divided);
        return std::vector<int>{result};
    });
    T out = S.detachedView(copySlices, sliceBytes);
    S.record({&out}, {&copySlices}, {}, [base](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(base, Category::Temporaries)}; // the view's gradient as the base's
    });
    S.drop(copySlices);
    return out;
}

} // namespace

T grpoReferenceLogps(Sim &S, Ops &O, const GrpoShape &g, const std::function<T()> &forward)
{
    const int64_t b = g.micro, C = g.completion, V = g.vocab;
    const bool grad = S.gradEnabled();
    S.setGradEnabled(false);
    std::vector<T> chunks;
    T previous;
    for (int64_t done = 0; done < g.completions; done += b) {
        T logits = forward(); // the previous chunk's outputs stay bound until this one returns
        S.recategorize(logits.sto, Category::Logits);
        if (previous.valid())
            S.drop(previous);
        previous = logits;
        S.setOp("grpo.reference_logps");
        T scaled = temperatureScaled(S, logits, b * C * V * logits.elem);
        chunks.push_back(selectiveLogSoftmax(S, O, scaled, b, C, V, 0, false));
        S.drop(scaled);
    }
    // torch.cat(all_logps): [G, C]
    std::vector<const T *> parts;
    for (const T &t : chunks)
        parts.push_back(&t);
    T logps = O.cat(parts, g.completions * C, chunks.front().elem);
    for (T &t : chunks)
        S.drop(t);
    if (previous.valid())
        S.drop(previous);
    S.setGradEnabled(grad);
    return logps;
}

T grpoLoss(Sim &S, Ops &O, T logits, const GrpoShape &g)
{
    const int64_t b = g.micro, C = g.completion, V = g.vocab, rows = b * C;
    const int e = logits.elem;
    S.recategorize(logits.sto, Category::Logits);
    S.setOp("grpo.logps");
    T scaled = temperatureScaled(S, logits, rows * V * e);
    T logps = selectiveLogSoftmax(S, O, scaled, b, C, V, 0, false);
    // entropies under no_grad (no entropy bonus): entropy_from_logits reshapes the completion
    // logits, a copy unless one sequence makes them contiguous
    S.setOp("grpo.entropy");
    const bool grad = S.gradEnabled();
    S.setGradEnabled(false);
    entropyFromLogits(S, rows, V, e, b > 1);
    T entropies = S.make(rows * 4, 4);
    S.setGradEnabled(grad);
    // torch.cat of the one chunk's log-probabilities, then the clipped loss over [b, C] tensors
    // (exp, clamp, min, the masked sum): a few bytes a token, left out but for the cat
    S.setOp("grpo.loss");
    std::vector<const T *> one{&logps};
    T all = O.cat(one, rows, logps.elem);
    S.drop(logps);
    T loss = O.mean(all, 1);
    S.drop(all);
    S.drop(entropies);
    // _compute_loss returns: the outputs' logits go
    S.drop(scaled);
    S.drop(logits);
    return loss;
}

} // namespace headroom::sim
