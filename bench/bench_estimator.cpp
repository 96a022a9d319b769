// Estimator speed: one estimate (target <= 20 us on one core) and a 10,000-config sweep
// (target <= 0.5 s). Results in docs/performance.md.
#include "headroom/budget.h"
#include "headroom/catalog.h"

#include <benchmark/benchmark.h>

using namespace headroom;

static void BM_EstimateOne(benchmark::State &state, const char *model, FineTune ft, bool ckpt)
{
    const ModelArch &m = findModelPreset(model);
    TrainingConfig c;
    c.finetune = ft;
    c.microBatch = 4;
    c.seqLen = 2048;
    c.gradCheckpointing = ckpt;
    for (auto _ : state)
        benchmark::DoNotOptimize(estimate(m, c).peakAllocatedBytes);
}
BENCHMARK_CAPTURE(BM_EstimateOne, llama31_8b_lora, "llama-3.1-8b", FineTune::LoRA, false);
BENCHMARK_CAPTURE(BM_EstimateOne, llama31_70b_full_ckpt, "llama-3.1-70b", FineTune::Full, true);
BENCHMARK_CAPTURE(BM_EstimateOne, mixtral_qlora, "mixtral-8x7b", FineTune::QLoRA, false);

// 10,000 configurations: 25 models x 4 fine-tuning/precision combos x 10 seq x 10 batch.
static void BM_Sweep10k(benchmark::State &state)
{
    for (auto _ : state) {
        int64_t sum = 0;
        int n = 0;
        for (const auto &m : modelPresets())
            for (int combo = 0; combo < 4; ++combo)
                for (int s = 0; s < 10; ++s)
                    for (int b = 0; b < 10; ++b) {
                        TrainingConfig c;
                        c.finetune = combo < 2 ? FineTune::Full : FineTune::LoRA;
                        c.precision = combo % 2 ? Precision::AmpBF16 : Precision::BF16;
                        c.seqLen = int64_t(128) << (s % 8);
                        c.microBatch = b + 1;
                        c.gradCheckpointing = s >= 8;
                        sum += estimate(m, c).peakAllocatedBytes;
                        ++n;
                    }
        benchmark::DoNotOptimize(sum);
        state.counters["configs"] = n;
    }
}
BENCHMARK(BM_Sweep10k)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
