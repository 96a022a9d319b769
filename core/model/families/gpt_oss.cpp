// modular_gpt_oss.py: Mixtral's model with Qwen2's biased attention (attention_bias), a learned
// sink logit per head in eager attention, rotary tables of half the head size applied by halves,
// GptOssRMSNorm's (weight * x).to(dtype) with its weights kept in fp32 (_keep_in_fp32_modules),
// sliding and full layers from config.layer_types, and its own MoE block: a biased router whose
// top-k logits are soft-maxed, experts with biases and a clamped GLU (Note [GPT-OSS experts]).
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.qkvBias = m.oBias = c.boolean("attention_bias", true);
}
} // namespace

const Family &family_gpt_oss()
{
    static const Family f = family_mixtral()
                                .derive("gpt_oss")
                                .with(RmsNormStyle::Olmo)
                                .unset(&FamilyTraits::topkAlwaysNormalized)
                                .set(&FamilyTraits::slidingLayerTypes)
                                .assign(&FamilyTraits::slidingPatternDefault, 2) // GptOssConfig: even layers slide
                                .set(&FamilyTraits::rotaryHalfTables)
                                .set(&FamilyTraits::attentionSinks)
                                .set(&FamilyTraits::gptOssExperts)
                                .set(&FamilyTraits::normsFp32)
                                .reads(&read);
    return f;
}

} // namespace headroom
