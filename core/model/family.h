#pragma once
// A model family, as Transformers defines one in its modular_<type>.py: a parent, and what this
// type does differently. One file per family in model/families/ (the file's name is the
// model_type); CMake lists them, so a new family that fits the traits is that one file.
//
// What a family states:
// - its traits (headroom/model.h, FamilyTraits): what only the modeling code knows, as the
//   parent's with the differences marked;
// - how it reads its config.json: the fields its configuration class adds or reads otherwise,
//   applied after the parent's reading.
// Private to the model layer: the rest of core sees FamilyTraits and ModelArch only.

#include "headroom/error.h"
#include "headroom/model.h"

#include <nlohmann/json.hpp>

#include <string>

namespace headroom {

// The fields of one config.json, read strictly: a wrong type or a non-positive size throws
// InputError naming "config.<key>"; absent or null takes the fallback.
class ConfigFields
{
public:
    explicit ConfigFields(const nlohmann::json &c, std::string ctx = "config")
        : m_c(c)
        , m_ctx(std::move(ctx))
    {}
    const nlohmann::json &json() const { return m_c; }
    bool has(const std::string &key) const { return m_c.contains(key) && !m_c.at(key).is_null(); }
    int64_t integer(const std::string &key) const; // required, positive
    int64_t integer(const std::string &key, int64_t fallback) const;
    // Required, under either name: Transformers renames keys between versions while the Hub's
    // files keep the old one (Qwen3-MoE's num_experts is num_local_experts in 5.x's to_dict).
    // Absent under both, the error names the first.
    int64_t integerEither(const std::string &key, const std::string &other) const
    {
        return !has(key) && has(other) ? integer(other) : integer(key);
    }
    bool boolean(const std::string &key, bool fallback) const;
    double number(const std::string &key, double fallback) const;
    std::string string(const std::string &key, const std::string &fallback) const;
    // An InputError naming "config.<key>".
    [[noreturn]] void refuse(const std::string &key, const std::string &value, const std::string &why) const;
    // A variant the row does not follow: the model loads, estimate() refuses it, and the traced
    // estimate answers (ModelArch::rowGap). The first one stated is kept.
    static void notModelled(ModelArch &m, const std::string &key, const std::string &value, const std::string &why)
    {
        if (!m.rowGap)
            m.rowGap = ModelArch::RowGap{key, value, why};
    }

private:
    const nlohmann::json &m_c;
    std::string m_ctx;
};

struct Family
{
    using Reader = void (*)(const ConfigFields &c, ModelArch &m);
    using F = FamilyTraits;

    FamilyTraits traits;            // traits.modelType is the family's model_type
    const Family *parent = nullptr; // nullptr: a root, which reads every field itself
    Reader read = nullptr;          // this family's own fields, after the parent's
    // A composite config.json's own fields (FamilyTraits::textConfigNested: read from the whole
    // file, after the text model's), e.g. the vision tower the estimate leaves out.
    Reader outer = nullptr;
    // The text configuration class's defaults (Gemma3TextConfig's), for a composite whose
    // text_config states only what differs from them; inherited.
    using Defaults = nlohmann::json (*)();
    Defaults textDefaults = nullptr;

    void readConfig(const ConfigFields &c, ModelArch &m) const
    {
        if (parent)
            parent->readConfig(c, m);
        if (read)
            read(c, m);
    }

    static Family root(std::string_view modelType)
    {
        Family f;
        f.traits.modelType = modelType;
        return f;
    }
    // A family made from this one: its traits, and its reading first. Whether the LibTorch
    // engine reproduces it is not inherited (validated per family: FamilyTraits::libtorchEngine).
    Family derive(std::string_view modelType) const
    {
        Family f;
        f.traits = traits;
        f.traits.modelType = modelType;
        f.traits.libtorchEngine = false;
        f.parent = this;
        f.textDefaults = textDefaults;
        return f;
    }
    // A vision-language checkpoint built whole over this family's language model (issue 30): its
    // text_config is this family's, its own fields (the vision_config) `outer` reads.
    Family visionLanguage(std::string_view modelType, Reader outerReader) const
    {
        Family f = derive(modelType).set(&FamilyTraits::textConfigNested).set(&FamilyTraits::visionLanguage);
        f.outer = outerReader;
        return f;
    }
    // The differences, written fluently.
    Family with(NormPlacement v) const
    {
        Family f = *this;
        f.traits.norms = v;
        return f;
    }
    Family with(QkNorm v) const
    {
        Family f = *this;
        f.traits.qkNorm = v;
        return f;
    }
    Family with(RmsNormStyle v) const
    {
        Family f = *this;
        f.traits.rms = v;
        return f;
    }
    Family with(FusedQkvLayout v) const
    {
        Family f = *this;
        f.traits.qkvLayout = v;
        return f;
    }
    Family set(bool F::*field, bool v = true) const
    {
        Family f = *this;
        f.traits.*field = v;
        return f;
    }
    Family unset(bool F::*field) const { return set(field, false); }
    template<typename V> Family assign(V F::*field, V v) const
    {
        Family f = *this;
        f.traits.*field = v;
        return f;
    }
    Family reads(Reader r) const
    {
        Family f = *this;
        f.read = r;
        return f;
    }
    Family defaults(Defaults d) const
    {
        Family f = *this;
        f.textDefaults = d;
        return f;
    }
};

// One function per file in model/families/, named family_<model_type> (the list is generated).
#define HEADROOM_FAMILY(name) const Family &family_##name();
#include "families.inc"
#undef HEADROOM_FAMILY

} // namespace headroom
