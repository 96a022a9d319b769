// Estimator speed (docs/performance.md). An estimate simulates the training step op by op (one
// warm-up and one steady step) and replays its allocations through the caching-allocator model.
//   - one estimate: what the explorer's quick pass costs (its whole pass must stay <= 16 ms);
//   - the allocator replay alone for Llama-3.1-70B (80 layers), issue 12's <= 2 ms target;
//   - a 1,000-configuration sweep, what a scripted study costs;
//   - the explorer's whole report for the default budget (estimate, verdict, the recommendations
//     with their candidates' verdicts, every catalog card's verdict).
#include "headroom/budget.h"
#include "headroom/catalog.h"
#include "headroom/error.h"
#include "headroom/sheet.h"
#include "headroom/timeline.h"

#include <benchmark/benchmark.h>

using namespace headroom;

namespace {
TrainingConfig config(FineTune ft, bool ckpt)
{
    TrainingConfig c;
    c.finetune = ft;
    c.microBatch = 4;
    c.seqLen = 2048;
    c.gradCheckpointing = ckpt;
    return c;
}
} // namespace

static void BM_EstimateOne(benchmark::State &state, const char *model, FineTune ft, bool ckpt)
{
    const ModelArch &m = findModelPreset(model);
    const TrainingConfig c = config(ft, ckpt);
    for (auto _ : state)
        benchmark::DoNotOptimize(estimate(m, c).peakAllocatedBytes);
}
BENCHMARK_CAPTURE(BM_EstimateOne, llama31_8b_lora, "llama-3.1-8b", FineTune::LoRA, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EstimateOne, llama31_70b_full_ckpt, "llama-3.1-70b", FineTune::Full, true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EstimateOne, mixtral_lora, "mixtral-8x7b", FineTune::LoRA, false)->Unit(benchmark::kMillisecond);
// Qwen3.5's gated DeltaNet is simulated chunk by chunk (Note [Gated DeltaNet]): 32 chunks a layer here.
BENCHMARK_CAPTURE(BM_EstimateOne, qwen35_27b_lora_ckpt, "qwen3.5-27b", FineTune::LoRA, true)->Unit(benchmark::kMillisecond);

static void BM_Replay(benchmark::State &state, const char *model, FineTune ft, bool ckpt)
{
    const Timeline t = estimateTimeline(findModelPreset(model), config(ft, ckpt));
    for (auto _ : state)
        benchmark::DoNotOptimize(replay(t).peakReservedBytes);
    state.counters["events"] = static_cast<double>(t.events.size());
}
BENCHMARK_CAPTURE(BM_Replay, llama31_70b_full_ckpt, "llama-3.1-70b", FineTune::Full, true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Replay, llama31_8b_lora, "llama-3.1-8b", FineTune::LoRA, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Replay, qwen35_27b_lora_ckpt, "qwen3.5-27b", FineTune::LoRA, true)->Unit(benchmark::kMillisecond);

// What the estimate's second steady step costs: simulating one step and replaying it, against
// the same with the step's events copied (repeatLastStep) and replayed twice.
static void BM_SecondStep(benchmark::State &state, bool second)
{
    const ModelArch &m = findModelPreset("llama-3.1-8b");
    const TrainingConfig c = config(FineTune::LoRA, false);
    for (auto _ : state) {
        Timeline t = estimateTimeline(m, c);
        if (second)
            repeatLastStep(t);
        benchmark::DoNotOptimize(replay(t).peakReservedBytes);
    }
}
BENCHMARK_CAPTURE(BM_SecondStep, llama31_8b_lora_one_step, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SecondStep, llama31_8b_lora_repeated, true)->Unit(benchmark::kMillisecond);

// 1,000 configurations: 10 models x 4 fine-tuning/precision combos x 5 seq x 5 batch.
static void BM_Sweep1k(benchmark::State &state)
{
    const char *models[] = {"llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "qwen2.5-0.5b", "qwen2.5-7b",
                            "mistral-7b",   "gemma-2-2b",   "phi-3-mini",   "gpt2",         "pythia-410m"};
    for (auto _ : state) {
        int64_t sum = 0;
        int n = 0;
        for (const char *id : models)
            for (int combo = 0; combo < 4; ++combo)
                for (int s = 0; s < 5; ++s)
                    for (int b = 0; b < 5; ++b) {
                        TrainingConfig c;
                        c.finetune = combo < 2 ? FineTune::Full : FineTune::LoRA;
                        c.precision = combo % 2 ? Precision::AmpBF16 : Precision::BF16;
                        c.seqLen = int64_t(256) << s;
                        c.microBatch = b + 1;
                        try {
                            sum += estimate(findModelPreset(id), c).peakAllocatedBytes;
                            ++n;
                        } catch (const InputError &) {
                            // GPT-2 past its 1,024 learned positions: refused, as Transformers fails
                        }
                    }
        benchmark::DoNotOptimize(sum);
        state.counters["configs"] = n;
    }
}
BENCHMARK(BM_Sweep1k)->Unit(benchmark::kMillisecond)->Iterations(1);

// The default budget (Llama-3.1-8B LoRA b4x2048 on an 80 GB card: out of memory, so every verdict
// replays the run at the card's limit) as the explorer and the sheets build it.
static void BM_ReportWithAdvice(benchmark::State &state)
{
    const Scenario s = defaultScenario();
    for (auto _ : state)
        benchmark::DoNotOptimize(buildReport(s, true).recommendations.size());
}
BENCHMARK(BM_ReportWithAdvice)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
