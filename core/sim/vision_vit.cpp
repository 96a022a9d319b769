// Issue 30: the ViT towers of fixed-size images as Transformers 5.17 runs them, frozen: SigLIP
// with Gemma 3's projector (models/siglip/modeling_siglip.py, models/gemma3/modeling_gemma3.py),
// Gemma 3's block-causal masks, and CLIP with LLaVA's projector (models/clip/modeling_clip.py,
// models/llava/modeling_llava.py). In the order the H100 allocator timelines of
// tests/data/h200/vl-2026-12-05 show it. See Note [Vision step] (docs/estimator.md).
#include "vision.h"

#include "headroom/error.h"

#include <algorithm>

namespace headroom::sim {

namespace {

// nn.LayerNorm without autograd over `rows` x `width`; `strided`: the input is not contiguous
// (SigLIP's residual stream keeps the patch embedding's transposed layout), and layer_norm
// copies it contiguous first (freed when it returns).
T vitNorm(Sim &S, int64_t rows, int64_t width, int elem, bool strided)
{
    T copy = strided ? S.make(rows * width * elem, elem) : T{};
    T out = S.make(rows * width * elem, elem);
    T mean = S.make(rows * 4, 4), rstd = S.make(rows * 4, 4);
    if (copy.valid())
        S.drop(copy);
    S.drop(mean);
    S.drop(rstd);
    return out;
}

// An activation without autograd: one tensor, or QuickGELU's x * sigmoid(1.702 * x) (the product
// by the scalar, its sigmoid, the product; each intermediate goes when the next is made).
T activation(Sim &S, const T &x, bool quick)
{
    if (!quick)
        return S.make(x.bytes, x.elem);
    T scaled = S.make(x.bytes, x.elem);
    T sig = S.make(x.bytes, x.elem);
    S.drop(scaled);
    T out = S.make(x.bytes, x.elem);
    S.drop(sig);
    return out;
}

// One encoder layer without autograd (SiglipEncoderLayer, CLIPEncoderLayer) over `x` [N, H] in
// `images` sequences of N / images: layer_norm1, q, k and v, SDPA (the flash kernel over all the
// images at once: its Philox seed and offset and a 256-byte buffer around the output), out_proj,
// the residual; layer_norm2, fc1, GELU, fc2, the residual.
T vitLayer(Sim &S, const ModelArch::VisionSide &v, const T &x, int elem, bool strided)
{
    const auto &t = v.tower;
    const int64_t H = t.hidden, N = x.bytes / (H * elem), bytes = N * H * elem;
    S.setOp("visual.layer_norm1");
    T n1 = vitNorm(S, N, H, elem, strided);
    S.setOp("visual.self_attn");
    T q = S.make(bytes, elem), k = S.make(bytes, elem), vv = S.make(bytes, elem);
    S.blasWorkspace(0);
    S.blasLtWorkspace();
    T seed = S.make(8, 8), offset = S.make(8, 8);
    T out = S.make(bytes, elem);
    T scratch = S.make(256, 1);
    S.drop(scratch);
    S.drop(seed);
    S.drop(offset);
    T proj = S.make(bytes, elem);
    S.drop(out);
    S.drop(q);
    S.drop(k);
    S.drop(vv);
    S.drop(n1);
    T h1 = S.make(bytes, elem);
    S.drop(proj);
    S.setOp("visual.layer_norm2");
    T n2 = vitNorm(S, N, H, elem, strided);
    S.setOp("visual.mlp");
    T fc1 = S.make(N * t.inter * elem, elem);
    T act = activation(S, fc1, t.quickGelu);
    S.drop(fc1);
    T fc2 = S.make(bytes, elem);
    S.drop(act);
    S.drop(n2);
    T h2 = S.make(bytes, elem);
    S.drop(fc2);
    S.drop(h1);
    return h2;
}

// Gemma3RMSNorm without autograd over `rows` x `width` rows that are a transposed view: the fp32
// copy (in the view's layout), its square, and the mean over the last (strided) dimension, which
// ATen reduces through a staging buffer of twice the fp32 rows and a 16-byte semaphore (the H100
// timelines: 4,718,592 bytes for 512 rows of 1,152); then x * rsqrt(mean + eps), the weight's
// (1 + w) in fp32, the product, and the cast back.
T stridedGemmaNorm(Sim &S, int64_t rows, int64_t width, int elem)
{
    const int64_t f32 = rows * width * 4;
    T x32 = S.make(f32, 4);
    T sq = S.make(f32, 4);
    T mean = S.make(rows * 4, 4);
    T staging = S.make(2 * f32, 4);
    T semaphore = S.make(16, 4);
    S.drop(semaphore);
    S.drop(staging);
    S.drop(sq);
    T eps = S.make(rows * 4, 4);
    S.drop(mean);
    T rs = S.make(rows * 4, 4);
    S.drop(eps);
    T normed = S.make(f32, 4);
    S.drop(rs);
    S.drop(x32);
    T w32 = S.make(width * 4, 4);
    T w1 = S.make(width * 4, 4);
    S.drop(w32);
    T prod = S.make(f32, 4);
    S.drop(w1);
    S.drop(normed);
    T cast = S.make(rows * width * elem, elem);
    S.drop(prod);
    return cast;
}

// Where an encoder layer's weights sit among its 16 parameters (weight, then bias): SigLIP
// registers layer_norm1, k, v, q, out_proj, layer_norm2, fc1, fc2; CLIP k, v, q, out_proj,
// layer_norm1, fc1, fc2, layer_norm2.
struct LayerOrder
{
    int ln1, k, v, q, o, ln2, fc1, fc2;
};
constexpr LayerOrder kSiglipOrder{0, 2, 4, 6, 8, 10, 12, 14}, kClipOrder{8, 0, 2, 4, 6, 14, 10, 12};

// An activation as nodes: GELU (saves its input), or QuickGELU's x * sigmoid(1.702 x) (the scaled
// copy goes once the sigmoid, which keeps its result, is made; the product keeps both).
T activationGraph(Ops &O, const T &x, bool quick)
{
    if (!quick)
        return O.activation(x, "gelu");
    T scaled = O.scale(x);
    T sig = O.sigmoid(scaled);
    O.s.drop(scaled);
    T out = O.mul(x, sig, x.numel(), x.elem);
    O.s.drop(sig);
    return out;
}

// One encoder layer in the autograd graph: the no-grad layer's ops as nodes (`w` its 16
// parameters in `order`), over `x` [N, H] in `images` sequences.
T vitLayerGraph(Sim &S, const ModelArch::VisionSide &v, const T &x, const T *w, int64_t images, int elem,
                bool strided, const LayerOrder &order)
{
    Ops O(S);
    const auto &t = v.tower;
    const int64_t H = t.hidden, N = x.bytes / (H * elem);
    S.setOp("visual.layer_norm1");
    T n1 = O.layerNorm(x, w[order.ln1], w[order.ln1 + 1], N, H, elem, strided);
    S.setOp("visual.self_attn");
    T q = O.linear(n1, w[order.q], &w[order.q + 1], N, H, H, elem);
    T k = O.linear(n1, w[order.k], &w[order.k + 1], N, H, H, elem);
    T vv = O.linear(n1, w[order.v], &w[order.v + 1], N, H, H, elem);
    T qh = O.headsView(q, false), kh = O.headsView(k, false), vh = O.headsView(vv, false);
    Ops::AttnShape a;
    a.b = images;
    a.s = N / images;
    a.heads = a.kvHeads = t.heads;
    a.dq = a.dv = H / t.heads;
    T attn = O.sdpaFlash(qh, kh, vh, a, elem);
    for (T *u : {&qh, &kh, &vh})
        S.drop(*u);
    T proj = O.linear(attn, w[order.o], &w[order.o + 1], N, H, H, elem);
    for (T *u : {&attn, &q, &k, &vv, &n1})
        S.drop(*u);
    T h1 = O.add(x, proj);
    S.drop(proj);
    S.setOp("visual.layer_norm2");
    T n2 = O.layerNorm(h1, w[order.ln2], w[order.ln2 + 1], N, H, elem, strided);
    S.setOp("visual.mlp");
    T fc1 = O.linear(n2, w[order.fc1], &w[order.fc1 + 1], N, H, t.inter, elem);
    T act = activationGraph(O, fc1, t.quickGelu);
    S.drop(fc1);
    T fc2 = O.linear(act, w[order.fc2], &w[order.fc2 + 1], N, t.inter, H, elem);
    S.drop(act);
    S.drop(n2);
    T h2 = O.add(h1, fc2);
    S.drop(fc2);
    S.drop(h1);
    return h2;
}

} // namespace

namespace {

// The patch embedding's Conv2d as a node on its made output `conv`: it keeps the cast pixels and
// its weight; ConvolutionBackward0 for the weight (and bias): the transposed gradient made
// contiguous, the weight's gradient (cuDNN's backward-filter workspace, freed at once, is left
// out); the bias's through an fp32 reduction of twice the rows.
} // namespace

void convolutionNode(Sim &S, T &conv, const T &pixels, const T &weight, const T *bias)
{
    const int64_t wBytes = weight.bytes, bBytes = bias ? bias->bytes : 0, convBytes = conv.bytes;
    const int elem = conv.elem;
    std::vector<const T *> inputs{&pixels, &weight};
    if (bias)
        inputs.push_back(bias);
    S.record({&conv}, inputs, {pixels.sto, weight.sto}, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        std::vector<int> r(needs.size(), -1);
        if (g[0] < 0)
            return r;
        if (needs[1]) {
            const int copy = s.allocate(convBytes, Category::Temporaries);
            r[1] = s.allocate(wBytes, Category::Temporaries);
            s.unref(copy);
        }
        if (needs.size() > 2 && needs[2]) {
            r[2] = s.allocate(bBytes, Category::Temporaries);
            s.unref(s.allocate(convBytes / elem * 8, Category::Temporaries));
        }
        return r;
    });
}

namespace {

// The SigLIP tower without autograd (nothing in it requires grad): returns post_layernorm's
// output (last_hidden_state); the embeddings and the last layer's output are gone.
T siglipTower(Sim &S, const ModelArch::VisionSide &v, int64_t images, int elem)
{
    const auto &t = v.tower;
    const int64_t side = v.imageSize / v.patch, P = side * side, N = images * P, H = t.hidden;
    // SiglipVisionEmbeddings: the pixels cast to the tower's dtype, the Conv2d (B, H, side, side),
    // its rows flattened and transposed (a view), plus position_embedding(position_ids)
    S.setOp("visual.embeddings");
    T pixels = S.make(images * t.inputWidth * v.imageSize * v.imageSize * elem, elem);
    T conv = S.make(N * H * elem, elem);
    S.drop(pixels);
    T pos = S.make(P * H * elem, elem);
    T embeddings = S.make(N * H * elem, elem); // held by the tower's forward to its end
    S.drop(pos);
    S.drop(conv);
    T hidden = S.view(embeddings);
    for (int64_t l = 0; l < t.depth; ++l) {
        S.setLayer(-1);
        T next = vitLayer(S, v, hidden, elem, true);
        S.drop(hidden);
        hidden = next;
    }
    S.setOp("visual.post_layernorm");
    T last = vitNorm(S, N, H, elem, true);
    S.drop(embeddings);
    S.drop(hidden);
    return last;
}

// The SigLIP tower in the autograd graph: its weights trained, or its patch embedding hooked
// (PEFT's input hook under gradient checkpointing: the Conv2d's output a leaf that requires grad,
// kept with its .grad to the end of backward). The Conv2d as a node keeps the cast pixels and its
// weight; each encoder layer is checkpointed where `checkpointed` (its input held for the recompute).
T siglipTowerGraph(Sim &S, const ModelArch::VisionSide &v, const std::vector<T> &w, int64_t images, int elem,
                   bool hooked, bool checkpointed)
{
    Ops O(S);
    const auto &t = v.tower;
    const int64_t side = v.imageSize / v.patch, P = side * side, N = images * P, H = t.hidden;
    const size_t post = 4 + 16 * static_cast<size_t>(t.depth);
    S.setOp("visual.embeddings");
    T pixels = S.make(images * t.inputWidth * v.imageSize * v.imageSize * elem, elem);
    T conv = S.make(N * H * elem, elem);
    convolutionNode(S, conv, pixels, w[0], &w[1]);
    S.drop(pixels);
    T patches = hooked ? S.inputLeaf(conv) : conv;
    T pos = O.embedding(w[2], w[3], P, P, H);
    T embeddings = O.add(patches, pos);
    S.drop(pos);
    S.drop(conv);
    T hidden = S.view(embeddings);
    for (int64_t l = 0; l < t.depth; ++l) {
        S.setLayer(-1);
        const T *lw = &w[4 + 16 * static_cast<size_t>(l)];
        T next;
        if (checkpointed) {
            const T in = hidden;
            S.beginRegion([&S, &v, lw, in, images, elem]() {
                T o = vitLayerGraph(S, v, in, lw, images, elem, true, kSiglipOrder);
                S.drop(o);
            }, {&hidden});
            next = vitLayerGraph(S, v, hidden, lw, images, elem, true, kSiglipOrder);
            S.endRegion();
        } else
            next = vitLayerGraph(S, v, hidden, lw, images, elem, true, kSiglipOrder);
        S.drop(hidden);
        hidden = next;
    }
    S.setOp("visual.post_layernorm");
    T last = O.layerNorm(hidden, w[post], w[post + 1], N, H, elem, true);
    S.drop(embeddings);
    S.drop(hidden);
    return last;
}

// Gemma3MultiModalProjector over `last` (consumed): the patches back to (B, H, side, side)
// contiguous, AvgPool2d to tokens per image, Gemma3RMSNorm over the pooled rows (a transposed
// view), the projection matmul. Without autograd (`w` null) the norm's strided mean takes ATen's
// staging buffer; as nodes (`w`: the projection matrix and the norm's weight), AvgPool2d keeps
// its input and its backward spreads the gradient over it, and the norm's (1 + weight) in fp32 is
// a node where the weight trains.
T gemmaProjector(Sim &S, const ModelArch::VisionSide &v, T last, const T *w, int64_t images, int64_t textHidden,
                 int elem)
{
    const int64_t H = v.tower.hidden, N = last.bytes / (H * elem), R = images * v.tokensPerImage;
    S.setOp("multi_modal_projector");
    if (!w) {
        T grid = S.make(N * H * elem, elem);
        T pooled = S.make(R * H * elem, elem);
        T normed = stridedGemmaNorm(S, R, H, elem);
        T projected = S.make(R * textHidden * elem, elem);
        for (T *u : {&grid, &pooled, &normed, &last})
            S.drop(*u);
        return projected;
    }
    Ops O(S);
    T grid = O.copy(last);
    T pooled = S.make(R * H * elem, elem);
    const int64_t gridBytes = grid.bytes;
    S.record({&pooled}, {&grid}, {grid.sto}, [gridBytes](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        return std::vector<int>{needs[0] && g[0] >= 0 ? s.allocate(gridBytes, Category::Temporaries) : -1};
    });
    T x32 = O.to(pooled, 4);
    T variance;
    T normed = O.rmsNormalize(x32, R, true, variance);
    if (variance.valid())
        S.drop(variance);
    S.drop(x32);
    T w32 = O.to(w[1], 4);
    T w1 = O.addScalar(w32);
    S.drop(w32);
    T scaled = O.mul(normed, w1, R * H, 4, true, false, R);
    S.drop(w1);
    S.drop(normed);
    T cast = O.to(scaled, elem);
    S.drop(scaled);
    T projected = O.linear(cast, w[0], nullptr, R, H, textHidden, elem);
    for (T *u : {&grid, &pooled, &cast, &last})
        S.drop(*u);
    return projected;
}

} // namespace

T siglipFeatures(Sim &S, const ModelArch::VisionSide &v, const std::vector<T> &w, const TowerMode &mode,
                 int64_t images, int64_t textHidden, int elem)
{
    const int64_t side = v.imageSize / v.patch, P = side * side;
    if (images <= 0 || P <= 0)
        throw InputError("vision.images", std::to_string(images), "makes no patches");
    const size_t post = 4 + 16 * static_cast<size_t>(v.tower.depth);
    if (w.size() != post + 4)
        throw std::logic_error("siglip tower: " + std::to_string(w.size()) + " weights");
    const bool graph = mode.towerTrained || mode.hooked;
    T last = graph ? siglipTowerGraph(S, v, w, images, elem, mode.hooked, mode.checkpointed)
                   : siglipTower(S, v, images, elem);
    const bool projectorGraph = graph || mode.projectorTrained;
    return gemmaProjector(S, v, last, projectorGraph ? &w[post + 2] : nullptr, images, textHidden, elem);
}

T clipFeatures(Sim &S, const ModelArch::VisionSide &v, const std::vector<T> &w, const TowerMode &mode,
               int64_t images, int64_t textHidden, int elem)
{
    const auto &t = v.tower;
    const int64_t side = v.imageSize / v.patch, P = side * side, N = images * (P + 1), H = t.hidden;
    if (images <= 0 || P <= 0)
        throw InputError("vision.images", std::to_string(images), "makes no patches");
    // CLIPVisionEmbeddings: the pixels cast, the Conv2d (cuDNN's workspace beside it, freed), the
    // class embedding and the patches concatenated, plus position_embedding(position_ids). Where
    // the patch embedding is hooked (gradient checkpointing: Transformers' input hook on every
    // sub-model's input embeddings), the Conv2d's output is a leaf that requires grad and the
    // tower runs as nodes, each layer checkpointed.
    const bool graph = mode.hooked || mode.towerTrained;
    Ops O(S);
    S.setOp("visual.embeddings");
    T pixels = S.make(images * t.inputWidth * v.imageSize * v.imageSize * elem, elem);
    T conv = S.make(images * P * H * elem, elem);
    if (mode.towerTrained)
        convolutionNode(S, conv, pixels, w[1], nullptr);
    S.drop(pixels);
    T patches = mode.hooked && !mode.towerTrained ? S.inputLeaf(conv) : conv;
    // class_embedding.expand(images, 1, -1): a view; ExpandBackward0 sums the gradient back to
    // the parameter's size
    T cls = S.detachedView(w[0]);
    const int64_t clsBytes = w[0].bytes;
    if (graph && S.record({&cls}, {&w[0]}, {}, [clsBytes](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
            return std::vector<int>{needs[0] && g[0] >= 0 ? s.allocate(clsBytes, Category::Temporaries) : -1};
        }) < 0)
        cls = S.view(w[0]);
    T cat = graph ? O.cat({&cls, &patches}, N * H, elem) : S.make(N * H * elem, elem);
    S.drop(cls);
    T pos = mode.towerTrained ? O.embedding(w[2], w[3], P + 1, P + 1, H) : S.make((P + 1) * H * elem, elem);
    T embeddings = graph ? O.add(cat, pos) : S.make(N * H * elem, elem);
    S.drop(pos);
    S.drop(cat);
    S.drop(conv);
    // pre_layrnorm, then the layers; output_hidden_states=True keeps every layer's input and output
    S.setOp("visual.pre_layrnorm");
    std::vector<T> states{graph ? O.layerNorm(embeddings, w[4], w[5], N, H, elem) : vitNorm(S, N, H, elem, false)};
    S.drop(embeddings);
    // The layers past the last selected hidden state (and post_layernorm) feed nothing the loss
    // reads: their nodes go with the output object when get_image_features returns, so they run
    // here as without autograd (their parameters get no gradient, and no optimizer state)
    const int64_t used = *std::max_element(t.featureLayers.begin(), t.featureLayers.end());
    for (int64_t l = 0; l < t.depth; ++l) {
        S.setLayer(-1);
        if (!graph || l >= used) {
            states.push_back(vitLayer(S, v, states.back(), elem, false));
            continue;
        }
        const T *lw = &w[6 + 16 * static_cast<size_t>(l)];
        const T in = states.back();
        if (mode.checkpointed)
            S.beginRegion([&S, &v, lw, in, images, elem]() {
                T o = vitLayerGraph(S, v, in, lw, images, elem, false, kClipOrder);
                S.drop(o);
            }, {&in});
        states.push_back(vitLayerGraph(S, v, in, lw, images, elem, false, kClipOrder));
        if (mode.checkpointed)
            S.endRegion();
    }
    // post_layernorm over the class tokens (pooler_output, bound until get_image_features returns)
    S.setOp("visual.post_layernorm");
    T pooled = vitNorm(S, images, H, elem, true); // of a strided view: copied contiguous first
    // LlavaMultiModalProjector over the selected hidden states (without the class token: a view;
    // several layers: their cat): linear_1, the activation, linear_2
    S.setOp("multi_modal_projector");
    const int64_t R = images * v.tokensPerImage, layers = static_cast<int64_t>(t.featureLayers.size());
    const T &state = states[static_cast<size_t>(t.featureLayers[0])];
    T selected = layers > 1 ? S.make(R * H * layers * elem, elem) : S.view(state, R * H * elem);
    T l2;
    if (mode.projectorTrained || graph) {
        // as nodes: linear_1 keeps the selected state (a view keeps the whole hidden state),
        // the activation its input, linear_2 its input
        const size_t p = w.size() - (t.projectorBias ? 4 : 2);
        const T *b1 = t.projectorBias ? &w[p + 1] : nullptr, *b2 = t.projectorBias ? &w[p + 3] : nullptr;
        const T &w2 = w[p + (t.projectorBias ? 2 : 1)];
        // the class token's slice is not contiguous: matmul's reshape copies it, and that copy
        // is what linear_1 keeps (the hidden state itself can go)
        if (layers == 1) {
            T copied = O.copy(selected);
            S.drop(selected);
            selected = copied;
        }
        T l1 = O.linear(selected, w[p], b1, R, H * layers, textHidden, elem);
        T act = O.activation(l1, t.projectorGelu);
        S.drop(l1);
        l2 = O.linear(act, w2, b2, R, textHidden, textHidden, elem);
        S.drop(act);
    } else {
        T l1 = S.make(R * textHidden * elem, elem);
        T act = activation(S, l1, t.projectorGelu == "quick_gelu");
        S.drop(l1);
        l2 = S.make(R * textHidden * elem, elem);
        S.drop(act);
    }
    S.drop(selected);
    S.drop(pooled);
    for (auto it = states.rbegin(); it != states.rend(); ++it)
        S.drop(*it);
    // LlavaModel.forward: torch.cat of list(image_features), a copy (CatBackward hands views of
    // the gradient back); the projector's output goes
    S.setOp("visual.features");
    T features = O.cat({&l2}, l2.numel(), elem);
    S.drop(l2);
    return features;
}

std::array<T, 2> blockCausalMasks(Sim &S, int64_t b, int64_t s)
{
    S.setOp("block_causal_mask");
    const int64_t square = s * s, batched = b * s * s;
    // create_causal_mask(block_sequence_ids=...): the causal (s, s) mask, its or with the
    // padding, then the blockwise overlay over the batch (two (b, s, s) temporaries), or-ed in
    const auto causalOrBlocks = [&]() {
        T causal = S.make(square, 1);
        T padded = S.make(square, 1);
        S.drop(causal);
        T blocks = S.make(batched, 1);
        T blocks2 = S.make(batched, 1);
        S.drop(blocks);
        T mask = S.make(batched, 1);
        S.drop(blocks2);
        S.drop(padded);
        return mask;
    };
    T full = causalOrBlocks();
    // the sliding layers' mask: the same, and-ed with the sliding window's (s, s)
    T either = causalOrBlocks();
    T anded = S.make(batched, 1);
    S.drop(either);
    T window = S.make(square, 1);
    T sliding = S.make(batched, 1);
    S.drop(window);
    S.drop(anded);
    return {full, sliding};
}

} // namespace headroom::sim
