#pragma once

#include "headroom/types.h"

#include <nlohmann/json.hpp>
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace headroom {

enum class MlpKind { Gated, Plain };
enum class NormKind { RMSNorm, LayerNorm };

// Where a decoder layer normalises: before attention and MLP (Llama), before and after both
// (Gemma 2/3's sandwich), or only after them, on the branch outputs (OLMo 2/3).
enum class NormPlacement { Pre, Sandwich, Post };
// RMSNorm on q and k: none, per head over head_dim (Qwen3, Gemma 3), or over the whole
// projection before it is split into heads (OLMo 2/3).
enum class QkNorm { None, PerHead, Projection };
// RMSNorm's last step: weight * x.to(input dtype) (Llama), x * (1 + weight) in fp32 then cast
// (Gemma), weight * x in fp32 then cast (OLMo 2/3), x * weight.float() then cast, the mean a
// temporary (Gemma 4's Gemma4RMSNorm; without a weight, with_scale=False, only the cast).
enum class RmsNormStyle { Llama, Gemma, Olmo, Gemma4 };

// How a fused q/k/v projection is split into heads: slices of the last dimension, each viewed per
// head (Phi-3's qkv_proj); split(hidden, dim=2), each .view().transpose(1, 2) (GPT-2's c_attn,
// whose parts stay strided views); .view(b, s, heads, 3 d).transpose(1, 2).chunk(3) (GPT-NeoX); the
// query heads as a view and the one key and value head by index, copies (Falcon's multi-query
// _split_heads: fused[..., :-2, :], fused[..., [-2], :], fused[..., [-1], :]).
enum class FusedQkvLayout { Sliced, SplitColumns, PerHeadChunks, IndexedKv };

// What a model_type's Hugging Face modeling code does differently, as its family states it
// (core/model/families/<model_type>.cpp: a parent and the differences). The fields a config.json
// states (sizes, biases, experts) are read by the family too; these are what only the modeling
// code knows. Code outside the families asks these, never the model_type.
struct FamilyTraits
{
    std::string_view modelType;
    NormPlacement norms = NormPlacement::Pre;
    QkNorm qkNorm = QkNorm::None;
    RmsNormStyle rms = RmsNormStyle::Llama;
    FusedQkvLayout qkvLayout = FusedQkvLayout::Sliced;
    bool rotaryFp32 = false;          // cos/sin stay fp32; apply_rotary_pos_emb casts back (OLMo 2)
    // Rotary on the first rotary_dim features, then torch.cat with the rest, even when nothing
    // passes through (Phi-3, GPT-NeoX).
    bool rotaryConcat = false;
    // GLM's rotary (Ernie 4.5): cos/sin halves repeat_interleave'd per call, q and k made fp32 by
    // .float() before each product, rotate_half by torch.stack of the even and odd features.
    bool rotaryInterleaved = false;
    // ... Cohere's: the tables come interleaved already; q.float() and k.float() first, the
    // products in fp32 throughout, both cast back before the attention.
    bool rotaryInterleavedTables = false;
    // CohereLayerNorm: a LayerNorm without bias written in Python, in fp32: mean, (x - mean) twice
    // (the variance's and the output's), rsqrt, the fp32 weight's product, the cast back.
    bool meanCentredNormFp32 = false;
    bool scaledEmbedding = false;     // embedding * sqrt(hidden) (Gemma)
    bool embedScaleBuffer = false;    // ... by a registered buffer, not a tensor made each forward (Gemma 3)
    // Scalars from the config, as Python floats (MulBackward1/DivBackward1 save nothing), each a new
    // tensor even at 1.0: inputs_embeds * embedding_multiplier, each residual branch
    // * residual_multiplier before its add (Granite), logits / logits_scaling (Granite) or
    // * logit_scale (Cohere).
    bool embeddingTimesScalar = false;
    bool residualBranchScaled = false;
    bool logitsScaledByScalar = false;
    bool slidingLayerTypes = false;   // sliding window on the layers config.layer_types names
    bool slidingWindowOptIn = false;  // config.sliding_window applies only with use_sliding_window (Qwen2/3)
    bool slidingEveryOtherLayer = false; // the even layers slide, the odd ones attend globally (Gemma 2)
    // Without layer_types or sliding_window_pattern: every n-th layer attends globally (Gemma 3: 6).
    int slidingPatternDefault = 0;
    bool normRegisteredFirst = false; // input_layernorm built before self_attn (GPT-2, GPT-NeoX)
    // The first norm's output lives to the residual add (GPT2Block binds the attention's result to
    // a new name).
    bool normOutputKept = false;
    bool conv1dLinears = false;       // transformers' Conv1D, not nn.Linear: bitsandbytes leaves them (GPT-2)
    // Eager attention's softmax in the scores' dtype, over strided q/k/v
    // (modeling_gpt2.eager_attention_forward).
    bool eagerSoftmaxInDtype = false;
    bool qkNormAfterProjections = false; // q/k norms after all of q, k and v are projected (Gemma 3)
    bool localRotary = false;
    // No rotary on the full-attention layers when config.sliding_window is set (EXAONE 4's
    // "global NoPE"): q and k go to attention as projected (and normalised).
    bool noRotaryOnFullLayers = false;
    // Rotary only on the layers config.no_rope_layers marks 1; without the list, every
    // no_rope_layer_interval-th layer (default 4) is NoPE (SmolLM3).
    bool noRopeLayersListed = false;
    // Partial rotary whose torch.cat with the pass-through features comes after both q and k are
    // turned (StableLM, Phi, GPT-NeoX), not per tensor (Phi-3).
    bool rotaryCatAfterPair = false;
    // ... inside apply_rotary_pos_emb, the cat rebinding q_embed (k_embed): each turned half goes
    // right after its cat, the slices when the function returns (GPT-NeoX); else the split is the
    // attention forward's and its locals live until it returns (StableLM, Phi, GLM 4).
    bool rotaryCatRebinds = false;
    // The parallel residual's MLP reads the attention's normalised input: one norm per layer
    // (Phi, Cohere, Falcon), as attn + mlp + residual.
    bool parallelSharedNorm = false;         // a second rotary table for the sliding layers (Gemma 3)
    bool expertsBeforeRouter = false; // the MoE block registers its experts before the router
    bool expertsWrappedByPeft = false; // LoRA on gate/up/down_proj wraps the stacked experts (ParamWrapper)
    // The router renormalises its top-k weights whatever norm_topk_prob says, and leaves them in
    // fp32 (Mixtral).
    bool topkAlwaysNormalized = false;
    // ... renormalises them whatever the config says and casts them to the logits' dtype (Qwen3.5-MoE).
    bool topkRenormalized = false;
    bool fp32Router = false;          // router logits from fp32 copies of x and the gate weight (DeepSeek)
    bool sharedExpertsAfter = false;  // shared experts run after the routed ones, ungated (DeepSeek)
    bool sigmoidRouter = false;       // sigmoid scores with a correction bias (DeepSeek-V3's noaux_tc)
    bool complexRotary = false;       // rotary through view_as_complex on fp32 copies (DeepSeek-V2)
    // Rotary tables of head_dim / 2 (emb = freqs, no torch.cat), applied to x's two halves as
    // cat(x1 * cos - x2 * sin, x2 * cos + x1 * sin) (GPT-OSS's _apply_rotary_emb).
    bool rotaryHalfTables = false;
    // A learned sink logit per head (GPT-OSS): eager attention concatenates it to the scores,
    // subtracts the row max, takes the softmax in the scores' dtype and drops the sink column
    // (Note [Attention sinks]). Transformers runs it in eager attention only.
    bool attentionSinks = false;
    // GPT-OSS's MoE block (Note [GPT-OSS experts]): a router Linear with a bias whose top-k logits
    // are soft-maxed in their dtype, and experts with per-expert biases (gathered per row, added
    // in place) and a clamped GLU on the interleaved gate and up columns.
    bool gptOssExperts = false;
    // The parallel residual as `mlp_output += attention_output; residual + mlp_output` (Falcon): one
    // new tensor, where Phi's attn + mlp + residual makes two.
    bool parallelSumInPlace = false;
    // SDPA is handed the materialised boolean causal mask (Falcon's attention), so unequal head
    // counts take the math path (Note [SDPA math path in fp32]).
    bool sdpaExplicitMask = false;
    bool eagerNotModelled = false;    // the family's own eager attention is traced, not followed (Falcon)
    bool normsFp32 = false;
    bool outProjRegisteredFirst = false;
    // Qwen3.5's gated attention: q_proj makes the queries and a gate per head side by side
    // (twice the width); the attention's output is multiplied by sigmoid(gate) before o_proj.
    bool attentionOutputGate = false;
    // Qwen3.5's rotary: position ids for text, height and width (3 x b x s), the tables'
    // frequencies recomposed per section (mrope_section) before cos and sin.
    bool multimodalRotaryTables = false;
    // Qwen2.5-VL's recomposition: the sections' cat at half the width, then cat((f, f)).
    bool multimodalRotaryHalves = false; // the attention registers o_proj before its q/k/v (Phi-3)           // the RMSNorm weights stay fp32 (_keep_in_fp32_modules: GPT-OSS)
    // Gemma 4's attention (Note [Gemma 4]): q_proj, q_norm and rotary before k_proj and v_proj;
    // then k_norm, rotary, and v_norm (an RMSNorm without a weight) on the values; on the global
    // layers with attention_k_eq_v no v_proj, the values are k_proj's output.
    bool valueNorm = false;
    // `hidden_states *= self.layer_scalar` at the end of each decoder layer (a buffer, in place).
    bool layerScalar = false;
    // A composite configuration (Qwen3.5's qwen3_5: a vision_config and a text_config) that
    // AutoModelForCausalLM builds as its text model alone (Qwen3_5ForCausalLM reads text_config and
    // ignores the checkpoint's model.visual weights): every size is read from text_config.
    bool textConfigNested = false;
    // A vision-language checkpoint built whole (AutoModelForImageTextToText: the tower, the
    // projector and the language model; issue 30). Its text_config holds the language model, or
    // (a legacy config.json, Qwen2.5-VL's) the top level does.
    bool visionLanguage = false;
    // The estimate simulates this checkpoint's vision tower (frozen: its forward's transients, its
    // features scattered into the embeddings; Note [Vision step]). Elsewhere a vision-language step
    // is measured, not estimated.
    bool visionTowerSimulated = false;
    // Headroom's LibTorch engine reproduces this family's step (measured against the transformers
    // engine on the H200; not inherited by a derived family).
    bool libtorchEngine = false;
    // The decoder layer's Linear modules as the modeling code names them (a fused q/k/v and the
    // plain MLP's two; the rest are q_proj, k_proj, v_proj, gate_proj, gate_up_proj).
    std::string_view qkvName = "qkv_proj";
    std::string_view oName = "o_proj";
    std::string_view upName = "up_proj";
    std::string_view downName = "down_proj";
};
// The traits of a supported model_type (throws InputError naming config.model_type otherwise).
const FamilyTraits &familyTraits(std::string_view modelType);
// The same, Llama's for a type without a row (Headroom's flat model form names any type).
const FamilyTraits &familyTraitsOrLlama(std::string_view modelType);

// A decoder-only transformer, described by the fields that decide its memory.
struct ModelArch
{
    std::string id;         // preset id, or the file it came from
    std::string name;       // human name
    std::string source;     // the Hugging Face id it was made from ("Qwen/Qwen2.5-0.5B"), when known
    // Other Hub ids of the same model (mirrors, instruct or chat versions) whose config.json differs
    // from it at most in fields that leave memory alone (special tokens, rope_theta, context length):
    // a preset's "also", which resolves them offline.
    std::vector<std::string> alsoSources;
    // A text preset whose checkpoint also builds as a vision-language model (Qwen3.5's composite):
    // the preset of that build, which a step with images is estimated as (Note [Vision build]).
    std::string visionBuild;
    std::string modelType;  // HF model_type
    int64_t hiddenSize = 0;
    int64_t numLayers = 0;
    int64_t numHeads = 0;
    int64_t numKvHeads = 0;
    int64_t headDim = 0;
    int64_t intermediateSize = 0;
    int64_t vocabSize = 0;
    int64_t maxPositions = 0;
    bool tiedEmbeddings = false;
    bool learnedPositions = false;    // GPT-2's wpe
    MlpKind mlp = MlpKind::Gated;
    NormKind norm = NormKind::RMSNorm;
    bool qkvBias = false;
    bool oBias = false;
    bool mlpBias = false;
    bool qkNorm = false;              // RMSNorm on q and k (familyTraits: per head or per projection)
    int normsPerLayer = 2;            // Gemma 2 has four
    std::string activation = "silu";
    int activationSavedTensors = 1;   // tensors the activation saves for backward (gelu_new: 4)
    double finalLogitSoftcap = 0.0;   // Gemma 2
    // Fused projections: one Linear for q, k and v (Phi-3 qkv_proj, GPT-NeoX query_key_value,
    // GPT-2 c_attn), one for gate and up (Phi-3 gate_up_proj).
    bool fusedQkv = false;
    bool fusedGateUp = false;
    bool parallelResidual = false;    // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
    bool lmHeadBias = false;          // an lm_head with a bias (Phi)
    // The head: 0, the causal LM's lm_head over the vocabulary; n > 0, a sequence classifier's
    // `score` Linear(hidden, n, bias=False) in its place (AutoModelForSequenceClassification:
    // never tied; TRL's reward models have one label). Set by asSequenceClassifier, never read
    // from a config.json: the same config builds either class.
    int64_t scoreLabels = 0;
    double rotaryFraction = 1.0;      // share of head_dim that rotary embedding turns
    // Dropout probabilities in training (GPT-2's embd/attn/resid_pdrop, Phi-3's, NeoX's).
    double embdDropout = 0.0;
    double attnDropout = 0.0;
    double residDropout = 0.0;
    // Mixture of experts
    int64_t numExperts = 0;
    int64_t expertsPerToken = 0;
    int64_t expertIntermediateSize = 0;
    int64_t sharedExpertIntermediateSize = 0;
    bool sharedExpertGate = false;
    int64_t firstDenseLayers = 0;     // MoE models: the first layers keep a dense MLP (DeepSeek's first_k_dense_replace)
    // Multi-head latent attention (DeepSeek-V2/V3): q through q_proj (or q_a/q_b with q_lora_rank),
    // k and v from a compressed kv_a projection of kv_lora_rank plus a shared rotary key part.
    int64_t qLoraRank = 0;
    int64_t kvLoraRank = 0;           // > 0: MLA
    int64_t qkNopeDim = 0;
    int64_t qkRopeDim = 0;
    int64_t vHeadDim = 0;
    // Gated DeltaNet linear attention (Qwen3.5's Qwen3_5GatedDeltaNet): the layers config.layer_types
    // names "linear_attention" mix tokens through it instead of attention (Note [Gated DeltaNet]).
    struct LinearAttention
    {
        int64_t keyHeads = 0, valueHeads = 0, keyDim = 0, valueDim = 0, convKernel = 0;
        int64_t keyWidth() const { return keyHeads * keyDim; }
        int64_t valueWidth() const { return valueHeads * valueDim; }
        int64_t convWidth() const { return 2 * keyWidth() + valueWidth(); }
    };
    LinearAttention linearAttn;
    // A composite checkpoint's vision side (issue 30; Note [Vision inputs]): how its processor turns
    // pixels into tokens, the checkpoint processor's pixel bounds, and the tower's and projector's
    // parameters. Qwen3.5's text-only row (AutoModelForCausalLM skips the tower) counts the tower
    // for the report; a vision-language type (FamilyTraits::visionLanguage) builds all of it.
    struct VisionSide
    {
        // Dynamic: Qwen2VLImageProcessor's resolution (patches of `patch`, merged merge^2 to a
        // token, frames paired by temporalPatch); Fixed: every image the tower's imageSize square,
        // tokensPerImage tokens.
        enum class Tokens { None, Dynamic, Fixed };
        Tokens tokens = Tokens::None;
        int64_t patch = 0, merge = 1, temporalPatch = 1;
        int64_t imageSize = 0, tokensPerImage = 0;
        int markers = 0;            // tokens around each block (vision_start / end, boi / eoi)
        bool perFrameVideo = false; // each temporal patch of a video its own block (Qwen3-VL)
        bool video = false;         // the model takes video
        // The checkpoint processor's bounds (preprocessor_config.json, video_preprocessor_config.json).
        int64_t minPixels = 0, maxPixels = 0, videoMinPixels = 0, videoMaxPixels = 0;
        int64_t towerParams = 0, projectorParams = 0;
        // The tower's geometry, where the estimate simulates its forward (Qwen2.5-VL's; issue 30):
        // blocks of `hidden` wide with `heads` heads and a SwiGLU MLP `inter` wide; a patch row is
        // inputWidth values (channels x temporal x patch^2); the merger's output is outHidden; the
        // windowed blocks attend within windowSize pixels, the blocks in fullAttention to the whole
        // image.
        // Qwen3-VL's (Kind::Qwen3): LayerNorm blocks with a GELU MLP, attending to each frame
        // whole, learned positions (positionEmbeddings, bilinearly resampled to each grid) added to
        // the patches, and a merger of its own after each block in deepstack.
        // SigLIP (Kind::Siglip, Gemma 3) and CLIP (Kind::Clip, LLaVA): ViT encoders over imageSize²
        // pixels in patch² squares, `inputWidth` channels, LayerNorm layers with a GELU MLP.
        struct Tower
        {
            enum class Kind { Qwen25, Qwen3, Siglip, Clip };
            Kind kind = Kind::Qwen25;
            int64_t depth = 0, hidden = 0, heads = 0, inter = 0, inputWidth = 0, outHidden = 0, windowSize = 0;
            int64_t positionEmbeddings = 0;
            std::vector<int64_t> fullAttention, deepstack;
            // CLIP under LLaVA: QuickGELU in the MLP (hidden_act quick_gelu); the hidden states the
            // projector reads (vision_feature_layer, as indexes into the depth + 1 of them) and
            // whether it drops the class token (vision_feature_select_strategy "default")
            // gradient_checkpointing_enable's input hook reaches the tower's patch embedding
            // (SigLIP's, CLIP's, Qwen2.5-VL's; not Qwen3-VL's): Note [Vision step]
            bool checkpointHooked = true;
            bool quickGelu = false, dropCls = true, projectorBias = true;
            std::string projectorGelu; // projector_hidden_act
            std::vector<int64_t> featureLayers;
        } tower;
        bool present() const { return tokens != Tokens::None; }
    };
    VisionSide vision;
    std::vector<bool> linearLayers; // per layer: true where the layer is linear attention
    // Gemma 4 (Note [Gemma 4]): the global (full-attention) layers' own head size and kv heads
    // (config.global_head_dim, num_global_key_value_heads, per_layer_config), the values from
    // the keys there (attention_k_eq_v), and the per-layer inputs: an embedding of
    // perLayerVocab x (layers x perLayerInputSize) and a gated projection in every layer.
    std::vector<bool> globalLayers;
    int64_t globalHeadDim = 0, globalKvHeads = 0;
    bool globalKeyIsValue = false;
    int64_t perLayerInputSize = 0, perLayerVocab = 0;
    // The last kvSharedLayers layers reuse the keys and values of the last earlier layer of their
    // kind (num_kv_shared_layers): no k_proj, v_proj or their norms; with doubleWideMlp their MLP
    // is twice as wide (use_double_wide_mlp).
    int64_t kvSharedLayers = 0;
    bool doubleWideMlp = false;
    struct AttentionGeometry
    {
        int64_t headDim = 0, kvHeads = 0;
        bool valueProjection = true; // false: the values are the keys' projection
        bool keyProjection = true;   // false: the keys and values are an earlier layer's
    };
    bool sharesKv(int64_t layer) const
    {
        return kvSharedLayers > 0 && kvSharedLayers < numLayers && layer >= numLayers - kvSharedLayers;
    }
    // The attention's geometry on one layer: the model's, or the global layers' own.
    AttentionGeometry attentionAt(int64_t layer) const
    {
        const bool shared = sharesKv(layer);
        if (layer >= 0 && static_cast<size_t>(layer) < globalLayers.size() && globalLayers[static_cast<size_t>(layer)])
            return {globalHeadDim > 0 ? globalHeadDim : headDim, globalKvHeads > 0 ? globalKvHeads : numKvHeads,
                    !globalKeyIsValue && !shared, !shared};
        return {headDim, numKvHeads, !shared, !shared};
    }
    // The dense MLP's width on one layer.
    int64_t mlpWidth(int64_t layer) const { return doubleWideMlp && sharesKv(layer) ? 2 * intermediateSize : intermediateSize; }
    bool hasPerLayerInputs() const { return perLayerInputSize > 0; }
    int64_t publishedParams = 0;      // from the model card, for tests; 0 when unknown
    // The config.json it came from, kept whole so that the transformers engine builds exactly
    // this model (null for Headroom's flat form without one).
    nlohmann::json hfConfig;
    // False for a model_type Headroom cannot estimate yet: a measurement of it still loads and
    // shows, with "estimate unavailable" (the transformers engine builds any type).
    bool estimable = true;
    // A variant of a modelled type that its row does not follow (a config field and its value,
    // and why): estimate() refuses it and the traced estimate answers (support.h traceAnswers).
    struct RowGap
    {
        std::string field, value, reason;
    };
    std::optional<RowGap> rowGap;

    bool isMoe() const { return numExperts > 0; }
    bool isMla() const { return kvLoraRank > 0; }
    bool isMoeLayer(int64_t layer) const { return isMoe() && layer >= firstDenseLayers; }
    bool hasLinearAttention() const { return linearAttn.valueHeads > 0; }
    bool isLinearAttentionLayer(int64_t layer) const
    {
        return layer >= 0 && static_cast<size_t>(layer) < linearLayers.size() && linearLayers[static_cast<size_t>(layer)];
    }
    int64_t linearAttentionLayerCount() const
    {
        return static_cast<int64_t>(std::count(linearLayers.begin(), linearLayers.end(), true));
    }
    void validate() const;
};

// One parameter tensor class of the model; `count` identical tensors of shape rows x cols.
struct ParamTensor
{
    std::string module;      // q_proj, embed_tokens, lm_head, input_layernorm, ...
    int64_t rows = 0;
    int64_t cols = 1;        // 1 for vectors
    int64_t count = 1;       // how many such tensors in the model
    bool decoderLinear = false; // a Linear inside a decoder layer (LoRA/QLoRA target candidates)
    int64_t numel() const { return rows * cols; }
};

std::vector<ParamTensor> parameterInventory(const ModelArch &m);

// The same config built as AutoModelForSequenceClassification with `labels` labels (issue 29's
// reward models): the decoder, then `score` in the lm_head's place (See Note [Reward step]).
ModelArch asSequenceClassifier(ModelArch m, int64_t labels);

// The decoder layer's Linear modules as Hugging Face names them, indexed by LinearModule. A
// fused q/k/v projection sits at Q (K and V empty), a fused gate/up at Gate (Up empty); an
// empty name: no such Linear (Mixtral's experts are stacked Parameters, not Linears).
std::array<std::string, kLinearModuleCount> linearModuleNames(const ModelArch &m);
// Whether PEFT's LoRA wraps a Linear module of this name: a target names it (PEFT matches the
// module name's last component), or "all-linear" wraps every one.
bool loraWraps(const std::string &name, const std::vector<std::string> &targets);
// The Linears PEFT's LoRA wraps: those whose name is a target (PEFT matches the module name's
// last component), every one for "all-linear". Names are checked with loraTargetMask first.
std::array<bool, kLinearModuleCount> loraAdaptedModules(const ModelArch &m, const std::vector<std::string> &targets);
// PEFT 0.21 on a family whose MoE experts are stacked Parameters it wraps (FamilyTraits::
// expertsWrappedByPeft: Qwen3-MoE, DeepSeek-V2/V3): naming gate_proj/up_proj/down_proj puts a
// ParamWrapper on every MoE layer's experts.gate_up_proj (rank 2r: gate and up side by side) and
// experts.down_proj (rank r) and leaves the dense MLPs and shared experts alone; loraAdaptedModules
// then has no MLP Linear for such a family (measured: the parameter layouts of the H200 runs
// q3moe-bf16-lora16-b2s1024-l8, moon-bf16-lora16-b1s2048, dsv2l-bf16-lora16-b1s2048).
struct ExpertsLora
{
    bool gateUp = false; // gate_proj and up_proj named
    bool down = false;   // down_proj named
    bool partial = false; // one of gate_proj/up_proj without the other (not measured)
    bool any() const { return gateUp || down || partial; }
};
ExpertsLora expertsLora(const ModelArch &m, const std::vector<std::string> &targets);
// The adapters of one MoE layer's wrapped experts as [rows, cols] in creation order: gate_up's
// lora_A [2r x E, hidden] and lora_B [2 x expert intermediate, 2r x E], then down's lora_A
// [r x E, expert intermediate] and lora_B [hidden, r x E] (PEFT's ParamWrapper: one nn.Linear
// pair over all experts; the down wrapper is the outer one, so its factors come first in forward).
std::vector<std::pair<int64_t, int64_t>> expertsLoraShapes(const ModelArch &m, const ExpertsLora &e, int64_t rank);
// LoRA's targets when none are given: every Linear of a decoder layer by the model's own names, in
// module order, each once (Llama: q_proj ... down_proj; GPT-2: c_attn, c_proj, c_fc; GPT-NeoX:
// query_key_value, dense, dense_h_to_4h, dense_4h_to_h; Phi-3: qkv_proj, o_proj, gate_up_proj,
// down_proj), and where PEFT wraps stacked experts (FamilyTraits::expertsWrappedByPeft) the MLP
// projections that name them. What PEFT's all-linear adapts, as a list the model's own Linears
// answer to; the default follows the model instead of a Llama's names.
std::vector<std::string> defaultLoraTargets(const ModelArch &m);
// The targets, or the model's defaults where they name no Linear of `m` (a model switched from
// Llama to GPT-2 keeps adapters instead of an error).
std::vector<std::string> loraTargetsFor(const ModelArch &m, const std::vector<std::string> &targets);
// On a model switch: targets that were `from`'s defaults become `to`'s; others as loraTargetsFor.
std::vector<std::string> loraTargetsOnSwitch(const ModelArch &from, const ModelArch &to,
                                             const std::vector<std::string> &targets);
// The sequence length kept on a switch to `m`: as it is, except for learned absolute positions
// (GPT-2's wpe), which cannot go past max_position_embeddings.
int64_t seqLenFor(const ModelArch &m, int64_t seqLen);
// The attention kept on a switch to `m`: as it is, except SDPA where the family has no SDPA path
// (GPT-OSS's sinks run in eager attention or a flash kernel): eager.
Attention attentionFor(const ModelArch &m, Attention attention);
// Qwen3.5's gated DeltaNet Linears, in sim::DeltaNetProjection order (in_proj_qkv, in_proj_z,
// in_proj_b, in_proj_a, out_proj): their names, their (in, out) features, and those LoRA wraps on
// every linear-attention layer (named, or all-linear).
constexpr int kLinearAttentionLinears = 5;
std::array<std::string, kLinearAttentionLinears> linearAttentionLinearNames();
std::array<std::pair<int64_t, int64_t>, kLinearAttentionLinears> linearAttentionLinearShapes(const ModelArch &m);
std::array<bool, kLinearAttentionLinears> linearAttentionLora(const ModelArch &m, const std::vector<std::string> &targets);
// all-linear also wraps an MoE block's shared_expert_gate (an nn.Linear(hidden, 1): Qwen2-MoE,
// Qwen3.5-MoE) on every MoE layer.
bool sharedExpertGateLora(const ModelArch &m, const std::vector<std::string> &targets);
// The decoder layers that have the module: attention's on a hybrid model's attention layers only,
// v_proj not on Gemma 4's global layers with attention_k_eq_v.
int64_t linearModuleLayerCount(const ModelArch &m, LinearModule mod);
// In and out features of each Linear above on `layer` (0 where there is none; -1: the model's
// own geometry, Gemma 4's sliding layers').
int64_t linearInFeatures(const ModelArch &m, LinearModule mod, int64_t layer = -1);
int64_t linearOutFeatures(const ModelArch &m, LinearModule mod, int64_t layer = -1);
// One module's Linears grouped by shape: in and out features, and on how many layers.
struct LinearGroup
{
    int64_t in = 0, out = 0, layers = 0;
};
std::vector<LinearGroup> linearModuleGroups(const ModelArch &m, LinearModule mod);
// Multi-head latent attention's own Linears (DeepSeek-V2/V3): q_a_proj, q_b_proj (with
// q_lora_rank), kv_a_proj_with_mqa, kv_b_proj, as (in, out) features, and those LoRA wraps (named,
// or all-linear). q_proj and o_proj are LinearModule's Q and O.
constexpr int kMlaLinears = 4;
std::array<std::string, kMlaLinears> mlaLinearNames();
std::array<std::pair<int64_t, int64_t>, kMlaLinears> mlaLinearShapes(const ModelArch &m);
std::array<bool, kMlaLinears> mlaLora(const ModelArch &m, const std::vector<std::string> &targets);
// Gemma 4's per-layer-input Linears: per_layer_input_gate and per_layer_projection in every
// layer, per_layer_model_projection once (the model's); what LoRA wraps of them (named, or
// all-linear: PEFT wraps every Linear but the lm_head).
constexpr int kPerLayerInputLinears = 3;
std::array<std::string, kPerLayerInputLinears> perLayerInputLinearNames();
std::array<std::pair<int64_t, int64_t>, kPerLayerInputLinears> perLayerInputLinearShapes(const ModelArch &m);
std::array<bool, kPerLayerInputLinears> perLayerInputLora(const ModelArch &m, const std::vector<std::string> &targets);
int64_t parameterCount(const ModelArch &m);
// Issue 30: the parameters a vision-language checkpoint built whole keeps beside its language
// model (its tower and projector); 0 for any other model.
int64_t visionParameterCount(const ModelArch &m);
// The checkpoint's own count: the language model's parameters plus visionParameterCount.
int64_t checkpointParameterCount(const ModelArch &m);

// Import a Hugging Face config.json. Throws InputError naming the missing field or unknown model_type.
ModelArch modelFromHfConfig(const nlohmann::json &config, const std::string &id = {});
ModelArch modelFromHfConfigFile(const std::string &path);
std::vector<std::string> supportedModelTypes();

nlohmann::json toJson(const ModelArch &m);
ModelArch modelArchFromJson(const nlohmann::json &j);
// As modelArchFromJson, but a config.json of a model_type Headroom does not know gives a
// ModelArch with estimable = false (id, name, type and config kept) instead of an error.
ModelArch modelArchFromJsonLenient(const nlohmann::json &j);
// As modelFromHfConfig, but a model_type with no row gives estimable = false with the config kept
// whole (the transformers engine builds it, and traces it: docs/estimator.md Note [Traced step]);
// any other problem of the file still throws.
ModelArch modelFromHfConfigLenient(const nlohmann::json &config, const std::string &id = {});
// A model file as the user names it (--model, Import config.json, a drop): Headroom's own form
// (with "headroom") or a config.json, both lenient as above. `id`: the file it came from.
ModelArch modelFromFileJsonLenient(const nlohmann::json &j, const std::string &id);

} // namespace headroom
