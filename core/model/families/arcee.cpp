// modular_arcee.py: Llama with Nemotron's MLP, up_proj -> activation -> down_proj without a gate;
// the activation is relu2 (ReLUSquaredActivation) unless hidden_act says otherwise.
#include "family.h"

namespace headroom {

namespace {
void read(const ConfigFields &c, ModelArch &m)
{
    m.mlp = MlpKind::Plain;
    m.activation = c.string("hidden_act", "relu2");
}
} // namespace

const Family &family_arcee()
{
    static const Family f = family_llama().derive("arcee").reads(&read);
    return f;
}

} // namespace headroom
