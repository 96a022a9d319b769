#pragma once
// GRPO's step (grpo.cpp): TRL's GRPOTrainer with use_vllm=False, as the transformers engine runs
// it (probes/hrengine/grpo.py). Internal to core.

#include "ops.h"

#include <functional>

namespace headroom::sim {

struct GrpoShape
{
    int64_t completions = 1; // G: micro_batch x grad_accum, generated once a step
    int64_t micro = 1;       // b: per_device_train_batch_size (a micro-batch, the reference's chunk)
    int64_t prompt = 1;      // P: every prompt's tokens
    int64_t completion = 1;  // C: max_completion_length (every completion runs to it)
    int64_t vocab = 1;
    int elem = 2;            // the logits' dtype
    double temperature = 1.0;
};

// What the model does for GenerationMixin.generate (program.cpp): the prefill over the prompts,
// which fills every layer's DynamicCache and returns the last position's logits [G, V]; one
// decode step, which concatenates a token onto every layer's cache and returns its logits; and
// the cache's release when generate returns.
struct GenerationModel
{
    std::function<T()> prefill;
    std::function<T()> decode;
    std::function<void()> release;
};

// HF generate's sampling loop (GenerationMixin._sample) over `prompts` [G, P] int64 and its
// attention mask, then the engine's completion tensors: returns {completion_ids, completion_mask}
// ([G, C] int64 each). See Note [GRPO step].
std::vector<T> grpoGenerate(Sim &S, const GrpoShape &g, const GenerationModel &model, const T &prompts,
                            const T &promptMask);

// TRL's _get_per_token_logps_and_entropies under no_grad over the G prompt + completion rows,
// `micro` rows at a time (`forward` makes a chunk's logits [b, C + 1, V]): the reference's
// per-token log-probabilities [G, C].
T grpoReferenceLogps(Sim &S, Ops &O, const GrpoShape &g, const std::function<T()> &forward);

// GRPOTrainer._compute_loss after the policy's forward made `logits` [b, C + 1, V] (consumed):
// the shifted, temperature-divided completion logits, TRL's selective_log_softmax with grad, the
// entropy under no_grad, the clipped loss over [b, C] tensors.
T grpoLoss(Sim &S, Ops &O, T logits, const GrpoShape &g);

} // namespace headroom::sim
