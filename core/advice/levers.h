#pragma once
// A lever: one change to a configuration that lowers its peak, with what it costs. Each lever is
// one entry of levers() (levers.cpp), holding both ways recommend() uses it: as a change on its
// own, and as a step of the combined plan offered when no single change fits.

#include "headroom/budget.h"

#include <string>
#include <vector>

namespace headroom::advice {

// Whether `t` fits the card (judge() says Fits); false where it cannot be estimated (beyond 64-bit
// bytes, a refused configuration): what the solvers and the levers ask of each candidate.
bool fitsOn(const ModelArch &m, const TrainingConfig &t, const GpuSpec &gpu, double reserve, const EstimatorOptions &opt);

// What a lever sees: the model, the user's configuration, the card and its estimate.
struct LeverContext
{
    const ModelArch &m;
    const TrainingConfig &c;
    const GpuSpec &gpu;
    double reserve;
    const EstimatorOptions &opt;
    const Estimate &base;
    const Room &room; // how far c can grow on the card, searched once for every lever
    bool fits(const TrainingConfig &t) const; // judge() says Fits; false where it cannot estimate
};

// A change on its own: its recommendation id, one line, its cost, the changed configuration.
struct Change
{
    std::string id;
    std::string title;
    std::string cost;
    TrainingConfig config;
};

struct Lever
{
    RecommendationGroup group;
    // The changes it offers for ctx.c on their own (none where it does not apply), in order.
    std::vector<Change> (*alone)(const LeverContext &);
    // Its step in the combined plan: whether it applies to the user's configuration, what it
    // does to the plan's configuration so far, and the plan's words for it. planOrder 0: not in
    // the plan; the plan takes the steps by planOrder (cheapest first).
    int planOrder = 0;
    bool (*inPlan)(const TrainingConfig &c) = nullptr;
    void (*applyInPlan)(const LeverContext &, TrainingConfig &t) = nullptr;
    std::string (*planWhat)(const TrainingConfig &c) = nullptr;
    const char *planCost = "";
};

// Every lever, in the order of advice (docs/seeds.md): the dynamic peak first, then the static
// base, then sharding.
const std::vector<Lever> &levers();

} // namespace headroom::advice
