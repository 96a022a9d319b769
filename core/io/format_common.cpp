// What the training-config formats share (format.h): the bounded YAML reader, the readers of
// keys several formats use, and the document writers.

#include "format.h"

#include "headroom/error.h"

#include <algorithm>
#include <regex>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string_view>

namespace headroom::formats {

// ---------------------------------------------------------------- YAML, bounded, as JSON
namespace {
// The plain scalars as the tools that read these files see them: Axolotl, LLaMA-Factory and TRL
// load their YAML with PyYAML, a YAML 1.1 reader, where yes/no/on/off are booleans and a number may
// hold underscores (sequence_len: 500_000).
std::string withoutDigitSeparators(const std::string &s)
{
    // [-+]?digits with single underscores between them, and an optional .digits / exponent part.
    std::string out;
    bool digitBefore = false, any = false;
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (c == '_') {
            if (!digitBefore || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i + 1])))
                return s;
            any = true;
            continue;
        }
        digitBefore = std::isdigit(static_cast<unsigned char>(c)) != 0;
        out += c;
    }
    return any ? out : s;
}

json scalarValue(const YAML::Node &n)
{
    const std::string &raw = n.Scalar();
    if (n.Tag() == "!") // quoted: a string, whatever it looks like ('no', "1")
        return raw;
    if (raw.empty() || raw == "~" || raw == "null" || raw == "Null" || raw == "NULL")
        return nullptr;
    static const std::set<std::string> yes = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
    static const std::set<std::string> no = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
    if (yes.count(raw))
        return true;
    if (no.count(raw))
        return false;
    const std::string s = withoutDigitSeparators(raw);
    char *end = nullptr;
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (*end == '\0' && errno == 0)
        return static_cast<int64_t>(i);
    const double d = std::strtod(s.c_str(), &end);
    if (*end == '\0' && std::isfinite(d) && s.find_first_of("xXnN") == std::string::npos) // not 0x1p3, nan, inf
        return d;
    return raw;
}

json toJson(const YAML::Node &n, int depth, size_t &nodes, const std::string &name)
{
    if (++nodes > kMaxNodes)
        throw InputError(name, std::to_string(nodes) + " nodes", "too large for a training config (at most 100000)");
    if (depth > kMaxDepth)
        throw InputError(name, "depth " + std::to_string(depth), "nested too deeply for a training config (at most 32)");
    switch (n.Type()) {
    case YAML::NodeType::Scalar:
        if (n.Scalar().size() > kMaxScalar)
            throw InputError(name, n.Scalar().substr(0, 40), "a value longer than 64 KiB");
        return scalarValue(n);
    case YAML::NodeType::Sequence: {
        json a = json::array();
        for (const auto &e : n)
            a.push_back(toJson(e, depth + 1, nodes, name));
        return a;
    }
    case YAML::NodeType::Map: {
        json o = json::object();
        for (const auto &kv : n) {
            if (!kv.first.IsScalar())
                throw InputError(name, "a key", "every key must be a plain name");
            o[kv.first.Scalar()] = toJson(kv.second, depth + 1, nodes, name);
        }
        return o;
    }
    default:
        return nullptr;
    }
}

} // namespace

json parseText(const std::string &text, const std::string &name)
{
    if (text.size() > kMaxText)
        throw InputError(name, std::to_string(text.size()) + " bytes", "too large for a training config (at most 4 MiB)");
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && text[first] == '{')
        return parseUntrusted(text, name, kMaxText, kMaxDepth);
    // Nothing silently ignored (issue 32, row 16): a NUL byte, or a second YAML document after the
    // first, is refused rather than dropped.
    if (const size_t nul = text.find('\0'); nul != std::string::npos)
        throw InputError(name, "byte " + std::to_string(nul), "a NUL byte: a training config is text");
    // A second document starts at a "---" (or follows a "...") in column 0 after content: YAML
    // forbids either inside a document, block scalars included. Found by reading the lines, not by
    // YAML::LoadAll, which yaml-cpp 0.7 never returns from on some invalid input (",5": CI's
    // fuzz_training_config timeout).
    {
        bool content = false, ended = false;
        size_t docs = 1, at = 0;
        while (at <= text.size()) {
            const size_t nl = text.find('\n', at);
            const std::string_view line(text.data() + at, (nl == std::string::npos ? text.size() : nl) - at);
            auto marker = [&](std::string_view m) {
                return line.substr(0, 3) == m && (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
            };
            const size_t ink = line.find_first_not_of(" \t\r");
            const bool blank = ink == std::string_view::npos || line[ink] == '#' ||
                               (!content && !ended && line.substr(0, 1) == "%"); // a directive (%YAML) before "---"
            if (marker("---")) {
                if (content || ended)
                    ++docs;
                content = ended = false;
                if (line.find_first_not_of(" \t\r", 3) != std::string_view::npos && line[line.find_first_not_of(" \t\r", 3)] != '#')
                    content = true; // "--- value" on the marker's line
            } else if (marker("...")) {
                ended = ended || content;
                content = false;
            } else if (!blank) {
                if (ended) {
                    ++docs;
                    ended = false;
                }
                content = true;
            }
            if (nl == std::string::npos)
                break;
            at = nl + 1;
        }
        if (docs > 1)
            throw InputError(name, std::to_string(docs) + " YAML documents",
                             "one training config per file: the documents after the first (---) would be ignored");
    }
    try {
        size_t nodes = 0;
        const YAML::Node root = YAML::Load(text);
        json j = toJson(root, 0, nodes, name);
        if (!j.is_object())
            throw InputError(name, j.is_null() ? std::string("an empty file") : showJson(j, 60),
                             "a training config is a mapping of keys to values");
        return j;
    } catch (const YAML::Exception &e) {
        throw InputError(name, "line " + std::to_string(e.mark.line + 1), "not valid YAML: " + e.msg);
    }
}


// Hugging Face's optim names (transformers.training_args.OptimizerNames), Axolotl's `optimizer`.
void readOptim(Reader &r, const std::string &key, const json &v)
{
    const std::string s = r.text(key, v);
    auto &st = r.out.settings;
    const bool paged = s.rfind("paged_", 0) == 0;
    // The optimizer table's aliases (types.cpp): one row per optimizer.
    const OptimizerTraits *found = nullptr;
    for (const auto &t : optimizerTable()) {
        std::string_view a = t.hfAliases;
        while (!a.empty() && !found) {
            const size_t sp = a.find(' ');
            if (a.substr(0, sp) == s)
                found = &t;
            a = sp == std::string_view::npos ? std::string_view() : a.substr(sp + 1);
        }
        if (found)
            break;
    }
    if (!found && (s == "adamw_torch_4bit" || s == "adamw_torch_8bit")) {
        // torchao's low-bit AdamW (block-wise quantized moments): estimated as bitsandbytes'
        // 8-bit AdamW, the same layout at 8 bits (for 4 bits, twice its moments: an over-estimate).
        st.optimizer = Optimizer::AdamW8bit;
        r.note(key + " = " + s + ": torchao's quantized AdamW, estimated as bitsandbytes' 8-bit AdamW" +
               (s == "adamw_torch_4bit" ? " (its 4-bit moments are half that: an over-estimate)" : ""));
        return;
    }
    if (!found) {
        r.out.unknownKeys.push_back(key + " = " + s + " (optimizer not modelled; estimated with Headroom's default, AdamW)");
        return;
    }
    st.optimizer = found->id;
    if (found->id == Optimizer::AdamW)
        st.optimizerImpl = s == "adamw_torch_fused" ? OptimizerImpl::Fused : OptimizerImpl::Foreach;
    if (s.find("lion_8bit") != std::string::npos)
        r.note(key + " = " + s + ": 8-bit Lion state is estimated as 32-bit (an over-estimate)");
    if (paged && found->id != Optimizer::PagedAdamW8bit)
        r.note(key + " = " + s + ": paged optimizer state can move to host memory under pressure; the estimate keeps "
                                 "it on the GPU (the peak when there is no pressure)");
}

// Axolotl's and TRL's activation_offloading (true, or Axolotl's "legacy" / "disk"): both move
// saved activations to the host with torchtune-style hooks; the estimate models torch's
// save_on_cpu, the same bytes without the streams' overlap.
void readActivationOffload(Reader &r, const std::string &key, const json &v)
{
    if (v.is_string()) {
        const std::string s = r.text(key, v);
        if (s == "disk") {
            r.out.unknownKeys.push_back(key + " = disk (offload to disk is not modelled; estimated without offload)");
            return;
        }
        r.out.settings.activationOffload = true;
    } else {
        r.out.settings.activationOffload = r.flag(key, v);
    }
    if (*r.out.settings.activationOffload)
        r.note(key + ": estimated as torch's save_on_cpu (every saved tensor to pinned host memory); the "
                     "trainers' stream-overlapped version can keep a layer or two more on the GPU");
}

// FSDP settings as accelerate and Axolotl's fsdp_config write them (FSDP1 names and FSDP2's).
void readFsdpConfig(Reader &r, const std::string &prefix, const json &cfg)
{
    auto &st = r.out.settings;
    std::optional<int> version;
    std::optional<bool> reshard;
    for (const auto &[k, v] : cfg.items()) {
        const std::string key = prefix + k;
        const std::string bare = k.rfind("fsdp_", 0) == 0 ? k.substr(5) : k;
        if (bare == "sharding_strategy") {
            const std::string s = v.is_number() ? std::to_string(v.get<int>()) : r.text(key, v);
            if (s == "FULL_SHARD" || s == "1")
                st.zeroStage = 3;
            else if (s == "SHARD_GRAD_OP" || s == "2")
                st.zeroStage = 2;
            else if (s == "NO_SHARD" || s == "3")
                st.zeroStage = 0;
            else if (s == "HYBRID_SHARD" || s == "4") {
                st.zeroStage = 3;
                r.note(key + " = " + s + ": sharded within a node only; set the GPU count to the GPUs per node");
            } else if (s == "_HYBRID_SHARD_ZERO2" || s == "HYBRID_SHARD_ZERO2" || s == "5")
                st.zeroStage = 2;
            else
                r.bad(key, v, "must be FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD");
        } else if (bare == "version") {
            version = static_cast<int>(r.integer(key, v, 1, 2));
        } else if (bare == "reshard_after_forward") {
            if (v.is_string()) { // FSDP2 in accelerate also takes the FSDP1 strategy names here
                const std::string s = v.get<std::string>();
                reshard = s == "FULL_SHARD" || s == "HYBRID_SHARD" || s == "true";
            } else {
                reshard = r.flag(key, v);
            }
        } else if (bare == "offload_params") {
            if (r.flag(key, v))
                r.note(key + ": parameters offloaded to the CPU are not modelled; the estimate keeps them on the GPU "
                             "(an over-estimate)");
        } else if (bare == "activation_checkpointing") {
            st.gradCheckpointing = r.flag(key, v);
        } else if (bare == "auto_wrap_policy" || bare == "backward_prefetch" || bare == "cpu_ram_efficient_loading" ||
                   bare == "forward_prefetch" || bare == "state_dict_type" || bare == "sync_module_states" ||
                   bare == "use_orig_params" || bare == "transformer_layer_cls_to_wrap" || bare == "min_num_params" ||
                   bare == "limit_all_gathers" || bare == "cpu_offload_pin_memory") {
            // how FSDP wraps, prefetches and saves: no change to the step's peak that Headroom models
        } else {
            r.out.unknownKeys.push_back(key);
        }
    }
    if (version == 2 && reshard)
        st.zeroStage = *reshard ? 3 : 2;
    else if (version == 2 && !st.zeroStage)
        st.zeroStage = 3; // FSDP2's default: reshard after forward
}

// "full_shard auto_wrap offload" (TrainingArguments.fsdp)
void readFsdpString(Reader &r, const std::string &key, const json &v)
{
    const std::string s = v.is_array() ? [&] {
        std::string joined;
        for (const auto &e : v)
            joined += r.text(key, e) + " ";
        return joined;
    }()
                                       : r.text(key, v);
    if (s.find("full_shard") != std::string::npos || s.find("hybrid_shard") != std::string::npos)
        r.out.settings.zeroStage = 3;
    else if (s.find("shard_grad_op") != std::string::npos)
        r.out.settings.zeroStage = 2;
    else if (s.find_first_not_of(' ') != std::string::npos)
        r.bad(key, v, "must name full_shard, shard_grad_op or hybrid_shard");
    if (s.find("offload") != std::string::npos)
        r.note(key + ": offloaded parameters are not modelled; the estimate keeps them on the GPU (an over-estimate)");
}

// A key known to have no effect on the step's memory (logging, launch plumbing): read, not listed.
void ignoreKey(Reader &, const std::string &, const json &) {}

// PEFT's LoraConfig fields under the names Axolotl and TRL's ModelConfig share.
void readLoraRank(Reader &r, const std::string &k, const json &v)
{
    r.out.settings.loraRank = static_cast<int>(r.integer(k, v, 1, 65536));
}
void readLoraAlpha(Reader &r, const std::string &k, const json &v)
{
    r.out.settings.loraAlpha = r.number(k, v, 1e-9, 1e6);
}
void readLoraDropout(Reader &r, const std::string &k, const json &v)
{
    r.out.settings.loraDropout = r.number(k, v, 0, 0.999999);
}
// PEFT's target_modules grammar (tuners_utils.check_target_module_exists): a single string is a
// regular expression matched whole against each module's full name (re.fullmatch); each name of a
// list matches a module whose name is it or ends with "." + it. Headroom's targets are the decoder
// Linears' own names, so a dotted name keeps its last part, and a regular expression becomes the
// names it matches among the decoder layers' Linears as Transformers names them (text models, and
// the language model inside a vision-language one).
namespace {
const char *const kLinearPaths[] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "self_attn.qkv_proj",
    "self_attn.dense", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "mlp.gate_up_proj", "mlp.fc1", "mlp.fc2",
    "mlp.c_fc", "mlp.c_proj", "attn.c_attn", "attn.c_proj", "attention.query_key_value", "attention.dense",
    "mlp.dense_h_to_4h", "mlp.dense_4h_to_h", "self_attention.query_key_value", "self_attention.dense"};
const char *const kLayerPrefixes[] = {"model.layers.", "model.language_model.layers.", "language_model.model.layers.",
                                      "model.text_model.layers.",
                                      "transformer.h.", "gpt_neox.layers.", "model.decoder.layers."};

bool looksLikeRegex(const std::string &t)
{
    return t.find_first_of("[]()|*+?\\^$") != std::string::npos;
}
} // namespace

void readLoraTargets(Reader &r, const std::string &k, const json &v)
{
    if (v.is_string() && looksLikeRegex(v.get<std::string>())) {
        const std::string pattern = v.get<std::string>();
        if (pattern.size() > 256) // std::regex compiles and matches recursively: a bounded pattern
            r.bad(k, json(pattern.substr(0, 40) + "..."), "a regular expression of more than 256 characters");
        // std::regex backtracks: a repeated group, or many repeats in a row, can take exponential
        // time on a hostile pattern. What recipes write has a few single repeats ([\d]+, .*).
        int repeats = 0;
        bool inClass = false;
        for (size_t i = 0; i < pattern.size(); ++i) {
            const char c = pattern[i];
            if (c == '\\') {
                ++i;
                continue;
            }
            if (inClass) {
                inClass = c != ']';
                continue;
            }
            if (c == '[')
                inClass = true;
            else if (c == '*' || c == '+' || c == '{' || c == '?') {
                if (c != '?')
                    ++repeats;
                if (c != '?' && i > 0 && pattern[i - 1] == ')')
                    r.bad(k, v, "a repeated group in a regular expression is not read (name the modules instead)");
            }
        }
        if (repeats > 3)
            r.bad(k, v, "a regular expression with more than 3 repeats is not read (name the modules instead)");
        std::regex re;
        try {
            re = std::regex(pattern, std::regex::ECMAScript);
        } catch (const std::regex_error &) {
            r.bad(k, v, "is not a regular expression Headroom can read (PEFT matches a single string as one)");
        }
        std::vector<std::string> names;
        for (const char *path : kLinearPaths)
            for (const char *prefix : kLayerPrefixes) {
                const std::string full = std::string(prefix) + "0." + path;
                if (!std::regex_match(full, re))
                    continue;
                const std::string name = std::string(path).substr(std::string(path).rfind('.') + 1);
                if (std::find(names.begin(), names.end(), name) == names.end())
                    names.push_back(name);
            }
        if (names.empty())
            r.bad(k, v, "matches none of a decoder layer's Linear modules (PEFT matches the whole module name, "
                        "e.g. model.layers.0.self_attn.q_proj)");
        std::string list;
        for (const auto &n : names)
            list += (list.empty() ? "" : ", ") + n;
        r.note(k + ": the regular expression matches " + list + " in every decoder layer (PEFT's re.fullmatch)");
        r.out.settings.loraTargets = names;
        // Issue 30: a pattern over the language model's layers leaves a vision tower and its
        // projector without adapters
        if (pattern.find("language_model") != std::string::npos || pattern.find("text_model") != std::string::npos)
            r.out.settings.freezeVisionTower = r.out.settings.freezeProjector = true;
        return;
    }
    std::vector<std::string> targets;
    for (std::string t : r.list(k, v)) {
        if (looksLikeRegex(t))
            r.bad(k, json(t), "a regular expression must be the whole value, not one of a list (PEFT matches list "
                              "entries as names)");
        if (const size_t dot = t.rfind('.'); dot != std::string::npos && dot + 1 < t.size())
            t = t.substr(dot + 1); // PEFT: the module's name ends with "." + the entry
        if (std::find(targets.begin(), targets.end(), t) == targets.end())
            targets.push_back(t);
    }
    r.out.settings.loraTargets = targets;
}

// Transformers' attn_implementation, as Axolotl, TRL (model_init_kwargs) and the Trainer's
// scripts pass it: eager materializes the s x s scores; sdpa is SDPA; flash-attn 2/3 and the
// Hub's kernels are a flash kernel (Note [Flash kernels]); flex attention and xformers keep no
// s x s matrix either and are estimated as one, said so.
void readAttnImplementation(Reader &r, const std::string &k, const json &v)
{
    const std::string s = r.text(k, v);
    if (s == "eager") {
        r.out.settings.attention = Attention::Eager;
    } else if (s == "sdpa") {
        r.out.settings.attention = Attention::SDPA;
    } else if (s == "flash_attention_2" || s == "flash_attention_3" || s.rfind("kernels-community/", 0) == 0) {
        r.out.settings.attention = Attention::Flash;
    } else if (s == "flex_attention" || s == "xformers") {
        r.out.settings.attention = Attention::Flash;
        r.note(k + " = " + s + ": estimated as a flash kernel, which like it keeps no s x s matrix (its own "
                               "buffers are not measured)");
    } else {
        r.bad(k, v, "must be eager, sdpa, flash_attention_2, flash_attention_3, flex_attention, xformers or a "
                    "kernels-community kernel");
    }
}

// Liger's kernels (they include FusedLinearCrossEntropy) or Cut Cross-Entropy: no logits.
void readFusedLoss(Reader &r, const std::string &key, const json &v)
{
    r.out.settings.loss = r.flag(key, v) ? Loss::Fused : Loss::Standard;
}

// A DeepSpeed config named from another file: the stage from names like zero3.json, ds_z2_config.json.
void readDeepSpeedPath(Reader &r, const std::string &key, const json &v)
{
    if (v.is_null())
        return;
    const std::string p = r.text(key, v);
    const std::string file = p.substr(p.find_last_of('/') == std::string::npos ? 0 : p.find_last_of('/') + 1);
    for (const char *pattern : {"zero", "_z"}) {
        const size_t at = file.find(pattern);
        const size_t digit = at == std::string::npos ? at : at + std::string(pattern).size();
        if (at != std::string::npos && digit < file.size() && file[digit] >= '0' && file[digit] <= '3') {
            r.out.settings.zeroStage = file[digit] - '0';
            if (file.find("offload") != std::string::npos)
                r.out.settings.offloadOptimizer = true;
            r.note(key + " = " + p + ": ZeRO-" + std::string(1, file[digit]) +
                   " read from the file name; import that file too (--from) to read its settings");
            return;
        }
    }
    r.note(key + " = " + p + ": the DeepSpeed settings are in that file; import it too (--from)");
}

void readDpo(Reader &r, const std::string &key, const json &v, std::optional<Reference> reference)
{
    (void)v;
    r.out.settings.mode = TrainingMode::DPO;
    if (reference)
        r.out.settings.reference = *reference;
    r.note(key + ": DPO as TRL's DPOTrainer runs it: b pairs as one batch of 2b sequences (chosen, then "
                 "rejected), its reference's forward and log-probabilities beside the policy's");
}

namespace {

// A post-training mode read from `key`: said once, with what the estimate does for it.
void enterMode(Reader &r, const std::string &key, TrainingMode mode, const char *meaning)
{
    if (r.out.settings.mode != mode)
        r.note(key + ": " + meaning);
    r.out.settings.mode = mode;
}

} // namespace

void readReward(Reader &r, const std::string &key, const json &v)
{
    if (v.is_boolean() && !v.get<bool>())
        return;
    enterMode(r, key, TrainingMode::Reward,
              "a reward model as TRL's RewardTrainer trains it: the model as a sequence classifier (its score head "
              "in the lm_head's place, no vocabulary logits), b pairs as 2b sequences");
}

void readKto(Reader &r, const std::string &key, const json &v)
{
    (void)v;
    enterMode(r, key, TrainingMode::KTO,
              "KTO as TRL's KTOTrainer runs it: b unpaired sequences and the KL batch beside them, through the "
              "policy and its reference");
}

void readOrpo(Reader &r, const std::string &key, const json &v)
{
    (void)v;
    enterMode(r, key, TrainingMode::ORPO,
              "ORPO as TRL's ORPOTrainer runs it: b pairs as one batch of 2b sequences, the chosen half's "
              "cross-entropy beside the log-probabilities of all, no reference model");
    r.out.settings.reference = Reference::None;
}

void readCpo(Reader &r, const std::string &key, const json &v)
{
    (void)v;
    enterMode(r, key, TrainingMode::ORPO,
              "CPO or SimPO as TRL's CPOTrainer runs it: ORPO's step (b pairs as one batch of 2b sequences, the "
              "log-probabilities of all, no reference model), the chosen half's cross-entropy in it unless "
              "cpo_alpha = 0");
    r.out.settings.reference = Reference::None;
}

void readCpoAlpha(Reader &r, const std::string &key, const json &v)
{
    r.out.settings.chosenNll = r.number(key, v, 0.0, 1e6) > 0.0;
}

void readGrpo(Reader &r, const std::string &key, const json &v)
{
    (void)v;
    enterMode(r, key, TrainingMode::GRPO,
              "GRPO as TRL's GRPOTrainer runs it: micro_batch x grad_accum completions generated per step (HF "
              "generate with its KV cache, or vLLM), then the policy's step on prompt + completion (a reference "
              "beside it when beta > 0)");
}

const std::map<std::string, Handler> &grpoKeys()
{
    static const std::map<std::string, Handler> keys = {
        {"num_generations", [](Reader &r, const std::string &k, const json &v) {
             readGrpo(r, k, v);
             r.out.settings.numGenerations = r.integer(k, v, 1, int64_t(1) << 16);
         }},
        {"max_completion_length", [](Reader &r, const std::string &k, const json &v) {
             r.out.settings.completionLen = r.integer(k, v, 1, 1 << 24);
         }},
        {"temperature", [](Reader &r, const std::string &k, const json &v) {
             r.out.settings.temperature = r.number(k, v, 1e-6, 1e6);
         }},
        {"use_vllm", [](Reader &r, const std::string &k, const json &v) { r.out.settings.vllm = r.flag(k, v); }},
        {"vllm_mode", [](Reader &r, const std::string &k, const json &v) {
             const std::string m = r.text(k, v);
             if (m != "colocate" && m != "server")
                 r.bad(k, v, "must be colocate or server");
             r.out.settings.vllmServer = m == "server";
         }},
        {"vllm_gpu_memory_utilization", [](Reader &r, const std::string &k, const json &v) {
             r.out.settings.vllmGpuMemoryUtilization = r.number(k, v, 1e-6, 0.999999);
         }},
        {"reward_funcs", readGrpo}};
    return keys;
}

void writeGrpoKeys(const TrainingConfig &c, std::vector<std::string> &notes,
                   const std::function<void(const char *, const json &)> &put)
{
    const int64_t prompt = c.dpo.prompt(c.seqLen);
    put("beta", c.dpo.beta);
    put("num_generations", c.grpo.numGenerations);
    put("max_completion_length", c.seqLen - prompt);
    put("temperature", c.grpo.temperature);
    put("use_vllm", c.grpo.vllm);
    if (c.grpo.vllm) {
        put("vllm_mode", c.grpo.vllmServer ? "server" : "colocate");
        put("vllm_gpu_memory_utilization", c.grpo.vllmGpuMemoryUtilization);
    }
    if (prompt != TrainingSettings::kGrpoPromptTokens)
        notes.push_back("GRPOConfig has no prompt length (TRL no longer truncates prompts): the estimate's " +
                        std::to_string(prompt) + "-token prompts are not written, and read back as " +
                        std::to_string(TrainingSettings::kGrpoPromptTokens));
}

void refusePostTraining(Reader &r, const std::string &key, const json &v, const std::string &mode)
{
    r.bad(key, v,
          mode + " is not modelled yet: what it adds to a supervised step (a reference or value model, paired or "
                 "generated sequences, another head) is not in the estimate, and Headroom never estimates it as one");
}

void readLoraKernel(Reader &r, const std::string &key, const json &v)
{
    if (r.flag(key, v))
        r.note(key + ": Axolotl's fused LoRA kernel keeps fewer activations than PEFT's LoRA, which is what is "
                     "estimated (an over-estimate)");
}

void readHubKernels(Reader &r, const std::string &key, const json &v)
{
    if (r.flag(key, v))
        r.note(key + ": the Hub's kernels replace some layers' ops; estimated with PyTorch's own (usually an "
                     "over-estimate)");
}

void readUnmodelledParallel(Reader &r, const std::string &key, const json &v)
{
    if (!Reader::isAuto(v) && r.integer(key, v, 1, 65536) > 1)
        r.note(key + ": this parallelism splits layers or sequences across GPUs, which is not modelled; estimated "
                     "without it (an over-estimate per GPU)");
}

void readReplicas(Reader &r, const std::string &key, const json &v)
{
    if (!Reader::isAuto(v) && r.integer(key, v, 1, 65536) > 1)
        r.note(key + ": replicas each hold a full set of shards; the estimate is one replica's GPUs (the shard size)");
}

void readVisionInputs(Reader &r, const std::string &key, const json &v)
{
    if (v.is_null())
        return;
    auto &st = r.out.settings;
    constexpr int64_t pixels = int64_t(1) << 28;
    if (key == "image_max_pixels")
        st.imageMaxPixels = r.integer(key, v, 1, pixels);
    else if (key == "image_min_pixels")
        st.imageMinPixels = r.integer(key, v, 1, pixels);
    else if (key == "video_max_pixels")
        st.videoMaxPixels = r.integer(key, v, 1, pixels);
    else if (key == "video_min_pixels")
        st.videoMinPixels = r.integer(key, v, 1, pixels);
    else if (key == "video_maxlen") {
        st.videoMaxFrames = r.integer(key, v, 1, 4096);
        r.note(key + " = " + std::to_string(*st.videoMaxFrames) + ": a video's frames are video_fps times its "
               "length, at most this many: --video-frames says how many a sample's videos have");
    } else if (key == "freeze_vision_tower")
        st.freezeVisionTower = r.flag(key, v);
    else if (key == "freeze_multi_modal_projector")
        st.freezeProjector = r.flag(key, v);
    else if (key == "freeze_language_model")
        st.freezeLanguageModel = r.flag(key, v);
    else if (key == "freeze_mm_modules") // Axolotl: the tower and the projector together
        st.freezeVisionTower = st.freezeProjector = r.flag(key, v);
    else if (key == "processor_type") { // Axolotl: a vision-language recipe, which trains what it loads
        r.note(key + ": a vision-language recipe; how many images a sample holds is the data's: --images");
        if (!st.freezeVisionTower) // unless freeze_mm_modules says otherwise (either order)
            st.freezeVisionTower = st.freezeProjector = false;
    }
    // video_fps: the frames per second sampled (video_maxlen caps them)
}

// Keys every format shares that cannot change the step's memory: data, logging, saving, schedules.
namespace {
bool namedOrPrefixed(const std::string &k, const std::set<std::string> &names, const std::vector<std::string> &prefixes)
{
    return names.count(k) > 0 ||
           std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string &p) { return k.rfind(p, 0) == 0; });
}
} // namespace

bool isBookkeeping(const std::string &k)
{
    static const std::set<std::string> exact = {
        "learning_rate", "lr_scheduler", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_ratio", "warmup_steps",
        "weight_decay", "num_epochs", "num_train_epochs", "max_steps", "seed", "data_seed", "output_dir",
        "overwrite_output_dir", "logging_steps", "logging_strategy", "logging_first_step", "log_level", "report_to",
        "run_name", "do_train", "do_eval", "do_predict", "eval_strategy", "evaluation_strategy", "eval_steps",
        "evals_per_epoch", "save_strategy", "save_steps", "saves_per_epoch", "save_total_limit", "save_only_model",
        "save_safetensors", "push_to_hub", "hub_model_id", "hub_strategy", "hub_private_repo", "resume_from_checkpoint",
        "datasets", "dataset", "dataset_prepared_path", "val_set_size", "val_size", "dataset_mixture", "dataset_num_proc",
        "dataset_text_field", "template", "chat_template", "max_samples", "overwrite_cache", "preprocessing_num_workers",
        "dataloader_num_workers", "dataloader_pin_memory", "remove_unused_columns", "per_device_eval_batch_size",
        "eval_batch_size", "eval_sample_packing", "eval_table_size", "plot_loss", "ddp_timeout", "special_tokens",
        "tokenizer_type", "tokenizer_config", "tokenizer_name_or_path", "model_revision", "revision", "trust_remote_code",
        "max_grad_norm", "gradient_clipping", "adam_beta1", "adam_beta2", "adam_epsilon", "optim_args", "tf32",
        "early_stopping_patience", "local_rank", "debug", "strict", "train_on_inputs", "group_by_length",
        "sample_packing", "pad_to_sequence_len", "gradient_checkpointing_kwargs", "use_reentrant", "bf16_full_eval",
        "fp16_full_eval", "packing", "ddp_find_unused_parameters", "include_tokens_per_second", "stage_config",
        "torch_compile", "neftune_noise_alpha", "model_type", "max_prompt_length",
        "flash_attn_cross_entropy", "flash_attn_rms_norm", "cutoff_len_eval", "lora_model_dir", "lora_fan_in_fan_out",
        "xformers_attention", "wandb_project", "wandb_entity", "wandb_watch", "wandb_name", "wandb_log_model",
        "base_model_config", "is_llama_derived_model", "loss_watchdog_threshold", "loss_watchdog_patience"};
    static const std::vector<std::string> prefixes = {"wandb_", "hub_", "eval_", "save_", "logging_", "mlflow_", "comet_", "push_"};
    return namedOrPrefixed(k, exact, prefixes);
}

bool isMemoryNeutral(const std::string &k)
{
    // Keys Headroom does not read whose effect is on the data, the logs or the schedule, never on
    // what the step holds on the GPU (issue 28: said apart from those that may change memory).
    static const std::set<std::string> exact = {
        "eot_tokens", "eos_token", "system_prompt", "dataset_name", "dataset_config", "dataset_prompt_column",
        "dataset_train_split", "dataset_test_split", "dataset_kwargs", "dataset_dir", "dataset_exact_deduplication",
        "tokenized_path", "pretraining_dataset", "streaming", "streaming_multipack_buffer_size", "shuffle_merged_datasets",
        "min_sample_len", "curriculum_sampling", "sample_packing_sequentially", "tokenizer_use_mistral_common",
        "reward_weights", "log_completions", "num_completions_to_print", "scale_rewards", "mask_truncated_completions",
        "multi_objective_aggregation", "top_p", "orpo_alpha", "kto_desirable_weight", "loraplus_lr_ratio", "eta_min",
        "cosine_min_lr_ratio", "cosine_constant_lr_ratio", "use_wandb", "use_swanlab", "use_otel_metrics", "use_ray",
        "ray_num_workers", "callbacks", "benchmarks", "code_language", "auto_resume_from_checkpoints",
        "do_causal_lm_eval", "base_model_ignore_patterns", "torchdistx_path", "experimental_skip_move_to_device",
        "average_tokens_across_devices", "test_value"};
    static const std::vector<std::string> prefixes = {"trackio_", "swanlab_", "otel_", "code_eval_", "jagged_restart_"};
    return namedOrPrefixed(k, exact, prefixes);
}

// ---------------------------------------------------------------- the formats

void readKeys(Reader &r, const json &j, const std::map<std::string, Handler> &handlers, const std::string &prefix)
{
    // An empty or null value is "use the default" to the tools that read these files (Axolotl's
    // and TRL's dataclasses, LLaMA-Factory's arguments): said once, never an error.
    std::string empty;
    for (const auto &[k, v] : j.items()) {
        if (v.is_null() && handlers.count(k)) {
            empty += (empty.empty() ? "" : ", ") + prefix + k;
            continue;
        }
        if (const auto it = handlers.find(k); it != handlers.end())
            it->second(r, prefix + k, v);
        else if (isMemoryNeutral(k))
            r.out.neutralKeys.push_back(prefix + k);
        else if (!isBookkeeping(k))
            r.out.unknownKeys.push_back(prefix + k);
    }
    if (!empty.empty())
        r.note("empty, so their defaults: " + empty);
}

Handler setInt(std::optional<int64_t> TrainingSettings::*field, int64_t lo, int64_t hi)
{
    return [field, lo, hi](Reader &r, const std::string &k, const json &v) {
        if (!Reader::isAuto(v))
            r.out.settings.*field = r.integer(k, v, lo, hi);
    };
}

std::string hfOptim(const TrainingConfig &c, std::vector<std::string> &notes)
{
    if (c.optimizer == Optimizer::AdamW) {
        if (c.optimizerImpl == OptimizerImpl::ForLoop)
            notes.push_back("the for-loop AdamW has no optim name; written as adamw_torch (foreach)");
        return c.optimizerImpl == OptimizerImpl::Fused ? "adamw_torch_fused" : "adamw_torch";
    }
    if (c.optimizer == Optimizer::SGDMomentum)
        notes.push_back("SGD with momentum is written as optim sgd; set its momentum in optim_args");
    return std::string(traits(c.optimizer).hfOptim);
}

std::string joinTargets(const std::vector<std::string> &t)
{
    std::string s;
    for (const auto &x : t)
        s += (s.empty() ? "" : ",") + x;
    return s;
}


std::string yamlDocument(const YAML::Emitter &y, const std::vector<std::string> &notes)
{
    YAML::Emitter head;
    for (const auto &n : notes)
        head << YAML::Comment("Headroom: " + n) << YAML::Newline;
    std::string text = std::string(head.c_str());
    if (!text.empty() && text.back() != '\n')
        text += '\n';
    return text + y.c_str() + "\n";
}

std::string jsonDocument(const json &j)
{
    return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

} // namespace headroom::formats
