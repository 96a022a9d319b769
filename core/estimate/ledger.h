#pragma once
// The per-op ledger's pieces (ledger_layer.cpp): a running tally of bytes by category with its
// peak, and one decoder layer's forward composed from its ops. ledger_step.cpp runs the step.

#include "step.h"

namespace headroom::est {

// CUDACachingAllocator::round_size: every block is a multiple of 512 bytes.
inline int64_t roundBlock(int64_t b)
{
    return b <= 0 ? 0 : checkedMul((b + 511) / 512, 512);
}

class Ledger
{
public:
    void alloc(C c, int64_t bytes)
    {
        bytes = roundBlock(bytes);
        m_cur[c] += bytes;
        m_total += bytes;
        if (m_total > m_peak) {
            m_peak = m_total;
            m_atPeak = m_cur;
        }
    }
    void free(C c, int64_t bytes)
    {
        bytes = roundBlock(bytes);
        m_cur[c] -= bytes;
        m_total -= bytes;
    }
    void move(C from, C to, int64_t bytes)
    {
        bytes = roundBlock(bytes);
        m_cur[from] -= bytes;
        m_cur[to] += bytes;
    }
    // Add a breakdown already rounded (a composed layer), `times` times.
    void add(const Breakdown &b, int64_t times = 1)
    {
        for (size_t i = 0; i < b.bytes.size(); ++i) {
            const int64_t v = checkedMul(b.bytes[i], times);
            m_cur.bytes[i] += v;
            m_total += v;
        }
        if (m_total > m_peak) {
            m_peak = m_total;
            m_atPeak = m_cur;
        }
    }
    // A momentary excursion on top of the current state (a layer's inner peak).
    void probe(const Breakdown &b)
    {
        const int64_t t = m_total + b.total();
        if (t > m_peak) {
            m_peak = t;
            m_atPeak = m_cur;
            for (size_t i = 0; i < b.bytes.size(); ++i)
                m_atPeak.bytes[i] += b.bytes[i];
        }
    }
    void resetPeak()
    {
        m_peak = m_total;
        m_atPeak = m_cur;
    }
    int64_t total() const { return m_total; }
    int64_t peak() const { return m_peak; }
    const Breakdown &current() const { return m_cur; }
    const Breakdown &atPeak() const { return m_atPeak; }

private:
    Breakdown m_cur;
    Breakdown m_atPeak;
    int64_t m_total = 0;
    int64_t m_peak = 0;
};

inline Breakdown minus(const Breakdown &a, const Breakdown &b)
{
    Breakdown r;
    for (size_t i = 0; i < a.bytes.size(); ++i)
        r.bytes[i] = a.bytes[i] - b.bytes[i];
    return r;
}

// The input of a group of Linears (q/k/v share the norm output; gate/up share it too).
struct Input
{
    int64_t tokens = 0;
    int64_t features = 0;
    int bytes = 2;
    bool saved = false;     // a consumer saved this very tensor for backward
    bool requiresGrad = true; // false for layer 0's input under LoRA (frozen embedding)
    int64_t size() const { return checkedMul(checkedMul(tokens, features), bytes); }
};

struct LayerCost
{
    Breakdown keep;      // what the layer leaves saved for backward
    Breakdown excursion; // its inner peak above the level it started at
};

int64_t linear(Ledger &L, Ctx &x, Module mod, Input &in, int64_t outF, bool grad);
void releaseInput(Ledger &L, Input &in, bool keepAsActivation);
Input norm(Ledger &L, Ctx &x, int64_t tokens, int64_t features, int inBytes, bool gradIn, bool grad, bool &inputSaved);
int64_t rope(Ledger &L, Ctx &x, int64_t inBytes, int64_t features);
int64_t attention(Ledger &L, Ctx &x, int64_t qBytes, int64_t kBytes, int64_t vBytes, bool grad, bool &outSaved);
int64_t mlp(Ledger &L, Ctx &x, Input &in, int64_t inter, bool grad);
// One decoder layer's forward: what it keeps for backward and its inner peak.
LayerCost layerForward(Ctx &x, bool gradIn, bool grad);

} // namespace headroom::est
